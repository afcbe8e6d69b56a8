//! ZooKeeper: standalone, a 3-server ensemble, and TLS with digest logins.

use super::{unported_compose, unported_probe, unported_start};
use crate::{Dep, Group, Have, Member, Server, Service, Stop};

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
const TLS_DEPS: &[Dep] = &[
    DEPS[0],
    DEPS[1],
    DEPS[2],
    Dep::Apt {
        package: "openssl",
        unless: &[Have::Command("openssl")],
    },
];

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
    about: "ZooKeeper, standalone",
    group: Group::Standard,
    members: SINGLE_MEMBERS,
    servers: &[ZOOKEEPER],
    deps: DEPS,
    start: unported_start,
    probe: unported_probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: unported_compose,
};
/// `zk-ensemble`.
pub const ENSEMBLE: Service = Service {
    name: "zk-ensemble",
    about: "ZooKeeper, three servers, for the failover tests",
    group: Group::OnDemand,
    members: ENSEMBLE_MEMBERS,
    servers: &[ZK_ENSEMBLE],
    deps: DEPS,
    start: unported_start,
    probe: unported_probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: unported_compose,
};
/// `zk-tls`.
pub const TLS: Service = Service {
    name: "zk-tls",
    about: "ZooKeeper, TLS only (Netty), digest logins",
    group: Group::Tls,
    members: TLS_MEMBERS,
    servers: &[ZK_TLS],
    deps: TLS_DEPS,
    start: unported_start,
    probe: unported_probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: unported_compose,
};
