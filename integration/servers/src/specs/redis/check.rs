//! Whether a Redis member answers, and the set-ups that follow: the
//! replicated pair linked up, redis-tls refusing every way in but the test
//! user's.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::util::{output, output_all};
use crate::{Instance, Paths, Service};

/// `PING` answers `PONG`.
pub(super) fn probe(instance: &Instance) -> bool {
    output(
        3,
        "redis-cli",
        &[
            "-h",
            &instance.ip.to_string(),
            "-p",
            &instance.port.to_string(),
            "ping",
        ],
        &[],
    )
    .is_some_and(|out| out.trim() == "PONG")
}

/// Over TLS (the server's certificate verified against the test CA), as
/// the test user: `PING` answers `PONG`.
pub(super) fn probe_tls(instance: &Instance) -> bool {
    let (ok, out) = tls_cli(
        &instance.paths.tls,
        instance.ip,
        instance.port,
        true,
        &["ping"],
    );
    ok && out.trim() == "PONG"
}

/// `redis-cli` over TLS to `ip:port`: stdout and stderr together. With
/// `login`, as the test user; its password goes through the environment
/// (REDISCLI_AUTH), so it stays out of ps. It presents the test client
/// certificate, which the shared server merely accepts and a private one
/// started with `--tls-auth-clients yes` requires.
fn tls_cli(tls: &Path, ip: Ipv4Addr, port: u16, login: bool, args: &[&str]) -> (bool, String) {
    let file = |name: &str| tls.join(name).display().to_string();
    let (ca, cert, key) = (file("ca.pem"), file("client.pem"), file("client-key.pem"));
    let (ip, port) = (ip.to_string(), port.to_string());
    let mut all = vec![
        "--tls",
        "--cacert",
        &ca,
        "--cert",
        &cert,
        "--key",
        &key,
        "-h",
        &ip,
        "-p",
        &port,
        "--no-auth-warning",
    ];
    let mut env = Vec::new();
    if login {
        all.extend(["--user", crate::TLS_USER]);
        env.push(("REDISCLI_AUTH", crate::TLS_PASSWORD));
    }
    all.extend_from_slice(args);
    output_all(3, "redis-cli", &all, &env, None)
}

/// The plaintext way in must be shut: checked at each `up`, so a
/// misconfigured variant fails loudly.
pub(super) fn setup_tls(paths: &Paths, service: &Service) -> Result<(), String> {
    let member = &service.members[0];
    let at = format!(
        "{} on 127.0.0.1:{} (log {})",
        member.instance,
        member.port,
        paths
            .logs
            .join(format!("{}.log", member.instance))
            .display()
    );
    let ask = |login: bool, args: &[&str]| {
        tls_cli(&paths.tls, Ipv4Addr::LOCALHOST, member.port, login, args).1
    };
    // The default user is off: neither no login nor AUTH with the password
    // alone gets in.
    let out = ask(false, &["ping"]);
    if !out.contains("NOAUTH") {
        return Err(format!(
            "{at}: a client without login was not refused (it said: {})",
            out.trim()
        ));
    }
    if !ask(false, &["AUTH", crate::TLS_PASSWORD]).contains("WRONGPASS") {
        return Err(format!("{at}: AUTH without a user name was not refused"));
    }
    let out = ask(true, &["config", "get", "appendfsync"]);
    if !out.contains("always") {
        return Err(format!(
            "{at}: expected appendfsync always (it said: {})",
            out.trim()
        ));
    }
    eprintln!(
        "redis-tls: TLS only, user {} (default user off), appendfsync always ready",
        crate::TLS_USER
    );
    Ok(())
}

/// The replica follows the primary, and its link is up (a full sync
/// done). A failover test promotes the replica (REPLICAOF NO ONE) and kills
/// the primary; `up redis-replica` restores the pair: the primary is
/// started again by up, the replica re-pointed here (it resyncs from the
/// primary). Waits up to `FENCING_WAIT_SECS` (default 90 s) for the link.
pub(super) fn setup_replicated(paths: &Paths, service: &Service) -> Result<(), String> {
    let [primary, replica] = service.members else {
        return Err(format!(
            "{}: expected a primary and a replica, got {} members",
            service.name,
            service.members.len()
        ));
    };
    let replica_log = paths.logs.join(format!("{}.log", replica.instance));
    let redis = |port: u16, args: &[&str]| {
        let mut all = vec!["-h", "127.0.0.1", "-p"];
        let port = port.to_string();
        all.push(&port);
        all.extend_from_slice(args);
        output(3, "redis-cli", &all, &[])
    };
    let replication =
        |port: u16| Replication::parse(&redis(port, &["info", "replication"]).unwrap_or_default());
    if replication(primary.port).role != "master" {
        // A test left the primary following someone: make it a primary again.
        redis(primary.port, &["replicaof", "no", "one"]).ok_or_else(|| {
            format!(
                "{} on 127.0.0.1:{}: REPLICAOF NO ONE failed",
                primary.instance, primary.port
            )
        })?;
    }
    let state = replication(replica.port);
    if state.role != "slave" || state.master_port != Some(primary.port) {
        eprintln!(
            "{}: following 127.0.0.1:{} again",
            replica.instance, primary.port
        );
        redis(
            replica.port,
            &["replicaof", "127.0.0.1", &primary.port.to_string()],
        )
        .ok_or_else(|| {
            format!(
                "{} on 127.0.0.1:{}: REPLICAOF 127.0.0.1 {} failed; see {}",
                replica.instance,
                replica.port,
                primary.port,
                replica_log.display()
            )
        })?;
    }
    let wait = wait_secs();
    let deadline = Instant::now() + Duration::from_secs(wait);
    while !(replication(replica.port).link_up && replication(primary.port).connected_slaves == 1) {
        if Instant::now() >= deadline {
            return Err(format!(
                "{} (127.0.0.1:{}) did not sync with 127.0.0.1:{} within {wait}s; see {}",
                replica.instance,
                replica.port,
                primary.port,
                replica_log.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "{}: 127.0.0.1:{} replicates 127.0.0.1:{}",
        service.name, replica.port, primary.port
    );
    Ok(())
}

/// `FENCING_WAIT_SECS`, the bound on waiting for one server (or a cluster)
/// to answer; 90 by default.
fn wait_secs() -> u64 {
    std::env::var("FENCING_WAIT_SECS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(90)
}

/// What `INFO replication` says, as far as the set-up cares.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Replication {
    /// `master` or `slave` (empty when the server did not answer).
    pub(super) role: String,
    /// A replica's primary's port.
    pub(super) master_port: Option<u16>,
    /// A replica's link to its primary is up.
    pub(super) link_up: bool,
    /// A primary's replicas.
    pub(super) connected_slaves: u32,
}

impl Replication {
    /// Parses `INFO replication` (CRLF or LF lines).
    pub(super) fn parse(info: &str) -> Self {
        let mut out = Self::default();
        for line in info.lines() {
            let Some((key, value)) = line.trim_end_matches('\r').split_once(':') else {
                continue;
            };
            match key {
                "role" => out.role = value.to_owned(),
                "master_port" => out.master_port = value.parse().ok(),
                "master_link_status" => out.link_up = value == "up",
                "connected_slaves" => out.connected_slaves = value.parse().unwrap_or(0),
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replication_info_of_a_linked_replica_and_its_primary() {
        let replica = "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_port:6381\r\n\
                       master_link_status:up\r\nconnected_slaves:0\r\n";
        assert_eq!(
            Replication::parse(replica),
            Replication {
                role: "slave".to_owned(),
                master_port: Some(6381),
                link_up: true,
                connected_slaves: 0
            }
        );
        let primary = "# Replication\nrole:master\nconnected_slaves:1\nslave0:ip=127.0.0.1,port=6382,state=online\n";
        let primary = Replication::parse(primary);
        assert_eq!(
            (primary.role.as_str(), primary.connected_slaves),
            ("master", 1)
        );
        assert!(!primary.link_up);
        assert_eq!(Replication::parse(""), Replication::default());
        let syncing =
            Replication::parse("role:slave\nmaster_port:63810\nmaster_link_status:down\n");
        assert_eq!(syncing.master_port, Some(63810));
        assert!(!syncing.link_up);
    }
}
