//! ZooKeeper: standalone, a 3-server ensemble, and TLS with digest logins.

mod compose;
mod config;
mod mode;
#[cfg(test)]
mod tests;

pub use config::{classpath, tls_classpath};
pub use mode::{formed, mode, mode_in, tls_mode};

use super::OPENSSL;
use crate::{ClusterOps, Dep, Group, Have, Instance, Launch, Member, Server, Service, Stop};

// (libzookeeper-java depends on libnetty-java: zk-tls's Netty.) Curator is a
// foreign lock client of the tests, run from its source by the JDK's launcher.
const DEPS: &[Dep] = &[
    Dep::Apt {
        package: "zookeeper",
        unless: &[Have::File("/usr/share/java/zookeeper.jar")],
    },
    Dep::Apt {
        package: "libcurator-recipes-java",
        unless: &[Have::File("/usr/share/java/curator-recipes.jar")],
    },
    Dep::Apt {
        package: "default-jdk-headless",
        unless: &[Have::Command("javac")],
    },
];
const TLS_DEPS: &[Dep] = &[DEPS[0], DEPS[1], DEPS[2], OPENSSL];

const SINGLE_MEMBERS: &[Member] = &[Member {
    instance: "zookeeper",
    port: 2181,
    peer_ports: &[],
}];
// member i: client port 1i181, quorum port 1i888, election port 1i889
const ENSEMBLE_MEMBERS: &[Member] = &[
    Member {
        instance: "zk-ensemble-1",
        port: 11181,
        peer_ports: &[11888, 11889],
    },
    Member {
        instance: "zk-ensemble-2",
        port: 12181,
        peer_ports: &[12888, 12889],
    },
    Member {
        instance: "zk-ensemble-3",
        port: 13181,
        peer_ports: &[13888, 13889],
    },
];
// secureClientPort; no plaintext clientPort
const TLS_MEMBERS: &[Member] = &[Member {
    instance: "zk-tls",
    port: 2281,
    peer_ports: &[],
}];

/// ZooKeeper (standalone).
pub const ZOOKEEPER: Server = Server {
    name: "ZooKeeper",
    service: "zookeeper",
    var: "FENCING_ZK_ADDR",
    form: "127.0.0.1:{port}",
    members: SINGLE_MEMBERS,
};
/// The 3-server ZooKeeper ensemble, for the failover tests.
pub const ZK_ENSEMBLE: Server = Server {
    name: "ZooKeeper ensemble (3 servers)",
    service: "zk-ensemble",
    var: "FENCING_ZK_ENSEMBLE",
    form: "127.0.0.1:{port}",
    members: ENSEMBLE_MEMBERS,
};
/// ZooKeeper: `secureClientPort` only; digest authentication.
pub const ZK_TLS: Server = Server {
    name: "ZooKeeper (TLS)",
    service: "zk-tls",
    var: "FENCING_ZK_TLS_ADDR",
    form: "127.0.0.1:{port}",
    members: TLS_MEMBERS,
};

/// `zookeeper`.
pub const SINGLE: Service = Service {
    name: "zookeeper",
    about: "ZooKeeper 3.8 standalone, tickTime 1000 ms, all four-letter words on",
    group: Group::Standard,
    members: SINGLE_MEMBERS,
    servers: &[ZOOKEEPER],
    deps: DEPS,
    start,
    probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: compose::single,
};
/// `zk-ensemble`.
pub const ENSEMBLE: Service = Service {
    name: "zk-ensemble",
    about: "3 ZooKeeper servers (client, quorum and election ports), for the failover tests",
    group: Group::OnDemand,
    members: ENSEMBLE_MEMBERS,
    servers: &[ZK_ENSEMBLE],
    deps: DEPS,
    start,
    probe,
    setup: None,
    cluster: Some(ClusterOps {
        leader: mode::leader_port,
        formed: mode::cluster_formed,
        describe: mode::describe,
    }),
    stop: Stop::Term,
    compose: compose::ensemble,
};
/// `zk-tls`.
pub const TLS: Service = Service {
    name: "zk-tls",
    about: "ZooKeeper 3.8 standalone, `secureClientPort` only (Netty, PEM stores), no client certificates; clients log in with `addauth digest fencing:<password>`",
    group: Group::Tls,
    members: TLS_MEMBERS,
    servers: &[ZK_TLS],
    deps: TLS_DEPS,
    start: start_tls,
    probe: probe_tls,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: compose::tls,
};

/// The JVM's heap and collector: small, the servers hold little.
const JVM: [&str; 3] = ["-Xms32m", "-Xmx256m", "-XX:+UseSerialGC"];
/// The class run: QuorumPeerMain directly (no zkServer.sh, no systemd); a
/// standalone server when the cfg has no `server.N` lines.
const MAIN: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// `java … QuorumPeerMain DIR/zoo.cfg`, `classpath` plus `dir` (where
/// log4j.properties is).
fn java(i: &Instance, classpath: &str, extra: &[&str]) -> Result<Launch, String> {
    if !std::path::Path::new(config::JAR).is_file() || !crate::util::have("java") {
        return Err(format!(
            "{}: ZooKeeper ({}) or java is not installed (run: integration/services.sh deps zookeeper)",
            i.name,
            config::JAR
        ));
    }
    let mut args: Vec<String> = JVM.map(str::to_owned).to_vec();
    args.push(format!(
        "-Dlog4j.configuration=file:{}",
        i.dir.join("log4j.properties").display()
    ));
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    args.extend([
        "-cp".to_owned(),
        format!("{classpath}:{}", i.dir.display()),
        MAIN.to_owned(),
        i.dir.join("zoo.cfg").display().to_string(),
    ]);
    Ok(Launch::new("java", args, &i.dir))
}

/// Starts a standalone server, or an ensemble member when the instance
/// has a cluster (its `myid` is its number).
fn start(i: &Instance) -> Result<Launch, String> {
    config::write_zoo_cfg(i)?;
    // Empty containers are deleted within a second (default: a minute), so
    // a test can watch one go.
    java(i, &classpath(), &["-Dznode.container.checkIntervalMs=1000"])
}

fn start_tls(i: &Instance) -> Result<Launch, String> {
    config::write_tls_cfg(i)?;
    java(i, &tls_classpath(), &[])
}

/// Whether `srvr` shows a Mode: `ruok` answers imok before the server
/// serves; `srvr` does not.
fn probe(i: &Instance) -> bool {
    mode(i.ip, i.port).is_some()
}

/// `srvr` asked over TLS (ZooKeeper's Netty server answers four-letter
/// words there too), the server's certificate verified for the address.
fn probe_tls(i: &Instance) -> bool {
    tls_mode(&i.paths, i.ip, i.port).is_some()
}
