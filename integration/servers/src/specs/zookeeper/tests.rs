use std::net::Ipv4Addr;
use std::path::Path;

use super::config::{QuorumMember, tls_cfg, zoo_cfg};
use super::*;
use crate::Private;
use crate::private::PrivateState;
use crate::specs;

const SRVR: &str = "Zookeeper version: 3.8.0-debian--1, built on 2023-09-28 15:18 UTC
Latency min/avg/max: 0/0.0/0
Received: 3
Sent: 2
Connections: 1
Outstanding: 0
Zxid: 0x100000000
Mode: follower
Node count: 5
";

#[test]
fn the_mode_is_read_from_srvr() {
    assert_eq!(mode_in(SRVR).as_deref(), Some("follower"));
    assert_eq!(
        mode_in("This ZooKeeper instance is not currently serving requests\n"),
        None
    );
    assert_eq!(mode_in(""), None);
}

#[test]
fn formed_needs_one_leader_and_enough_voters() {
    let m = |s: &str| Some(s.to_owned());
    assert!(formed(&[m("leader"), m("follower"), m("follower")], 3));
    assert!(formed(&[m("leader"), m("follower"), None], 2));
    assert!(!formed(&[m("leader"), m("follower"), None], 3));
    assert!(
        !formed(&[m("follower"), m("follower"), None], 2),
        "no leader"
    );
    assert!(
        !formed(&[m("leader"), m("leader"), m("follower")], 2),
        "two"
    );
    assert!(!formed(&[m("standalone")], 1));
}

#[test]
fn zoo_cfg_lists_the_ensemble_from_the_cluster() {
    let servers: Vec<QuorumMember> = (1..=3)
        .map(|n| QuorumMember {
            ip: Ipv4Addr::new(10, 0, 0, n),
            quorum: 2888,
            election: 3888,
        })
        .collect();
    let cfg = zoo_cfg(Path::new("/d"), Ipv4Addr::new(10, 0, 0, 2), 2181, &servers);
    assert!(cfg.contains("dataDir=/d/data\nclientPort=2181\nclientPortAddress=10.0.0.2\n"));
    assert!(cfg.ends_with(
        "server.1=10.0.0.1:2888:3888\nserver.2=10.0.0.2:2888:3888\nserver.3=10.0.0.3:2888:3888\n"
    ));
    let alone = zoo_cfg(Path::new("/d"), Ipv4Addr::LOCALHOST, 2181, &[]);
    assert!(!alone.contains("server."), "standalone");
    let tls = tls_cfg(
        Path::new("/d"),
        Ipv4Addr::LOCALHOST,
        2281,
        Path::new("/d/b.pem"),
        Path::new("/t/ca.pem"),
    );
    assert!(tls.contains("secureClientPort=2281\nsecureClientPortAddress=127.0.0.1\n"));
    assert!(!tls.contains("\nclientPort="), "no plaintext port");
}

#[test]
fn the_compose_ensemble_finds_its_members_by_name() {
    let containers = (specs::zookeeper::ENSEMBLE.compose)(&specs::zookeeper::ENSEMBLE);
    assert_eq!(containers.len(), 3);
    let env = |c: &crate::Container, k: &str| {
        c.environment
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(env(&containers[2], "ZOO_MY_ID").as_deref(), Some("3"));
    assert_eq!(
        env(&containers[0], "ZOO_SERVERS").as_deref(),
        Some(
            "server.1=zk-ensemble-1:11888:11889;11181 server.2=zk-ensemble-2:12888:12889;12181 \
             server.3=zk-ensemble-3:13888:13889;13181"
        )
    );
    let tls = (specs::zookeeper::TLS.compose)(&specs::zookeeper::TLS);
    assert!(
        tls[0].entrypoint[2].contains("secureClientPort=2281\nsecureClientPortAddress=0.0.0.0\n")
    );
}

// ---- real servers, on free ports (never the standard ones)

fn started(service: &Service) -> Private {
    Private::start(service, &[]).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_standalone_server_starts_and_answers() {
    let zookeeper = started(&specs::zookeeper::SINGLE);
    let (ip, port) = zookeeper.endpoints()[0];
    assert_eq!(mode(ip, port).as_deref(), Some("standalone"));
}

#[test]
fn three_servers_form_an_ensemble_and_elect_a_new_leader_when_it_dies() {
    let mut ensemble = started(&specs::zookeeper::ENSEMBLE);
    assert_eq!(ensemble.endpoints().len(), 3);
    let modes = |e: &Private| -> Vec<Option<String>> {
        e.endpoints()
            .iter()
            .map(|(ip, port)| mode(*ip, *port))
            .collect()
    };
    let wait = |e: &Private, what: &str, holds: &dyn Fn(&Private) -> bool| {
        e.wait_until(what, holds).unwrap_or_else(|e| panic!("{e}"));
    };
    wait(&ensemble, "the ensemble did not form", &|e| {
        formed(&modes(e), 3)
    });
    let first = modes(&ensemble)
        .iter()
        .position(|m| m.as_deref() == Some("leader"))
        .expect("a leader");
    ensemble.kill(first);
    wait(&ensemble, "the two left did not elect a leader", &|e| {
        formed(&modes(e), 2)
    });
    ensemble.restart(first).unwrap_or_else(|e| panic!("{e}"));
    wait(&ensemble, "the restarted server did not rejoin", &|e| {
        formed(&modes(e), 3)
    });
}

#[test]
fn tls_server_starts_with_a_fresh_pki_and_answers_over_tls_only() {
    let state = PrivateState::new("zk-tls").unwrap();
    state.make_pki().unwrap();
    let zookeeper = Private::build(&specs::zookeeper::TLS)
        .in_state(state)
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    let paths = zookeeper.paths().clone();
    let (ip, port) = zookeeper.endpoints()[0];
    assert_eq!(tls_mode(&paths, ip, port).as_deref(), Some("standalone"));
    assert_eq!(mode(ip, port), None, "plaintext srvr is not answered");
}

/// The servers `integration/services.sh up` runs answer the probes (and
/// their set-ups run again), and the cluster has formed.
#[test]
fn the_running_standard_servers_answer() {
    crate::private::standard::probe_standard(&[
        &specs::zookeeper::SINGLE,
        &specs::zookeeper::ENSEMBLE,
        &specs::zookeeper::TLS,
    ]);
    let ensemble = specs::zookeeper::ENSEMBLE.cluster.unwrap();
    assert!(
        (ensemble.formed)(&specs::zookeeper::ENSEMBLE, 3),
        "{}",
        (ensemble.describe)(&specs::zookeeper::ENSEMBLE)
    );
    assert!((ensemble.leader)(&specs::zookeeper::ENSEMBLE).is_some());
}
