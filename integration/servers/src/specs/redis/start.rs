//! How each Redis member is started: the command line, and redis-tls's ACL
//! file.

use std::os::unix::fs::PermissionsExt;

use crate::util::write;
use crate::{Instance, Launch};

/// `redis`: nothing on disk.
pub(super) fn single(instance: &Instance) -> Result<Launch, String> {
    Ok(redis_server(instance, plain_args(instance, false)))
}

/// `redis-aof`.
pub(super) fn aof(instance: &Instance) -> Result<Launch, String> {
    Ok(redis_server(instance, plain_args(instance, true)))
}

/// `redis-replica`: the first member is the primary, the others follow it.
pub(super) fn replicated(instance: &Instance) -> Result<Launch, String> {
    // (the pair differs from redis-aof only in its replication)
    let mut args = plain_args(instance, true);
    if instance.number > 1 {
        // The replica follows the primary from its first start;
        // setup_replicated re-points it after a failover test.
        let primary = instance.cluster.first().ok_or_else(|| {
            format!(
                "{} (port {}): a replica needs its primary as the first member of its cluster",
                instance.name, instance.port
            )
        })?;
        args.extend([
            "--replicaof".to_owned(),
            primary.ip.to_string(),
            primary.port.to_string(),
        ]);
    }
    Ok(redis_server(instance, args))
}

/// `redis-tls`: the TLS port only, the default user off.
pub(super) fn tls(instance: &Instance) -> Result<Launch, String> {
    // The ACL file turns the default user off, so every client must name
    // the test user (and the password stays out of the command line, hence
    // out of ps and the log).
    let acl = instance.dir.join("users.acl");
    write(&acl, &acl_text()).map_err(|e| format!("{}: {e}", instance.name))?;
    std::fs::set_permissions(&acl, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{}: {}: {e}", instance.name, acl.display()))?;
    let tls = |name: &str| instance.paths.tls_file(name).display().to_string();
    let mut args = strings(&[
        "--bind",
        &instance.ip.to_string(),
        "--port",
        "0",
        "--tls-port",
        &instance.port.to_string(),
        "--tls-cert-file",
        &tls("server.pem"),
        "--tls-key-file",
        &tls("server-key.pem"),
        "--tls-ca-cert-file",
        &tls("ca.pem"),
        "--tls-auth-clients",
        "optional",
        "--dir",
        &instance.dir.display().to_string(),
        "--save",
        "",
        "--daemonize",
        "no",
        "--aclfile",
        &acl.display().to_string(),
    ]);
    // Append-only and fsynced like redis-aof: the Redis issuer refuses a
    // Redis that can lose its counter.
    args.extend(durability(true));
    Ok(redis_server(instance, args))
}

/// The ACL file of redis-tls: the default user off, the test user with
/// every right.
pub(crate) fn acl_text() -> String {
    format!(
        "user default off\nuser {} on >{} ~* &* +@all\n",
        crate::TLS_USER,
        crate::TLS_PASSWORD
    )
}

fn redis_server(instance: &Instance, args: Vec<String>) -> Launch {
    Launch::new("redis-server", args, &instance.dir)
}

fn plain_args(instance: &Instance, durable: bool) -> Vec<String> {
    let mut args = strings(&[
        "--bind",
        &instance.ip.to_string(),
        "--port",
        &instance.port.to_string(),
        "--dir",
        &instance.dir.display().to_string(),
        "--save",
        "",
        "--daemonize",
        "no",
    ]);
    args.extend(durability(durable));
    args
}

/// redis-aof, the replicated pair and redis-tls: every write is fsynced,
/// so the fence counter survives a restart. `redis` keeps nothing.
pub(super) fn durability(durable: bool) -> Vec<String> {
    if durable {
        strings(&["--appendonly", "yes", "--appendfsync", "always"])
    } else {
        strings(&["--appendonly", "no"])
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::{Paths, Peer};

    fn instance(number: usize, cluster: Vec<Peer>) -> Instance {
        Instance {
            name: "redis-test".to_owned(),
            number,
            ip: Ipv4Addr::new(10, 0, 0, 2),
            port: 16_379,
            peer_ports: Vec::new(),
            cluster,
            dir: "/tmp/nowhere".into(),
            paths: Paths::new("/tmp/state", None),
        }
    }

    fn pair() -> Vec<Peer> {
        [(1, 16_381), (3, 16_382)]
            .map(|(host, port)| Peer {
                ip: Ipv4Addr::new(10, 0, 0, host),
                port,
                peer_ports: Vec::new(),
            })
            .to_vec()
    }

    #[test]
    fn the_plain_servers_listen_where_they_are_told_and_differ_in_durability() {
        let single = single(&instance(1, Vec::new())).unwrap();
        assert_eq!(single.program, "redis-server");
        let args = single.args.join(" ");
        assert!(args.starts_with("--bind 10.0.0.2 --port 16379 --dir /tmp/nowhere"));
        assert!(args.ends_with("--appendonly no"));
        let aof = aof(&instance(1, Vec::new())).unwrap().args.join(" ");
        assert!(aof.ends_with("--appendonly yes --appendfsync always"));
        // `--save ""`: one empty argument, no snapshots
        let save = single.args.iter().position(|a| a == "--save").unwrap();
        assert_eq!(single.args[save + 1], "");
    }

    #[test]
    fn the_replica_follows_the_first_member_and_the_primary_nobody() {
        let primary = replicated(&instance(1, pair())).unwrap().args.join(" ");
        assert!(!primary.contains("--replicaof"));
        let replica = replicated(&instance(2, pair())).unwrap().args;
        assert_eq!(
            replica[replica.len() - 3..],
            ["--replicaof", "10.0.0.1", "16381"]
        );
        assert!(replicated(&instance(2, Vec::new())).is_err());
    }

    #[test]
    fn the_acl_turns_the_default_user_off() {
        assert_eq!(
            acl_text(),
            "user default off\nuser fencing on >fencing-tls-secret ~* &* +@all\n"
        );
    }
}
