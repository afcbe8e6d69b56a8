//! etcd: a single member, a 3-member cluster, and mutual TLS with auth.

mod compose;
mod status;
#[cfg(test)]
mod tests;
mod tls;

pub use status::{MemberStatus, formed, leader_of, parse_status, status};
pub use tls::etcdctl_tls;

use super::OPENSSL;
use crate::{ClusterOps, Dep, Group, Have, Instance, Launch, Member, Server, Service, Stop};

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
// The TLS variant also needs openssl: the test PKI.
const TLS_DEPS: &[Dep] = &[DEPS[0], DEPS[1], OPENSSL];

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
    about: "etcd 3.4 (Debian `etcd-server`), one member",
    group: Group::Standard,
    members: SINGLE_MEMBERS,
    servers: &[ETCD],
    deps: DEPS,
    start: start_single,
    probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: compose::single,
};
/// `etcd-cluster`.
pub const CLUSTER: Service = Service {
    name: "etcd-cluster",
    about: "3 etcd members, for the failover tests (ports below 32768, out of the ephemeral port range)",
    group: Group::OnDemand,
    members: CLUSTER_MEMBERS,
    servers: &[ETCD_CLUSTER],
    deps: DEPS,
    start: start_cluster_member,
    probe,
    setup: None,
    cluster: Some(ClusterOps {
        leader: status::leader_port,
        formed: status::cluster_formed,
        describe: status::describe,
    }),
    stop: Stop::Term,
    compose: compose::cluster,
};
/// `etcd-tls`.
pub const TLS: Service = Service {
    name: "etcd-tls",
    about: "etcd 3.4, mutual TLS (`--client-cert-auth`: present `client.pem`), auth on: `root` (role root) and `fencing` (role `fencing`: readwrite on prefix `fencing/` only); plain-HTTP peer port on loopback, gRPC gateway off",
    group: Group::Tls,
    members: TLS_MEMBERS,
    servers: &[ETCD_TLS],
    deps: TLS_DEPS,
    start: tls::start,
    probe: tls::probe,
    setup: Some(tls::setup),
    cluster: None,
    stop: Stop::Term,
    compose: compose::tls,
};

/// The token of the cluster's first start: members with different ones
/// never form one cluster.
const CLUSTER_TOKEN: &str = "fencing-etcd-cluster";

/// The arguments every member gets: its name, data directory, client URL
/// (`scheme`) and peer URL (always plain http), and the initial cluster.
fn member_args(
    i: &Instance,
    name: &str,
    scheme: &str,
    initial_cluster: &str,
) -> Result<Vec<String>, String> {
    if !crate::util::have("etcd") {
        return Err(format!(
            "{}: etcd is not installed (run: integration/services.sh deps etcd)",
            i.name
        ));
    }
    let client = format!("{scheme}://{}:{}", i.ip, i.port);
    let peer = peer_url(i.ip, &i.peer_ports, &i.name)?;
    Ok([
        "--name",
        name,
        "--data-dir",
        &i.dir.join("member-data").display().to_string(),
        "--listen-client-urls",
        &client,
        "--advertise-client-urls",
        &client,
        "--listen-peer-urls",
        &peer,
        "--initial-advertise-peer-urls",
        &peer,
        "--initial-cluster",
        initial_cluster,
    ]
    .map(str::to_owned)
    .to_vec())
}

/// `http://IP:PEER`: a member's peer URL (its first peer port).
fn peer_url(ip: std::net::Ipv4Addr, peer_ports: &[u16], who: &str) -> Result<String, String> {
    let port = peer_ports
        .first()
        .ok_or_else(|| format!("{who}: no peer port given (etcd needs one)"))?;
    Ok(format!("http://{ip}:{port}"))
}

/// `m1=http://IP:PEER,m2=…`: the members as `--initial-cluster` lists
/// them, named `m<number>`. An instance started alone (a private server)
/// is a cluster of itself.
fn initial_cluster(i: &Instance) -> Result<String, String> {
    if i.cluster.is_empty() {
        return Ok(format!(
            "m{}={}",
            i.number,
            peer_url(i.ip, &i.peer_ports, &i.name)?
        ));
    }
    let members: Result<Vec<String>, String> = i
        .cluster
        .iter()
        .enumerate()
        .map(|(n, p)| {
            Ok(format!(
                "m{}={}",
                n + 1,
                peer_url(p.ip, &p.peer_ports, &i.name)?
            ))
        })
        .collect();
    Ok(members?.join(","))
}

fn start_single(i: &Instance) -> Result<Launch, String> {
    let initial = format!("default={}", peer_url(i.ip, &i.peer_ports, &i.name)?);
    let args = member_args(i, "default", "http", &initial)?;
    Ok(Launch::new("etcd", args, &i.dir))
}

fn start_cluster_member(i: &Instance) -> Result<Launch, String> {
    // The --initial-* flags only matter on the first start; a restarted
    // member uses its data dir.
    let mut args = member_args(i, &format!("m{}", i.number), "http", &initial_cluster(i)?)?;
    args.extend(
        [
            "--initial-cluster-token",
            CLUSTER_TOKEN,
            "--initial-cluster-state",
            "new",
        ]
        .map(str::to_owned),
    );
    Ok(Launch::new("etcd", args, &i.dir))
}

/// Whether `/version` names etcdserver.
fn probe(i: &Instance) -> bool {
    crate::util::curl(&[&format!("http://{}:{}/version", i.ip, i.port)])
        .is_some_and(|out| out.contains("etcdserver"))
}
