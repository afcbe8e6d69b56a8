//! [`TokenIssuer::verify`](fencing_core::TokenIssuer::verify) for ZooKeeper:
//! the generic probe plus what the ensemble tells about itself.
//!
//! Safety comes from ZAB: a zxid (a token) is committed by a quorum and
//! never reused, and a new leader starts a higher epoch. So a server that
//! does not answer, or an ensemble between leaders, stops grants but
//! cannot make a token go backwards: warnings. What can is a connect string
//! that spans two ensembles (or an ensemble and a standalone server): a
//! session on one and a session on the other see unrelated zxids. That is
//! unsafe.
//!
//! The ensemble is read from `/zookeeper/config` (readable by anyone by
//! default) and each server of the connect string is asked `srvr`, the one
//! four-letter word ZooKeeper allows by default (`mntr` too, on the
//! leader, when `4lw.commands.whitelist` allows it), over TLS when the
//! sessions use it.
//!
//! Also: the transport (plaintext past the loopback is a warning), and,
//! with credentials, whether our znodes still let anyone write them.

use fencing_core::Result;
use fencing_core::safety::{self, SafetyCheck};
use fencing_core::tls::TlsOptions;
use zookeeper_client as zk;

use crate::access::{Access, PROBE_TIMEOUT, WRITE_PERMISSIONS, servers};
use crate::{TokenSource, ZkIssuer};

/// The ensemble checks, then the generic probe.
pub(crate) async fn verify(issuer: &ZkIssuer) -> Result<Vec<SafetyCheck>> {
    safety::then_probe(issuer, ensemble(issuer).await).await
}

/// With credentials: whether the prefix znode or a resource znode still
/// lets anyone (`world:anyone`) change it, as znodes made before the
/// credentials were (or by hand) do. The issuer leaves their ACL alone
/// (clients without credentials may still use them); `setAcl` fixes it.
async fn znode_acls(issuer: &ZkIssuer) -> Option<SafetyCheck> {
    const NAME: &str = "znode ACLs";
    let rpc = issuer.rpc();
    let user = rpc.access().user()?;
    let (prefix, client) = (issuer.prefix(), issuer.client());
    let failed = |e: zk::Error| {
        Some(SafetyCheck::warn(
            NAME,
            format!("could not read the ACLs under {prefix}: {e}"),
        ))
    };
    let children = match rpc.timed(client.list_children(prefix)).await {
        Ok(children) => children,
        Err(e) => return failed(e),
    };
    // Sent at once, answered in order.
    let pending: Vec<_> = std::iter::once(prefix.to_owned())
        .chain(children.iter().map(|c| format!("{prefix}/{c}")))
        .map(|path| (path.clone(), client.get_acl(&path)))
        .collect();
    let mut open = Vec::new();
    for (path, acl) in pending {
        match rpc.timed(acl).await {
            Ok((acls, _)) => {
                if let Some(granted) = anyone_may_write(&acls) {
                    open.push(format!("{path} ({granted})"));
                }
            }
            Err(zk::Error::NoNode) => {}
            Err(e) => return failed(e),
        }
    }
    if open.is_empty() {
        return Some(SafetyCheck::pass(
            NAME,
            format!(
                "{prefix} and its {} resource znode(s) let only digest user {user:?} change them",
                children
                    .iter()
                    .filter(|c| *c != crate::keys::KEEPER)
                    .count()
            ),
        ));
    }
    const SHOWN: usize = 5;
    let more = match open.len().saturating_sub(SHOWN) {
        0 => String::new(),
        more => format!(" and {more} more"),
    };
    Some(SafetyCheck::warn(
        NAME,
        format!(
            "world:anyone may change {} of {} znode(s): {}{more}; any client of the ensemble can rewrite a \
             floor or crowd the queue. Give them digest user {user:?}'s ACL (setAcl) once no client without \
             credentials uses them",
            open.len(),
            children.len() + 1,
            open[..open.len().min(SHOWN)].join(", ")
        ),
    ))
}

/// What `world:anyone` may do beyond reading, if anything.
fn anyone_may_write(acls: &[zk::Acl]) -> Option<zk::Permission> {
    let granted = acls
        .iter()
        .filter(|a| *a.auth_id() == zk::AuthId::anyone())
        .fold(zk::Permission::NONE, |all, a| all | a.permission());
    let writes = WRITE_PERMISSIONS
        .into_iter()
        .filter(|p| granted.has(*p))
        .fold(zk::Permission::NONE, |all, p| all | p);
    (writes != zk::Permission::NONE).then_some(writes)
}

/// Whether the resource znodes can be deleted: one deleted and made again
/// starts with cversion 0 and no floor.
async fn resource_znodes(issuer: &ZkIssuer) -> SafetyCheck {
    const NAME: &str = "resource znodes";
    let prefix = issuer.prefix();
    match issuer
        .rpc()
        .resources_deletable(&issuer.client(), prefix)
        .await
    {
        Ok(false) => SafetyCheck::pass(NAME, format!("{prefix}'s ACL lets nobody delete them")),
        Ok(true) => {
            let why = format!(
                "{prefix}'s ACL lets someone delete them (an earlier release made it, and this session \
                 may not change it; or a removal of an idle name is between opening it and closing it \
                 again): a resource znode deleted and made again has no floor"
            );
            match issuer.token_source() {
                TokenSource::ParentCversion => SafetyCheck::unsafe_(
                    NAME,
                    format!(
                        "{why}, and its cversion tokens start again at 1; take DELETE off the ACL"
                    ),
                ),
                TokenSource::Czxid => {
                    SafetyCheck::warn(NAME, format!("{why}; take DELETE off the ACL"))
                }
            }
        }
        Err(e) => SafetyCheck::warn(NAME, format!("could not read {prefix}'s ACL: {e}")),
    }
}

/// What `srvr` said about one server.
#[derive(Debug, PartialEq, Eq)]
enum Mode {
    Standalone,
    Leader,
    Follower,
    Observer,
    ReadOnly,
    Other(String),
}

async fn ensemble(issuer: &ZkIssuer) -> Vec<SafetyCheck> {
    let access = issuer.rpc().access();
    let hosts: Vec<&str> = servers(issuer.connect_string()).collect();
    let mut checks = vec![
        TlsOptions::transport_check(access.mode(), &hosts),
        resource_znodes(issuer).await,
    ];
    checks.extend(znode_acls(issuer).await);
    checks.push(config_check(issuer).await);
    let mut modes = Vec::new();
    for server in hosts {
        let check = format!("server {server}");
        let answer = match access.four_letter_word(server, "srvr").await {
            Ok(answer) => answer,
            Err(e) => {
                checks.push(SafetyCheck::warn(
                    check,
                    format!(
                        "unreachable: {e}. The ensemble keeps granting while a quorum answers, and a server \
                         cannot grant on its own (it syncs with the leader before it serves)"
                    ),
                ));
                continue;
            }
        };
        let Some(mode) = field(&answer, "Mode") else {
            checks.push(SafetyCheck::warn(
                check,
                format!(
                    "`srvr` gave no mode (not in 4lw.commands.whitelist, or not serving): {:?}",
                    answer.trim()
                ),
            ));
            continue;
        };
        let zxid = field(&answer, "Zxid").unwrap_or("?");
        let mode = match mode {
            "standalone" => Mode::Standalone,
            "leader" => Mode::Leader,
            "follower" => Mode::Follower,
            "observer" => Mode::Observer,
            "read-only" => Mode::ReadOnly,
            other => Mode::Other(other.to_owned()),
        };
        checks.push(match &mode {
            Mode::Standalone => SafetyCheck::warn(
                check,
                format!(
                    "standalone (zxid {zxid}): no failover; if its data directory is lost, zxids restart below \
                     tokens already granted (raise_floor above them before using it again)"
                ),
            ),
            Mode::ReadOnly => SafetyCheck::warn(
                check,
                format!("read-only (zxid {zxid}): cut off from the quorum, it refuses every grant"),
            ),
            Mode::Other(other) => SafetyCheck::warn(check, format!("mode {other:?} (zxid {zxid})")),
            Mode::Leader | Mode::Follower | Mode::Observer => {
                SafetyCheck::pass(check, format!("{mode:?} (zxid {zxid})").to_lowercase())
            }
        });
        modes.push((server, mode));
    }
    if let Some(check) = leader_check(access, &modes).await {
        checks.push(check);
    }
    checks
}

/// A `Name: value` line of a four-letter word's answer.
fn field<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    answer.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == name).then(|| value.trim())
    })
}

/// The ensemble's voting members, from `/zookeeper/config`.
async fn config_check(issuer: &ZkIssuer) -> SafetyCheck {
    let client = issuer.client();
    let config = match tokio::time::timeout(PROBE_TIMEOUT, client.get_config()).await {
        Ok(Ok((data, _))) => String::from_utf8_lossy(&data).into_owned(),
        Ok(Err(e)) => {
            return SafetyCheck::warn("ensemble", format!("could not read /zookeeper/config: {e}"));
        }
        Err(_) => {
            return SafetyCheck::warn(
                "ensemble",
                format!("/zookeeper/config: no answer within {PROBE_TIMEOUT:?}"),
            );
        }
    };
    // `server.N=host:quorum:election[:role][;client]`; the role is
    // `participant` unless it says `observer`.
    let servers: Vec<&str> = config
        .lines()
        .filter(|l| l.starts_with("server."))
        .collect();
    let observers = servers.iter().filter(|l| l.contains(":observer")).count();
    let voters = servers.len() - observers;
    let observed = if observers > 0 {
        format!(", and {observers} observer(s)")
    } else {
        String::new()
    };
    match voters {
        0 => SafetyCheck::warn(
            "ensemble",
            "no ensemble configured (a standalone server): no failover",
        ),
        1 => SafetyCheck::warn(
            "ensemble",
            format!("a single voting server{observed}: no failover"),
        ),
        n if n % 2 == 0 => SafetyCheck::warn(
            "ensemble",
            format!(
                "{n} voting servers{observed}: a quorum is {}, so it tolerates {} failure(s), as {} servers \
                 would; an odd count is the usual choice",
                n / 2 + 1,
                (n - 1) / 2,
                n - 1
            ),
        ),
        n => SafetyCheck::pass(
            "ensemble",
            format!(
                "{n} voting servers{observed}: a quorum is {}, it tolerates {} failure(s)",
                n / 2 + 1,
                (n - 1) / 2
            ),
        ),
    }
}

/// Whether the servers of the connect string form one ensemble with one
/// leader. `None` when there is nothing to say (no server answered).
async fn leader_check(access: &Access, modes: &[(&str, Mode)]) -> Option<SafetyCheck> {
    let leaders: Vec<&str> = modes
        .iter()
        .filter(|(_, m)| *m == Mode::Leader)
        .map(|(s, _)| *s)
        .collect();
    let standalone: Vec<&str> = modes
        .iter()
        .filter(|(_, m)| *m == Mode::Standalone)
        .map(|(s, _)| *s)
        .collect();
    let in_ensemble = modes
        .iter()
        .any(|(_, m)| matches!(m, Mode::Leader | Mode::Follower | Mode::Observer));
    // Each standalone server is an ensemble of its own; each leader leads one.
    let ensembles = standalone.len() + leaders.len().max(usize::from(in_ensemble));
    if ensembles > 1 {
        return Some(SafetyCheck::unsafe_(
            "one ensemble",
            format!(
                "the connect string spans {ensembles} ensembles (leaders: {leaders:?}, standalone: \
                 {standalone:?}): sessions land on any of them and their zxids are unrelated, so tokens can go \
                 backwards; list the servers of one ensemble only"
            ),
        ));
    }
    if !standalone.is_empty() || !in_ensemble {
        return None; // a standalone server leads itself; the server check said so
    }
    let Some(leader) = leaders.first() else {
        return Some(SafetyCheck::warn(
            "leader",
            "no server of the connect string leads: an election in progress, or the leader is not listed",
        ));
    };
    // `mntr` answers on the leader with its followers, if allowed.
    let synced = match access.four_letter_word(leader, "mntr").await {
        Ok(answer) => answer
            .lines()
            .find_map(|l| l.strip_prefix("zk_synced_followers"))
            .map(|n| format!(", {} synced follower(s)", n.trim()))
            .unwrap_or_default(),
        Err(_) => String::new(),
    };
    Some(SafetyCheck::pass(
        "leader",
        format!("{leader} leads{synced}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anyone_may_write_is_every_permission_but_read() {
        let anyone = |p| zk::Acl::new(p, zk::AuthId::anyone());
        assert_eq!(anyone_may_write(&[anyone(zk::Permission::READ)]), None);
        assert_eq!(anyone_may_write(&zk::Acls::creator_all()), None);
        let prefix = crate::access::prefix_permissions();
        assert_eq!(
            anyone_may_write(&[anyone(prefix)]),
            Some(zk::Permission::WRITE | zk::Permission::CREATE | zk::Permission::ADMIN)
        );
        let ours = zk::Acl::new(zk::Permission::ALL, zk::AuthId::new("digest", "u:x"));
        assert_eq!(
            anyone_may_write(&[ours, anyone(zk::Permission::READ | zk::Permission::CREATE)]),
            Some(zk::Permission::CREATE)
        );
    }

    #[test]
    fn fields_are_read_by_name() {
        let srvr = "Zookeeper version: 3.8.0\nZxid: 0x100000002\nMode: follower\n";
        assert_eq!(field(srvr, "Mode"), Some("follower"));
        assert_eq!(field(srvr, "Zxid"), Some("0x100000002"));
        assert_eq!(field(srvr, "Node count"), None);
    }
}
