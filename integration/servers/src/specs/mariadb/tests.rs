//! mariadb-tls tried for real on a free port, probed and set up; the
//! standard servers probed (and set up) where `services up` runs them.
//! (The `mariadb` start function runs the machine's server on its own data
//! directory, which already serves: it is not started twice.)

use super::{SINGLE, TLS};
use crate::Private;
use crate::private::standard::probe_standard;

#[test]
fn mariadb_tls_starts_on_a_free_port_and_takes_only_tls() {
    let mut server = Private::build(&TLS)
        .own_pki()
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(TLS.setup.is_some(), "mariadb-tls has a set-up");
    server.setup().unwrap();
    // (`mariadb`'s probe would say yes here too: `mariadb-admin ping`
    // exits 0 for a live server that denies the login, as in the bash.)
    // A second start reuses the data directory made at the first.
    server.stop(0);
    server.restart(0).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn the_standard_servers_answer() {
    probe_standard(&[&SINGLE, &TLS]);
}
