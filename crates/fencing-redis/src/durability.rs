//! What "durable enough" means for a fence counter on Redis: the
//! [`Durability`] choice, and the server settings judged against it.

use std::time::Duration;

use fencing_core::adapter::Call;
use fencing_core::safety::{SafetyCheck, Verdict};
use fencing_core::tls::{TlsMode, TlsOptions};
use fencing_core::{Error, Result};
use redis::aio::ConnectionManager;

use crate::NAME;
use crate::error::map_error;

/// Whether to accept a Redis that could lose or re-issue a fence counter
/// value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// Refuse unless the server is a primary **without replicas**, with
    /// `appendonly yes`, `appendfsync always`, `no-appendfsync-on-rewrite
    /// no` and a `maxmemory-policy` that cannot evict the counter. The
    /// default. Role, replicas, the append-only file, the `maxmemory-policy`
    /// and that the counter has no TTL are checked again inside every grant
    /// (`CONFIG SET` can change a setting at run time), and everything again
    /// whenever the connection lands on another server process.
    /// (`appendfsync` and `no-appendfsync-on-rewrite` are not in `INFO`, which
    /// is all a script may read: a change of those at run time is seen by
    /// `verify`, or at the next reconnect.)
    #[default]
    Required,
    /// A primary with replicas, opted in: the persistence settings of
    /// [`Required`](Self::Required), at least `replicas` connected replicas,
    /// and `WAIT replicas timeout` after every grant and floor. A grant that
    /// fewer replicas acknowledged is released and refused. `WAIT` is not
    /// consensus: a failover can still promote a replica that missed a
    /// grant (one of more replicas than `replicas`, or one an operator
    /// promotes by hand); see the crate README.
    Replicated {
        /// How many replicas must acknowledge a grant (at least 1).
        replicas: u32,
        /// How long to wait for them (above zero: `WAIT` with 0 blocks
        /// forever).
        timeout: Duration,
    },
    /// Accept any server. After a restart without persistence, an eviction
    /// or a failover to a lagging replica, tokens can go **backwards** and a
    /// zombie's write can be accepted. For tests and demos only.
    AcceptVolatileCounter,
}

impl Durability {
    /// The replicas the grant script accepts: fewest, and most (`None`: no
    /// upper bound).
    pub(crate) fn replica_bounds(self) -> (u32, Option<u32>) {
        match self {
            Self::Replicated { replicas, .. } => (replicas, None),
            Self::Required | Self::AcceptVolatileCounter => (0, Some(0)),
        }
    }
}

/// Refuses a [`Durability::Replicated`] that cannot work: no replicas to
/// wait for, or a zero timeout (`WAIT` would block forever).
pub(crate) fn check_durability(durability: Durability) -> Result<()> {
    if let Durability::Replicated { replicas, timeout } = durability {
        if replicas == 0 {
            return Err(Error::invalid_input(
                "Durability::Replicated needs at least 1 replica; use Durability::Required for a primary without replicas",
            ));
        }
        if timeout.is_zero() {
            return Err(Error::invalid_input(
                "Durability::Replicated needs a timeout above zero (WAIT with 0 blocks forever)",
            ));
        }
    }
    Ok(())
}

/// What one setting of the server is, and what that means under a
/// durability choice.
pub(crate) struct Finding {
    /// The check's name in [`TokenIssuer::verify`].
    pub(crate) name: &'static str,
    pub(crate) verdict: Verdict,
    pub(crate) detail: String,
}

impl Finding {
    pub(crate) fn is_safe(&self) -> bool {
        self.verdict != Verdict::Unsafe
    }

    /// Judges `setting` (a `CONFIG` or `INFO` name) at `value`. The one place
    /// that decides what is unsafe: connect, the grant script's refusals and
    /// `verify` all use it. Under [`Durability::AcceptVolatileCounter`] a
    /// finding is judged as [`Durability::Required`] would, and says that
    /// the caller accepted it.
    pub(crate) fn judge(setting: &str, value: &str, durability: Durability) -> Self {
        let volatile_opt_in =
            "or pass Durability::AcceptVolatileCounter (tokens can then go backwards)";
        let (name, problem): (&'static str, Option<String>) = match setting {
            "appendonly" => ("appendonly", (value != "yes").then(|| format!(
                "appendonly is {value:?}: a restart resets the fence counter and re-issues old tokens; \
                 run Redis with `appendonly yes` and `appendfsync always`, {volatile_opt_in}"
            ))),
            "appendfsync" => ("appendfsync", (value != "always").then(|| format!(
                "appendfsync is {value:?}: a crash can lose the last `INCR`s and re-issue their tokens; \
                 set `appendfsync always`, {volatile_opt_in}"
            ))),
            "no-appendfsync-on-rewrite" => ("no-appendfsync-on-rewrite", (value != "no").then(|| format!(
                "no-appendfsync-on-rewrite is {value:?}: while the append-only file is rewritten or a snapshot \
                 is saved, writes are not fsynced, so a crash then loses `INCR`s and re-issues their tokens; \
                 set `no-appendfsync-on-rewrite no`, {volatile_opt_in}"
            ))),
            "maxmemory-policy" => ("maxmemory-policy", value.starts_with("allkeys").then(|| format!(
                "maxmemory-policy is {value:?}: it may evict the fence counter (a key without a TTL) and \
                 re-issue its tokens; use noeviction or a volatile-* policy, {volatile_opt_in}"
            ))),
            "fence-counter-ttl" => ("fence counter TTL", Some(format!(
                "the fence counter has a TTL ({value} ms left): when it expires, the tokens start again at 1; \
                 remove it with PERSIST (`{{prefix}}{{resource}}:fence`) and stop what set it (a TTL sweep over \
                 the prefix?), {volatile_opt_in}"
            ))),
            "role" => ("role", (value != "master").then(|| format!(
                "role is {value:?} (a replica): its counter lags the primary's, and what it grants is lost when \
                 it resyncs; connect to the primary"
            ))),
            _ => ("unknown", Some(format!("{setting} is {value:?}"))),
        };
        Self::from_problem(name, format!("{setting} is {value:?}"), problem, durability)
    }

    /// Judges the replicas: `connected` (`connected_slaves`, syncing ones
    /// included) and `online` (synced: only those acknowledge a `WAIT`).
    pub(crate) fn replicas(connected: &str, online: &str, durability: Durability) -> Self {
        let connected: u32 = connected.parse().unwrap_or(u32::MAX);
        let online: u32 = online.parse().unwrap_or(0);
        let seen = format!("connected_slaves is {connected} ({online} online)");
        let problem = match durability {
            Durability::Replicated { replicas, .. } if online >= replicas => {
                return Self {
                    name: "connected replicas",
                    verdict: Verdict::Warn,
                    detail: format!(
                        "{seen}: every grant waits until {replicas} of them acknowledge it (WAIT {replicas}). \
                         WAIT is not consensus: a failover can still promote a replica that missed a grant \
                         (one beyond the {replicas} that acknowledged, or one promoted by hand), and that \
                         replica re-issues its tokens"
                    ),
                };
            }
            Durability::Replicated { replicas, .. } => Some(format!(
                "{seen}, below the {replicas} online that Durability::Replicated waits for: no grant could \
                 be acknowledged; start the replicas (or wait for their sync) or lower `replicas`"
            )),
            _ => (connected > 0).then(|| {
                format!(
                    "{seen}: replication is asynchronous, so a failover to a replica that missed the last \
                     `INCR` re-issues its token; keep the counter on a primary without replicas, or pass \
                     Durability::Replicated {{ replicas, timeout }} to wait (WAIT) until replicas \
                     acknowledge every grant"
                )
            }),
        };
        Self::from_problem("connected replicas", seen, problem, durability)
    }

    fn from_problem(
        name: &'static str,
        seen: String,
        problem: Option<String>,
        durability: Durability,
    ) -> Self {
        match problem {
            None => Self {
                name,
                verdict: Verdict::Pass,
                detail: seen,
            },
            Some(mut detail) => {
                if durability == Durability::AcceptVolatileCounter {
                    detail.push_str(
                        " (accepted: this issuer was opened with Durability::AcceptVolatileCounter)",
                    );
                }
                Self {
                    name,
                    verdict: Verdict::Unsafe,
                    detail,
                }
            }
        }
    }
}

/// What [`inspect`] saw.
pub(crate) struct Server {
    pub(crate) run_id: String,
    pub(crate) findings: Vec<Finding>,
}

/// Reads every setting that decides whether the counter can be lost or a
/// token re-issued, and judges each.
pub(crate) async fn inspect(
    conn: &mut ConnectionManager,
    durability: Durability,
) -> Result<Server> {
    let info = |section: &'static str| {
        let mut conn = conn.clone();
        async move {
            redis::cmd("INFO")
                .arg(section)
                .query_async::<String>(&mut conn)
                .await
                .map_err(|e| map_error(e, Call::read("INFO")))
        }
    };
    let field = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    let server = info("server").await?;
    let replication = info("replication").await?;
    let mut findings = Vec::new();
    for name in [
        "appendonly",
        "appendfsync",
        "no-appendfsync-on-rewrite",
        "maxmemory-policy",
    ] {
        let pair: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query_async(&mut conn.clone())
            .await
            .map_err(|e| {
                unsafe_config(format!(
                    "cannot read `{name}` with CONFIG GET ({e}); the counter's durability is unknown"
                ))
            })?;
        let value = pair.get(1).cloned().unwrap_or_default();
        findings.push(Finding::judge(name, &value, durability));
    }
    findings.push(Finding::judge(
        "role",
        &field(&replication, "role"),
        durability,
    ));
    let online = replication.matches("state=online").count().to_string();
    findings.push(Finding::replicas(
        &field(&replication, "connected_slaves"),
        &online,
        durability,
    ));
    // The connection manager may reconnect between these calls, onto
    // another process: the findings are that of one process only if the
    // run_id is the same after them as before.
    let run_id = field(&server, "run_id");
    if field(&info("server").await?, "run_id") != run_id {
        return Err(Error::backend(
            NAME,
            true,
            "the Redis server process changed while its settings were being read",
        ));
    }
    Ok(Server { run_id, findings })
}

/// What the server says of a connection whose TLS settings the issuer did
/// not make (the caller's connection manager): TLS if it came in on the
/// server's `tls-port` (`CLIENT INFO`'s `laddr`), else plaintext to that
/// address.
pub(crate) async fn live_transport(conn: &mut ConnectionManager) -> SafetyCheck {
    const NAME: &str = "transport";
    let client = redis::cmd("CLIENT")
        .arg("INFO")
        .query_async::<String>(&mut conn.clone())
        .await;
    let tls_port = redis::cmd("CONFIG")
        .arg("GET")
        .arg("tls-port")
        .query_async::<Vec<String>>(conn)
        .await;
    let (client, tls_port) = match (client, tls_port) {
        (Ok(client), Ok(pair)) => (client, pair.get(1).cloned().unwrap_or_default()),
        (Err(e), _) | (_, Err(e)) => {
            return SafetyCheck::warn(
                NAME,
                format!(
                    "cannot tell whether the connection manager uses TLS (CLIENT INFO, CONFIG GET tls-port: {e})"
                ),
            );
        }
    };
    let Some(laddr) = client
        .split_whitespace()
        .find_map(|field| field.strip_prefix("laddr="))
    else {
        return SafetyCheck::warn(
            NAME,
            "cannot tell whether the connection manager uses TLS (CLIENT INFO shows no laddr)",
        );
    };
    let port = laddr.rsplit_once(':').map_or("", |(_, port)| port);
    if tls_port != "0" && port == tls_port {
        SafetyCheck::pass(
            NAME,
            format!(
                "TLS (the connection came in on the server's tls-port {port}); the certificate check is the connection manager's own setting"
            ),
        )
    } else {
        TlsOptions::transport_check(TlsMode::Disable, &[laddr])
    }
}

pub(crate) fn unsafe_config(reason: String) -> Error {
    Error::UnsafeConfiguration {
        backend: NAME,
        reason,
    }
}
