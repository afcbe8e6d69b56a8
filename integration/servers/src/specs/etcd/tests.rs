use std::net::Ipv4Addr;
use std::path::PathBuf;

use super::*;
use crate::private::PrivateState;
use crate::{Paths, Peer, Private, specs};

const FIELDS: &str = r#""ClusterID" : 6730566277095012391
"MemberID" : 11620113426298787385
"Revision" : 1
"RaftTerm" : 2
"Version" : "3.4.23"
"DBSize" : 20480
"Leader" : 11620113426298787385
"IsLearner" : false
"RaftIndex" : 8
"RaftTerm" : 2
"RaftAppliedIndex" : 8
"Errors" : []
"Endpoint" : "http://127.0.0.1:11379"

"ClusterID" : 6730566277095012391
"MemberID" : 4391470163386312452
"Revision" : 1
"RaftTerm" : 2
"Version" : "3.4.23"
"DBSize" : 20480
"Leader" : 11620113426298787385
"IsLearner" : false
"RaftIndex" : 8
"RaftTerm" : 2
"RaftAppliedIndex" : 8
"Errors" : []
"Endpoint" : "http://127.0.0.1:12379"

{"level":"warn","msg":"failed to get the status of endpoint","endpoint":"http://127.0.0.1:13379"}
"#;

fn st(port: u16, member: u64, leader: u64) -> MemberStatus {
    MemberStatus {
        ip: Ipv4Addr::LOCALHOST,
        port,
        member,
        leader,
    }
}

#[test]
fn endpoint_status_fields_parse_per_block() {
    assert_eq!(
        parse_status(FIELDS),
        [
            st(11379, 11620113426298787385, 11620113426298787385),
            st(12379, 4391470163386312452, 11620113426298787385),
        ]
    );
    assert!(parse_status("Error: context deadline exceeded\n").is_empty());
}

#[test]
fn formed_needs_enough_members_one_leader_and_that_leader_among_them() {
    let a = st(1, 10, 10);
    let b = st(2, 20, 10);
    let c = st(3, 30, 10);
    assert!(formed(&[a.clone(), b.clone(), c.clone()], 3));
    assert!(formed(&[a.clone(), b.clone()], 2));
    assert!(!formed(&[a.clone(), b.clone()], 3), "too few");
    assert!(
        !formed(&[b.clone(), c.clone()], 2),
        "the leader does not answer"
    );
    assert!(
        !formed(&[a.clone(), st(2, 20, 0)], 2),
        "one knows no leader"
    );
    assert!(
        !formed(&[a.clone(), st(2, 20, 20)], 2),
        "two leaders (a partition)"
    );
    assert!(!formed(&[], 0));
}

fn instance(number: usize, port: u16, peer: u16, cluster: Vec<Peer>) -> Instance {
    Instance {
        name: format!("etcd-cluster-{number}"),
        number,
        ip: Ipv4Addr::new(10, 0, 0, u8::try_from(number).unwrap()),
        port,
        peer_ports: vec![peer],
        cluster,
        dir: PathBuf::from("/d"),
        paths: Paths::new("/s", None),
    }
}

#[test]
fn the_initial_cluster_comes_from_the_instances_cluster() {
    let peers: Vec<Peer> = (1..=3)
        .map(|n| Peer {
            ip: Ipv4Addr::new(10, 0, 0, n),
            port: 2379,
            peer_ports: vec![2380],
        })
        .collect();
    assert_eq!(
        initial_cluster(&instance(2, 2379, 2380, peers)).unwrap(),
        "m1=http://10.0.0.1:2380,m2=http://10.0.0.2:2380,m3=http://10.0.0.3:2380"
    );
    assert_eq!(
        initial_cluster(&instance(1, 9, 10, Vec::new())).unwrap(),
        "m1=http://10.0.0.1:10",
        "alone, a cluster of itself"
    );
}

#[test]
fn the_compose_cluster_finds_its_members_by_name() {
    let containers = (specs::etcd::CLUSTER.compose)(&specs::etcd::CLUSTER);
    assert_eq!(containers.len(), 3);
    let second = &containers[1];
    assert_eq!(second.name, "etcd-cluster-2");
    assert_eq!(second.ports, [(12379, 12379)]);
    assert!(second.command.contains(
        &"--initial-cluster=m1=http://etcd-cluster-1:11380,m2=http://etcd-cluster-2:12380,m3=http://etcd-cluster-3:13380"
            .to_owned()
    ));
    let tls = (specs::etcd::TLS.compose)(&specs::etcd::TLS);
    assert_eq!(tls[1].name, "etcd-tls");
    assert_eq!(tls[1].depends_on, ["etcd-tls-server"]);
    assert_eq!(tls[0].ports, [(2389, 2389)]);
}

// ---- real servers, on free ports (never the standard ones)

fn started(service: &Service) -> Private {
    Private::start(service, &[]).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_single_member_starts_and_answers() {
    let etcd = started(&specs::etcd::SINGLE);
    let leader = leader_of(&etcd.endpoints());
    assert_eq!(leader, Some(0), "a single member leads");
}

#[test]
fn three_members_form_a_cluster_and_elect_a_new_leader_when_it_dies() {
    let mut cluster = started(&specs::etcd::CLUSTER);
    assert_eq!(cluster.endpoints().len(), 3);
    let wait = |c: &Private, what: &str, holds: &dyn Fn(&Private) -> bool| {
        c.wait_until(what, holds).unwrap_or_else(|e| panic!("{e}"));
    };
    wait(&cluster, "the cluster did not form", &|c| {
        formed(&status(&c.endpoints()), 3)
    });
    let first = leader_of(&cluster.endpoints()).expect("a leader");
    cluster.kill(first);
    wait(&cluster, "the two left did not elect a leader", &|c| {
        formed(&status(&c.endpoints()), 2) && leader_of(&c.endpoints()).is_some_and(|l| l != first)
    });
    assert!(!formed(&status(&cluster.endpoints()), 3));
    // a restarted member rejoins from its data dir
    cluster.restart(first).unwrap_or_else(|e| panic!("{e}"));
    wait(&cluster, "the restarted member did not rejoin", &|c| {
        formed(&status(&c.endpoints()), 3)
    });
}

#[test]
fn tls_member_starts_with_a_fresh_pki_and_its_setup_is_repeatable() {
    let state = PrivateState::new("etcd-tls").unwrap();
    assert!(state.make_pki().unwrap(), "a new PKI");
    let etcd = Private::build(&specs::etcd::TLS)
        .in_state(state)
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    let paths = etcd.paths().clone();
    let port = etcd.port();
    // an `up` cut short: a user and a role there already, auth still off
    let root = format!("root:{}", crate::TLS_PASSWORD);
    let local = |args: &[&str]| etcdctl_tls(&paths, Ipv4Addr::LOCALHOST, port, args);
    assert!(local(&["--interactive=false", "user", "add", &root]).0);
    assert!(local(&["role", "add", crate::TLS_USER]).0);
    etcd.setup().unwrap();
    etcd.setup().expect("a second set-up only checks");
    assert!(etcd.answers(0), "logs in with auth on");
    // Without a login the certificate's CN (fencing) is the user: its role.
    let (ok, out) = etcdctl_tls(&paths, Ipv4Addr::LOCALHOST, port, &["put", "other/x", "1"]);
    assert!(!ok && out.contains("permission denied"), "{out}");
    let wrong = etcdctl_tls(
        &paths,
        Ipv4Addr::LOCALHOST,
        port,
        &["--user", "root:wrong", "get", "x"],
    );
    assert!(!wrong.0, "a wrong password is refused: {}", wrong.1);
    let log = std::fs::read_to_string(paths.logs.join("etcd-tls.log")).unwrap();
    assert!(log.contains("auth enable") && !log.contains(crate::TLS_PASSWORD));
}

/// The servers `integration/services.sh up` runs answer the probes (and
/// their set-ups run again), and the cluster has formed.
#[test]
fn the_running_standard_servers_answer() {
    crate::private::standard::probe_standard(&[
        &specs::etcd::SINGLE,
        &specs::etcd::CLUSTER,
        &specs::etcd::TLS,
    ]);
    let cluster = specs::etcd::CLUSTER.cluster.unwrap();
    assert!(
        (cluster.formed)(&specs::etcd::CLUSTER, 3),
        "{}",
        (cluster.describe)(&specs::etcd::CLUSTER)
    );
    assert!((cluster.leader)(&specs::etcd::CLUSTER).is_some());
}

/// The ported set-up, on the running etcd-tls the bash set up: only checks.
#[test]
fn the_setup_only_checks_the_running_tls_server() {
    let paths = Paths::from_env();
    (specs::etcd::TLS.setup.unwrap())(&paths, &specs::etcd::TLS).unwrap();
}
