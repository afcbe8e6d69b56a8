//! ZooKeeper's containers in `docker-compose.yml`.
//!
//! What differs from the native servers: the image runs ZooKeeper 3.8.4
//! through its zkServer.sh and logging set-up (the native one is Debian's
//! 3.8.0 under QuorumPeerMain directly); each container listens on all its
//! addresses, on the member's own ports; the ensemble's members reach each
//! other's quorum and election ports by container name.

use std::net::Ipv4Addr;
use std::path::Path;

use super::config::tls_cfg;
use crate::{Container, Member, Service};

/// The image of every ZooKeeper container.
const IMAGE: &str = "zookeeper:3.8.4";

/// `srvr` shows a Mode: line only once the server serves (`ruok` says
/// imok earlier).
const HEALTHY: &str = "zkServer.sh status 2>&1 | grep -q 'Mode: '";

/// The settings of the native zoo.cfg, through the image's variables.
fn environment(servers: String, my_id: usize) -> Vec<(String, String)> {
    [
        ("ZOO_TICK_TIME", "1000".to_owned()),
        ("ZOO_INIT_LIMIT", "10".to_owned()),
        ("ZOO_SYNC_LIMIT", "5".to_owned()),
        // srvr/mntr/... are how readiness and leadership are checked
        ("ZOO_4LW_COMMANDS_WHITELIST", "*".to_owned()),
        // the admin server would take port 8080
        ("ZOO_ADMINSERVER_ENABLED", "false".to_owned()),
        // empty containers deleted within a second, as services starts it
        (
            "JVMFLAGS",
            "-Dznode.container.checkIntervalMs=1000".to_owned(),
        ),
        ("ZOO_MY_ID", my_id.to_string()),
        // `server.N=host:quorum:election;client port`, space-separated
        ("ZOO_SERVERS", servers),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn container(member: &Member, environment: Vec<(String, String)>) -> Container {
    Container {
        name: member.instance.to_owned(),
        image: IMAGE.to_owned(),
        ports: vec![(member.port, member.port)],
        environment,
        healthcheck: Some(HEALTHY.to_owned()),
        ..Container::default()
    }
}

/// `zookeeper`: standalone (one server line, the image's quorum ports,
/// unused).
pub(super) fn single(service: &Service) -> Vec<Container> {
    service
        .members
        .iter()
        .map(|m| {
            let servers = format!("server.1=localhost:2888:3888;{}", m.port);
            container(m, environment(servers, 1))
        })
        .collect()
}

/// `zk-ensemble`: three servers that find each other by container name.
pub(super) fn ensemble(service: &Service) -> Vec<Container> {
    let servers: Vec<String> = service
        .members
        .iter()
        .enumerate()
        .map(|(n, m)| {
            let (quorum, election) = match m.peer_ports {
                [q, e, ..] => (*q, *e),
                _ => (2888, 3888),
            };
            format!(
                "server.{}={}:{quorum}:{election};{}",
                n + 1,
                m.instance,
                m.port
            )
        })
        .collect();
    let servers = servers.join(" ");
    service
        .members
        .iter()
        .enumerate()
        .map(|(n, m)| container(m, environment(servers.clone(), n + 1)))
        .collect()
}

/// `zk-tls`: the native zoo.cfg (TLS only, Netty), written before the
/// image's entrypoint, which then keeps it; the key store made from the
/// mounted PKI, as the native start makes it. Its health check is the
/// native probe: `srvr` over TLS, the certificate verified.
pub(super) fn tls(service: &Service) -> Vec<Container> {
    let Some(member) = service.members.first() else {
        return Vec::new();
    };
    let cfg = tls_cfg(
        Path::new("/"),
        Ipv4Addr::UNSPECIFIED,
        member.port,
        Path::new("/conf/server-bundle.pem"),
        Path::new("/tls/ca.pem"),
    );
    let script = format!(
        "set -e\n\
         cat /tls/server.pem /tls/server-key.pem > /conf/server-bundle.pem\n\
         cat > /conf/zoo.cfg <<'EOF'\n{cfg}EOF\n\
         exec /docker-entrypoint.sh zkServer.sh start-foreground\n"
    );
    let healthy = format!(
        "echo srvr | openssl s_client -connect 127.0.0.1:{} -CAfile /tls/ca.pem \
         -verify_return_error -verify_ip 127.0.0.1 -quiet 2>/dev/null | grep -q 'Mode: '",
        member.port
    );
    vec![Container {
        name: member.instance.to_owned(),
        image: IMAGE.to_owned(),
        entrypoint: vec!["/bin/bash".to_owned(), "-c".to_owned(), script],
        ports: vec![(member.port, member.port)],
        volumes: vec!["./integration/.state/tls:/tls:ro".to_owned()],
        healthcheck: Some(healthy),
        ..Container::default()
    }]
}
