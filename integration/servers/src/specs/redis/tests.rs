//! Each Redis start function tried for real on free ports, probed and set
//! up; the standard servers probed where `services up` runs them.

use super::scratch::{Scratch, free_port, probe_standard, service_on};
use super::{AOF, REPLICATED, SINGLE, TLS};
use crate::util::output;

fn redis_cli(port: u16, args: &[&str]) -> String {
    let port = port.to_string();
    let mut all = vec!["-h", "127.0.0.1", "-p", &port];
    all.extend_from_slice(args);
    output(3, "redis-cli", &all, &[]).unwrap_or_default()
}

#[test]
fn redis_and_redis_aof_start_on_free_ports_and_answer() {
    let scratch = Scratch::new("redis");
    let single = scratch.instance("redis", 1, free_port(), &[]);
    let _single = scratch.start(&SINGLE, &single);
    assert!(redis_cli(single.port, &["config", "get", "appendonly"]).contains("no"));
    let aof = scratch.instance("redis-aof", 1, free_port(), &[]);
    let _aof = scratch.start(&AOF, &aof);
    assert!(redis_cli(aof.port, &["config", "get", "appendfsync"]).contains("always"));
    // Nothing else answers like Redis there once it is gone.
    drop(_aof);
    assert!(!(AOF.probe)(&aof));
}

#[test]
fn a_replicated_pair_links_up_and_is_restored_after_a_promotion() {
    let scratch = Scratch::new("repl");
    let ports = [free_port(), free_port()];
    let primary = scratch.instance("redis-repl-primary", 1, ports[0], &ports);
    let replica = scratch.instance("redis-repl-replica", 2, ports[1], &ports);
    let _primary = scratch.start(&REPLICATED, &primary);
    let _replica = scratch.start(&REPLICATED, &replica);
    let service = service_on(&REPLICATED, &ports);
    let setup = REPLICATED.setup.expect("redis-replica has a set-up");
    setup(&scratch.paths, service).unwrap();
    // What a failover test leaves: the replica promoted.
    redis_cli(ports[1], &["replicaof", "no", "one"]);
    assert!(redis_cli(ports[1], &["info", "replication"]).contains("role:master"));
    setup(&scratch.paths, service).unwrap();
    let info = redis_cli(ports[1], &["info", "replication"]);
    assert!(
        info.contains("role:slave") && info.contains("master_link_status:up"),
        "{info}"
    );
}

#[test]
fn redis_tls_starts_on_a_free_port_refuses_all_but_the_test_user() {
    let scratch = Scratch::with_pki("rtls");
    let port = free_port();
    let instance = scratch.instance("redis-tls", 1, port, &[]);
    let _server = scratch.start(&TLS, &instance);
    // No plaintext port.
    assert!(redis_cli(port, &["ping"]).is_empty());
    let setup = TLS.setup.expect("redis-tls has a set-up");
    setup(&scratch.paths, service_on(&TLS, &[port])).unwrap();
}

#[test]
#[ignore = "probes (and sets up again) the servers `integration/services.sh up` runs on the standard ports"]
fn the_standard_servers_answer() {
    probe_standard(&[&SINGLE, &AOF, &REPLICATED, &TLS]);
}
