//! [`TokenIssuer::verify`](fencing_core::TokenIssuer::verify) for etcd: the
//! generic probe plus what etcd can tell about its own membership.
//!
//! Safety comes from raft: a revision (a token) is committed by a quorum
//! and never reused, whatever member answers. So a missing member, or a
//! missing leader, stops grants (etcd refuses writes without a leader and a
//! quorum) but cannot make a token go backwards: those are warnings. What
//! *can* make tokens go backwards is a client that talks to two clusters
//! (their revisions are unrelated), or a member whose data diverged (the
//! `CORRUPT` alarm): those are unsafe.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use etcd_client::{AlarmAction, AlarmType, Client, GetOptions, MemberListResponse, StatusResponse};
use fencing_core::Result;
use fencing_core::adapter::Call;
use fencing_core::safety::{self, SafetyCheck};
use fencing_core::tls::TlsOptions;

use crate::EtcdIssuer;
use crate::error::{Failure, map_error, permission_denied};

/// How long one member may take to answer a status and a read.
const MEMBER_TIMEOUT: Duration = Duration::from_secs(3);

/// The transport and authentication, the membership checks, the history
/// etcd keeps, then the generic probe.
pub(crate) async fn verify(issuer: &EtcdIssuer) -> Result<Vec<SafetyCheck>> {
    let mut checks = access(issuer);
    checks.extend(membership(issuer).await?);
    checks.push(history(issuer, HISTORY_REVISIONS).await?);
    safety::then_probe(issuer, checks).await
}

/// How many revisions of history `verify` lets etcd keep before it warns:
/// some 270 MB at the 270 bytes a grant and release leave, an eighth of
/// etcd's default 2 GiB quota (past the quota etcd refuses every write).
pub const HISTORY_REVISIONS: u64 = 1_000_000;

/// Whether etcd keeps more than `most` revisions of history: a read at the
/// revision `most` before the current one that is answered, not refused as
/// compacted, means nothing compacts the history (etcd's
/// `--auto-compaction-retention` is off by default) or keeps more than
/// that. Every grant and release adds revisions that only compaction
/// removes; a quota full of them stops every write, grants included. A
/// warning: compaction cannot touch tokens (a live key keeps its create
/// revision).
pub(crate) async fn history(issuer: &EtcdIssuer, most: u64) -> Result<SafetyCheck> {
    const NAME: &str = "history";
    let key = issuer.prefix().to_owned();
    let now = issuer
        .rpc()
        .get(key.clone(), GetOptions::new().with_count_only())
        .await
        .map_err(|e| map_error(e, Call::read("read the current revision")))?;
    let current = u64::try_from(now.header().map_or(0, |h| h.revision())).unwrap_or(0);
    let Some(old) = current.checked_sub(most).filter(|old| *old > 0) else {
        return Ok(SafetyCheck::pass(
            NAME,
            format!("{current} revisions in all, no more than the {most} this check allows"),
        ));
    };
    let read = issuer
        .rpc()
        .get(
            key,
            GetOptions::new()
                .with_count_only()
                .with_revision(i64::try_from(old).unwrap_or(i64::MAX)),
        )
        .await;
    match read {
        Ok(_) => Ok(SafetyCheck::warn(
            NAME,
            format!(
                "etcd keeps more than {most} revisions of history (revision {old} of {current} is not \
                 compacted): every grant and release adds about 270 bytes that only compaction removes, \
                 and a database at its quota (2 GiB by default) refuses every write, grants included; \
                 run etcd with --auto-compaction-mode=periodic --auto-compaction-retention=1h (or \
                 compact from a job), then defragment"
            ),
        )),
        Err(Failure::Etcd(etcd_client::Error::GRpcStatus(status)))
            if status.message().contains("compacted") =>
        {
            Ok(SafetyCheck::pass(
                NAME,
                format!("history before revision {old} (of {current}) is compacted"),
            ))
        }
        Err(e) => Err(map_error(e, Call::read("read an old revision"))),
    }
}

/// How the issuer reaches etcd: the transport (plaintext past the
/// loopback is a warning), and a user that etcd ignores (authentication
/// off) is a warning. Nothing for the caller's own client, whose TLS and
/// user this crate cannot see.
fn access(issuer: &EtcdIssuer) -> Vec<SafetyCheck> {
    let dial = issuer.dial();
    if dial.callers_client {
        return Vec::new();
    }
    let hosts: Vec<&str> = issuer.endpoints().iter().map(String::as_str).collect();
    let mut checks = vec![match dial.mode {
        Some(mode) => TlsOptions::transport_check(mode, &hosts),
        None => SafetyCheck::warn(
            "transport",
            "the transport is not known: whether TLS is used depends on how the client was built",
        ),
    }];
    if dial.auth_off {
        checks.push(SafetyCheck::warn(
            "auth",
            "a user was given, but etcd has authentication off (the login was refused with \"authentication \
             is not enabled\"): anyone who reaches etcd can write the issuer's keys; run etcdctl auth enable",
        ));
    }
    checks
}

/// A warning for a cluster-wide read the user's role may not make (etcd
/// 3.4 lets any user list members, status and alarms; later versions or
/// another setup may not): the issuer needs only its prefix, so this is no
/// failure of `verify`, only a check not made.
fn not_permitted(name: &str, what: &str, failure: &Failure) -> SafetyCheck {
    SafetyCheck::warn(
        name,
        format!(
            "not checked: the user's role may not {what} (etcd answered {}); the issuer needs rights on its \
             key prefix only, so this is no failure, but {what} is not verified",
            match failure {
                Failure::Etcd(etcd_client::Error::GRpcStatus(status)) =>
                    status.message().to_owned(),
                Failure::Etcd(e) => e.to_string(),
                Failure::Elapsed(after) => format!("nothing within {after:?}"),
            }
        ),
    )
}

async fn membership(issuer: &EtcdIssuer) -> Result<Vec<SafetyCheck>> {
    // On the issuer's own client: etcd-client puts the auth token on every
    // service's calls (one interceptor), the cluster service's included,
    // and etcd 3.6 refuses MemberList without it when auth is on (3.4,
    // which the tests run, does not ask).
    let list = issuer
        .rpc()
        .call(|mut c| async move { c.member_list().await })
        .await;
    let list: MemberListResponse = match list {
        Ok(list) => list,
        Err(e) if permission_denied(&e) => {
            let mut checks = vec![not_permitted("members", "list the members", &e)];
            checks.push(alarms_check(issuer, &|id| format!("{id:x}")).await?);
            return Ok(checks);
        }
        Err(e) => return Err(map_error(e, Call::read("list the members"))),
    };
    let cluster = list.header().map_or(0, |h| h.cluster_id());
    let members = list.members();
    let name_of = |id: u64| {
        members
            .iter()
            .find(|m| m.id() == id)
            .map_or_else(|| format!("{id:x}"), |m| display_name(m.name(), id))
    };
    let mut checks = vec![member_count(members)];

    // Each member on its own connection: the issuer's client balances over
    // its endpoints, so it cannot ask one member in particular.
    let mut answers: BTreeMap<String, std::result::Result<StatusResponse, String>> =
        BTreeMap::new();
    let mut leaders = BTreeSet::new();
    for member in members {
        let name = display_name(member.name(), member.id());
        let check = format!("member {name}");
        let Some(url) = member.client_urls().first() else {
            checks.push(SafetyCheck::warn(
                check,
                "not started (no client URL yet): it adds no failover until it is",
            ));
            continue;
        };
        let answer = member_status(issuer, url).await;
        checks.push(match &answer {
            Err(e) => SafetyCheck::warn(
                check,
                format!(
                    "unreachable at its client URL {url}: {e}. The cluster keeps granting while a quorum \
                     answers, and a member cannot grant on its own (it catches up from the leader before it \
                     serves); but one failure fewer is tolerated.{}",
                    if issuer.dial().callers_client {
                        " (This check connects without TLS or credentials: the issuer is on the caller's \
                         own client; EtcdConfig::connect_issuer dials with them.)"
                    } else {
                        ""
                    }
                ),
            ),
            Ok(status) => {
                let id = status.header().map_or(0, |h| h.cluster_id());
                if id != cluster {
                    SafetyCheck::unsafe_(
                        check,
                        format!(
                            "at {url} answers for cluster {id:x}, not {cluster:x}: its revisions are unrelated \
                             to this cluster's"
                        ),
                    )
                } else if !status.errors().is_empty() {
                    SafetyCheck::warn(
                        check,
                        format!("reports errors: {}", status.errors().join("; ")),
                    )
                } else {
                    leaders.insert(status.leader());
                    SafetyCheck::pass(
                        check,
                        format!(
                            "healthy at {url}: etcd {}, raft term {}, revision {}{}",
                            status.version(),
                            status.raft_term(),
                            status.header().map_or(0, |h| h.revision()),
                            if member.is_learner() {
                                " (a learner: no vote)"
                            } else {
                                ""
                            }
                        ),
                    )
                }
            }
        });
        answers.insert(url.clone(), answer);
    }
    checks.push(leader_check(&leaders, &name_of));
    if let Some(check) = endpoints_check(issuer, cluster, &mut answers).await {
        checks.push(check);
    }
    checks.push(alarms_check(issuer, &name_of).await?);
    Ok(checks)
}

/// A member's name, or its id before it has one.
fn display_name(name: &str, id: u64) -> String {
    if name.is_empty() {
        format!("{id:x}")
    } else {
        name.to_owned()
    }
}

/// How many members vote, and what that tolerates.
fn member_count(members: &[etcd_client::Member]) -> SafetyCheck {
    let voters = members.iter().filter(|m| !m.is_learner()).count();
    let tolerated = voters.saturating_sub(1) / 2;
    match voters {
        1 => SafetyCheck::warn(
            "members",
            "a single voting member: no failover. Tokens stay safe while its data survives; if its data \
             directory is lost or restored from an old snapshot, revisions restart below tokens already \
             granted (raise_floor above the old tokens before using it again)",
        ),
        n if n % 2 == 0 => SafetyCheck::warn(
            "members",
            format!(
                "{n} voting members: a quorum is {}, so it tolerates {tolerated} failure(s), as {} members \
                 would; an odd count is the usual choice",
                n / 2 + 1,
                n - 1
            ),
        ),
        n => SafetyCheck::pass(
            "members",
            format!(
                "{n} voting members: a quorum is {}, it tolerates {tolerated} failure(s)",
                n / 2 + 1
            ),
        ),
    }
}

/// One status and one linearizable read (of the issuer's prefix, which
/// its user may read) through the member at `url`, as `etcdctl endpoint
/// health` does: the read needs the member to reach a leader with a
/// quorum. On a connection of its own, with the issuer's TLS and user.
async fn member_status(
    issuer: &EtcdIssuer,
    url: &str,
) -> std::result::Result<StatusResponse, String> {
    let options = issuer
        .dial()
        .options
        .clone()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(MEMBER_TIMEOUT)
        .with_require_leader(true);
    let key = issuer.prefix();
    let ask = async {
        let mut client = Client::connect([url], Some(options)).await?;
        let status = client.status().await?;
        client
            .get(key, Some(GetOptions::new().with_count_only()))
            .await?;
        Ok::<_, etcd_client::Error>(status)
    };
    match tokio::time::timeout(MEMBER_TIMEOUT, ask).await {
        Ok(Ok(status)) => Ok(status),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {MEMBER_TIMEOUT:?}")),
    }
}

/// Whether the members that answered agree on one leader.
fn leader_check(leaders: &BTreeSet<u64>, name_of: &(dyn Fn(u64) -> String + Sync)) -> SafetyCheck {
    let mut ids = leaders.iter().copied();
    match (ids.next(), ids.next()) {
        (None, _) => SafetyCheck::warn(
            "leader",
            "no member answered, so no leader was seen: grants wait until a quorum answers",
        ),
        (Some(0), None) => SafetyCheck::warn(
            "leader",
            "no leader: etcd refuses every write until one is elected, so nothing is granted (and nothing \
             can be granted twice); grants wait",
        ),
        (Some(id), None) => SafetyCheck::pass(
            "leader",
            format!(
                "{} leads, as every member that answered agrees",
                name_of(id)
            ),
        ),
        _ => SafetyCheck::warn(
            "leader",
            format!(
                "members name different leaders ({}): an election in progress? Revisions still come from \
                 one raft log; run verify again",
                leaders
                    .iter()
                    .map(|&id| name_of(id))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    }
}

/// Whether every endpoint the issuer was connected to answers for the same
/// cluster (only known for [`EtcdConfig::connect_issuer`](crate::EtcdConfig::connect_issuer)). A client whose
/// endpoints span two clusters spreads its calls over both: their
/// revisions are unrelated, so tokens can go backwards.
async fn endpoints_check(
    issuer: &EtcdIssuer,
    cluster: u64,
    answers: &mut BTreeMap<String, std::result::Result<StatusResponse, String>>,
) -> Option<SafetyCheck> {
    let endpoints = issuer.endpoints();
    if endpoints.is_empty() {
        return None;
    }
    let mut foreign = Vec::new();
    let mut unreachable = Vec::new();
    for endpoint in endpoints {
        if !answers.contains_key(endpoint) {
            let answer = member_status(issuer, endpoint).await;
            answers.insert(endpoint.clone(), answer);
        }
        match &answers[endpoint] {
            Ok(status) => {
                let id = status.header().map_or(0, |h| h.cluster_id());
                if id != cluster {
                    foreign.push(format!("{endpoint} (cluster {id:x})"));
                }
            }
            Err(_) => unreachable.push(endpoint.as_str()),
        }
    }
    Some(if !foreign.is_empty() {
        SafetyCheck::unsafe_(
            "endpoints",
            format!(
                "the issuer's endpoints span two clusters: {} answer for another cluster than {cluster:x}. \
                 The client spreads its calls over all of them, and two clusters' revisions are unrelated, so \
                 tokens can go backwards: list the members of one cluster only",
                foreign.join(", ")
            ),
        )
    } else if !unreachable.is_empty() {
        SafetyCheck::warn(
            "endpoints",
            format!(
                "{} did not answer; the others are members of cluster {cluster:x}",
                unreachable.join(", ")
            ),
        )
    } else {
        SafetyCheck::pass(
            "endpoints",
            format!("every endpoint answers for cluster {cluster:x}"),
        )
    })
}

/// etcd's alarms: `NOSPACE` stops writes (no grants); `CORRUPT` means a
/// member's data diverged from the others'.
async fn alarms_check(
    issuer: &EtcdIssuer,
    name_of: &(dyn Fn(u64) -> String + Sync),
) -> Result<SafetyCheck> {
    let response = match issuer
        .rpc()
        .call(|mut c| async move { c.alarm(AlarmAction::Get, AlarmType::None, None).await })
        .await
    {
        Ok(response) => response,
        Err(e) if permission_denied(&e) => {
            return Ok(not_permitted("alarms", "list the alarms", &e));
        }
        Err(e) => return Err(map_error(e, Call::read("list the alarms"))),
    };
    let alarms = response.alarms();
    let named = |kind: AlarmType| {
        alarms
            .iter()
            .filter(|a| a.alarm() == kind)
            .map(|a| name_of(a.member_id()))
            .collect::<Vec<_>>()
    };
    let (corrupt, nospace) = (named(AlarmType::Corrupt), named(AlarmType::Nospace));
    Ok(if !corrupt.is_empty() {
        SafetyCheck::unsafe_(
            "alarms",
            format!(
                "CORRUPT on {}: a member's data diverged from the others', so revisions (tokens) it serves \
                 cannot be trusted; see etcd's data-corruption recovery",
                corrupt.join(", ")
            ),
        )
    } else if !nospace.is_empty() {
        SafetyCheck::warn(
            "alarms",
            format!(
                "NOSPACE on {}: etcd refuses writes, so nothing is granted, until space is freed \
                 (compact, defragment, disarm)",
                nospace.join(", ")
            ),
        )
    } else if alarms.is_empty() {
        SafetyCheck::pass("alarms", "none raised")
    } else {
        SafetyCheck::warn(
            "alarms",
            format!("{} alarm(s) of unknown kind", alarms.len()),
        )
    })
}
