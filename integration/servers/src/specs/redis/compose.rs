//! Redis in `docker-compose.yml`: the official image, each member on its
//! native port inside its container too (so the health checks and the
//! replica's `--replicaof` name the same port as the host).

use super::start::{acl_text, durability};
use crate::{Container, Member, Service};

/// The image of every Redis container (Debian's native server is 7.0 too).
const IMAGE: &str = "redis:7.0";

/// `redis`: nothing on disk, like the machine's Redis.
pub(super) fn single(service: &Service) -> Vec<Container> {
    plain(service, false)
}

/// `redis-aof`: the issuer's fence counter must survive a restart, every
/// write fsynced.
pub(super) fn aof(service: &Service) -> Vec<Container> {
    plain(service, true)
}

fn plain(service: &Service, durable: bool) -> Vec<Container> {
    service
        .members
        .iter()
        .map(|m| container(m, durable))
        .collect()
}

/// `redis-replica`: the replica follows the primary by its container name.
/// (Its failover test kills the primary through `services`, so it runs on
/// the native servers only; the pair is here for the other tests.)
pub(super) fn replicated(service: &Service) -> Vec<Container> {
    let Some((primary, replicas)) = service.members.split_first() else {
        return Vec::new();
    };
    let mut out = vec![container(primary, true)];
    for m in replicas {
        let mut c = container(m, true);
        c.command.extend([
            "--replicaof".to_owned(),
            primary.instance.to_owned(),
            primary.port.to_string(),
        ]);
        c.depends_on = vec![primary.instance.to_owned()];
        // healthy once the initial sync is done
        c.healthcheck = Some(format!(
            "redis-cli -p {} info replication | grep -q master_link_status:up",
            m.port
        ));
        out.push(c);
    }
    out
}

/// `redis-tls`: the TLS port only, the PKI `services up pki` makes mounted
/// read-only. As natively, the ACL file (written into the data volume
/// before the server starts) turns the default user off and keeps the
/// password off the server's command line; the image's entrypoint then
/// drops to its redis user. Unlike natively, the server listens on every
/// address of the container (the host publishes it on 127.0.0.1 only).
pub(super) fn tls(service: &Service) -> Vec<Container> {
    service
        .members
        .iter()
        .map(|m| {
            let mut script = String::from("umask 077 && : > /data/users.acl");
            for line in acl_text().lines() {
                script.push_str(&format!(" && echo '{line}' >> /data/users.acl"));
            }
            let mut server = vec![
                "exec docker-entrypoint.sh redis-server --port 0".to_owned(),
                format!("--tls-port {}", m.port),
                "--tls-cert-file /tls/server.pem --tls-key-file /tls/server-key.pem".to_owned(),
                "--tls-ca-cert-file /tls/ca.pem --tls-auth-clients optional".to_owned(),
                "--save ''".to_owned(),
                "--aclfile /data/users.acl".to_owned(),
            ];
            server.extend(durability(true));
            script.push_str(" && ");
            script.push_str(&server.join(" "));
            Container {
                name: m.instance.to_owned(),
                image: IMAGE.to_owned(),
                command: vec!["sh".to_owned(), "-c".to_owned(), script],
                ports: vec![(m.port, m.port)],
                volumes: vec!["./integration/.state/tls:/tls:ro".to_owned()],
                healthcheck: Some(format!(
                    "REDISCLI_AUTH={} redis-cli --tls --cacert /tls/ca.pem -h 127.0.0.1 -p {} \
                     --user {} --no-auth-warning ping | grep -q PONG",
                    crate::TLS_PASSWORD,
                    m.port,
                    crate::TLS_USER
                )),
                ..Container::default()
            }
        })
        .collect()
}

fn container(m: &Member, durable: bool) -> Container {
    let mut command = vec![
        "redis-server".to_owned(),
        "--port".to_owned(),
        m.port.to_string(),
        "--save".to_owned(),
        String::new(),
    ];
    command.extend(durability(durable));
    Container {
        name: m.instance.to_owned(),
        image: IMAGE.to_owned(),
        command,
        ports: vec![(m.port, m.port)],
        healthcheck: Some(format!("redis-cli -p {} ping | grep -q PONG", m.port)),
        ..Container::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AOF, REPLICATED, SINGLE, TLS};

    #[test]
    fn one_container_per_member_on_its_port() {
        for service in [&SINGLE, &AOF, &REPLICATED, &TLS] {
            let containers = (service.compose)(service);
            assert_eq!(containers.len(), service.members.len(), "{}", service.name);
            for (c, m) in containers.iter().zip(service.members) {
                assert_eq!(c.name, m.instance);
                assert_eq!(c.ports, [(m.port, m.port)]);
                assert!(c.image.starts_with("redis:7.0"));
            }
        }
    }

    #[test]
    fn the_replica_follows_the_primary_by_name() {
        let pair = (REPLICATED.compose)(&REPLICATED);
        assert!(!pair[0].command.contains(&"--replicaof".to_owned()));
        let replica = pair[1].command.join(" ");
        assert!(
            replica.ends_with("--replicaof redis-repl-primary 6381"),
            "{replica}"
        );
        assert_eq!(pair[1].depends_on, ["redis-repl-primary"]);
        assert_eq!(
            (SINGLE.compose)(&SINGLE)[0].command.join(" "),
            "redis-server --port 6379 --save  --appendonly no"
        );
    }

    #[test]
    fn the_tls_container_writes_the_acl_and_mounts_the_pki() {
        let tls = &(TLS.compose)(&TLS)[0];
        let script = &tls.command[2];
        assert!(script.contains("echo 'user default off' >> /data/users.acl"));
        assert!(script.contains("--port 0 --tls-port 6390"));
        assert!(script.ends_with("--appendonly yes --appendfsync always"));
        assert_eq!(tls.volumes, ["./integration/.state/tls:/tls:ro"]);
    }
}
