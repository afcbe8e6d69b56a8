//! Each Redis start function tried for real on free ports, probed and set
//! up; the standard servers probed where `services up` runs them.

use super::{AOF, REPLICATED, SINGLE, TLS};
use crate::private::standard::probe_standard;
use crate::util::output;
use crate::{Private, Service};

fn redis_cli(port: u16, args: &[&str]) -> String {
    let port = port.to_string();
    let mut all = vec!["-h", "127.0.0.1", "-p", &port];
    all.extend_from_slice(args);
    output(3, "redis-cli", &all, &[]).unwrap_or_default()
}

fn started(service: &Service) -> Private {
    Private::start(service, &[]).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn redis_and_redis_aof_start_on_free_ports_and_answer() {
    let single = started(&SINGLE);
    assert!(redis_cli(single.port(), &["config", "get", "appendonly"]).contains("no"));
    let aof = started(&AOF);
    let instance = aof.instance().clone();
    assert!(redis_cli(aof.port(), &["config", "get", "appendfsync"]).contains("always"));
    // Nothing else answers like Redis there once it is gone.
    drop(aof);
    assert!(!(AOF.probe)(&instance));
}

#[test]
fn a_replicated_pair_links_up_and_is_restored_after_a_promotion() {
    let pair = started(&REPLICATED);
    let replica = pair.member(1).port;
    pair.setup().unwrap();
    // What a failover test leaves: the replica promoted.
    redis_cli(replica, &["replicaof", "no", "one"]);
    assert!(redis_cli(replica, &["info", "replication"]).contains("role:master"));
    pair.setup().unwrap();
    let info = redis_cli(replica, &["info", "replication"]);
    assert!(
        info.contains("role:slave") && info.contains("master_link_status:up"),
        "{info}"
    );
}

#[test]
fn redis_tls_starts_on_a_free_port_refuses_all_but_the_test_user() {
    let server = Private::build(&TLS)
        .own_pki()
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    // No plaintext port.
    assert!(redis_cli(server.port(), &["ping"]).is_empty());
    assert!(TLS.setup.is_some(), "redis-tls has a set-up");
    server.setup().unwrap();
}

#[test]
fn a_private_redis_takes_extra_arguments_after_its_own() {
    // `--appendfsync everysec` after redis-aof's `--appendfsync always`:
    // the later one wins.
    let aof =
        Private::start(&AOF, &["--appendfsync", "everysec"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(redis_cli(aof.port(), &["config", "get", "appendfsync"]).contains("everysec"));
    assert!(aof.paths().logs.join("redis-aof.log").is_file());
}

#[test]
fn the_standard_servers_answer() {
    probe_standard(&[&SINGLE, &AOF, &REPLICATED, &TLS]);
}
