//! mariadb-tls tried for real on a free port, probed and set up; the
//! standard servers probed (and set up) where `services up` runs them.
//! (The `mariadb` start function runs the machine's server on its own data
//! directory, which already serves: it is not started twice.)

use super::{SINGLE, TLS};
use crate::specs::redis::scratch::{Scratch, free_port, probe_standard, service_on};

#[test]
fn mariadb_tls_starts_on_a_free_port_and_takes_only_tls() {
    let scratch = Scratch::with_pki("mtls");
    let port = free_port();
    let instance = scratch.instance("mariadb-tls", 1, port, &[]);
    let mut server = scratch.start(&TLS, &instance);
    let setup = TLS.setup.expect("mariadb-tls has a set-up");
    setup(&scratch.paths, service_on(&TLS, &[port])).unwrap();
    // (`mariadb`'s probe would say yes here too: `mariadb-admin ping`
    // exits 0 for a live server that denies the login, as in the bash.)
    // A second start reuses the data directory made at the first.
    server.stop();
    let _again = scratch.start(&TLS, &instance);
}

#[test]
#[ignore = "probes (and sets up again) the servers `integration/services.sh up` runs on the standard ports"]
fn the_standard_servers_answer() {
    probe_standard(&[&SINGLE, &TLS]);
}
