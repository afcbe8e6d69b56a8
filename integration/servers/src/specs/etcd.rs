//! etcd: a single member, a 3-member cluster, and mutual TLS with auth.

use super::{unported_compose, unported_probe, unported_start};
use crate::{Dep, Group, Have, Member, Server, Service, Stop};

const DEPS: &[Dep] = &[
    Dep::Apt {
        package: "etcd-server",
        unless: &[Have::Command("etcd")],
    },
    Dep::Apt {
        package: "etcd-client",
        unless: &[Have::Command("etcdctl")],
    },
];

const SINGLE_MEMBERS: &[Member] = &[Member {
    instance: "etcd",
    port: 2379,
    peer_ports: &[2380],
}];
// Cluster ports stay below 32768, out of Linux's ephemeral range: a client
// socket that happened to hold a member's port kept it from leading.
const CLUSTER_MEMBERS: &[Member] = &[
    Member {
        instance: "etcd-cluster-1",
        port: 11379,
        peer_ports: &[11380],
    },
    Member {
        instance: "etcd-cluster-2",
        port: 12379,
        peer_ports: &[12380],
    },
    Member {
        instance: "etcd-cluster-3",
        port: 13379,
        peer_ports: &[13380],
    },
];
// The peer port is plain http, on loopback only.
const TLS_MEMBERS: &[Member] = &[Member {
    instance: "etcd-tls",
    port: 2389,
    peer_ports: &[2390],
}];

/// etcd (a single member).
pub const ETCD: Server = Server {
    name: "etcd",
    service: "etcd",
    var: "FENCING_ETCD_ENDPOINTS",
    form: "http://127.0.0.1:{port}",
    members: SINGLE_MEMBERS,
};
/// The 3-member etcd cluster, for the failover tests.
pub const ETCD_CLUSTER: Server = Server {
    name: "etcd cluster (3 members)",
    service: "etcd-cluster",
    var: "FENCING_ETCD_CLUSTER_ENDPOINTS",
    form: "http://127.0.0.1:{port}",
    members: CLUSTER_MEMBERS,
};
/// etcd: client certificates required, `auth enable`, user `fencing`
/// limited to the prefix `fencing/`.
pub const ETCD_TLS: Server = Server {
    name: "etcd (mutual TLS, auth)",
    service: "etcd-tls",
    var: "FENCING_ETCD_TLS_ENDPOINTS",
    form: "127.0.0.1:{port}",
    members: TLS_MEMBERS,
};

/// `etcd`.
pub const SINGLE: Service = Service {
    name: "etcd",
    about: "etcd, one member",
    group: Group::Standard,
    members: SINGLE_MEMBERS,
    servers: &[ETCD],
    deps: DEPS,
    start: unported_start,
    probe: unported_probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: unported_compose,
};
/// `etcd-cluster`.
pub const CLUSTER: Service = Service {
    name: "etcd-cluster",
    about: "etcd, three members, for the failover tests",
    group: Group::OnDemand,
    members: CLUSTER_MEMBERS,
    servers: &[ETCD_CLUSTER],
    deps: DEPS,
    start: unported_start,
    probe: unported_probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: unported_compose,
};
/// `etcd-tls`.
pub const TLS: Service = Service {
    name: "etcd-tls",
    about: "etcd, mutual TLS, auth on, user fencing limited to fencing/",
    group: Group::Tls,
    members: TLS_MEMBERS,
    servers: &[ETCD_TLS],
    deps: DEPS,
    start: unported_start,
    probe: unported_probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: unported_compose,
};
