//! postgres-tls and the private cluster tried for real on free ports,
//! probed and set up; the standard servers probed (and set up) where
//! `services up` runs them. (The `postgres` start function runs the
//! machine's Debian cluster, which already serves: it is not started twice.)

use std::net::Ipv4Addr;

use super::{SINGLE, TLS, private_cluster, private_url};
use crate::Service;
use crate::specs::redis::scratch::{Scratch, free_port, probe_standard, service_on};
use crate::util::output;

#[test]
fn postgres_tls_starts_on_a_free_port_and_takes_only_tls_with_the_password() {
    let scratch = Scratch::with_pki("pgtls");
    let port = free_port();
    let instance = scratch.instance("postgres-tls", 1, port, &[]);
    let mut server = scratch.start(&TLS, &instance);
    let setup = TLS.setup.expect("postgres-tls has a set-up");
    setup(&scratch.paths, service_on(&TLS, &[port])).unwrap();
    // A second start reuses the cluster (and its account) made at the first.
    server.stop();
    let _again = scratch.start(&TLS, &instance);
}

#[test]
fn a_private_cluster_trusts_its_network_and_takes_the_standard_set_up() {
    let scratch = Scratch::new("pgpriv");
    let port = free_port();
    let instance = scratch.instance("postgres-private", 1, port, &[]);
    let private = Service {
        start: |i| private_cluster(i, "127.0.0.1/32"),
        ..SINGLE
    };
    let _server = scratch.start(&private, &instance);
    assert_eq!(
        private_url(&instance),
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    );
    let sync = output(
        5,
        "psql",
        &[
            "-XAtq",
            &private_url(&instance),
            "-c",
            "SHOW synchronous_commit",
        ],
        &[],
    );
    assert_eq!(sync.as_deref().map(str::trim), Some("off"));
    // Through TCP as the trusted superuser, as on a cluster without a
    // Debian socket.
    let setup = SINGLE.setup.expect("postgres has a set-up");
    setup(&scratch.paths, service_on(&SINGLE, &[port])).unwrap();
    assert!(!(SINGLE.probe)(&crate::Instance {
        ip: Ipv4Addr::new(127, 0, 0, 2),
        ..instance.clone()
    }));
}

#[test]
#[ignore = "probes (and sets up again) the servers `integration/services.sh up` runs on the standard ports"]
fn the_standard_servers_answer() {
    probe_standard(&[&SINGLE, &TLS]);
}
