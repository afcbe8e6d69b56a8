//! postgres-tls and the private cluster tried for real on free ports,
//! probed and set up; the standard servers probed (and set up) where
//! `services up` runs them. (The `postgres` start function runs the
//! machine's Debian cluster, which already serves: it is not started twice.)

use std::net::Ipv4Addr;

use super::{SINGLE, TLS, private_cluster, private_url};
use crate::private::standard::probe_standard;
use crate::util::output;
use crate::{Private, Service};

#[test]
fn postgres_tls_starts_on_a_free_port_and_takes_only_tls_with_the_password() {
    let mut server = Private::build(&TLS)
        .own_pki()
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(TLS.setup.is_some(), "postgres-tls has a set-up");
    server.setup().unwrap();
    // A second start reuses the cluster (and its account) made at the first.
    server.stop(0);
    server.restart(0).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_private_cluster_trusts_its_network_and_takes_the_standard_set_up() {
    let private = Service {
        start: |i| private_cluster(i, "127.0.0.1/32"),
        ..SINGLE
    };
    let server = Private::start(&private, &[]).unwrap_or_else(|e| panic!("{e}"));
    let instance = server.instance().clone();
    let port = server.port();
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
    assert!(SINGLE.setup.is_some(), "postgres has a set-up");
    server.setup().unwrap();
    assert!(!(SINGLE.probe)(&crate::Instance {
        ip: Ipv4Addr::new(127, 0, 0, 2),
        ..instance.clone()
    }));
}

#[test]
fn the_standard_servers_answer() {
    probe_standard(&[&SINGLE, &TLS]);
}
