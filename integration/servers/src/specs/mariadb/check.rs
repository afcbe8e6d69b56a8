//! Whether a MariaDB server answers, and the set-ups that follow: the
//! test account on the machine's server, mariadb-tls refusing plaintext.

use std::path::PathBuf;

use crate::util::{output, output_all, port_open};
use crate::{Instance, Paths, Service};

/// Root through the socket (works before the test user exists), else the
/// test user over TCP.
pub(super) fn probe(instance: &Instance) -> bool {
    let port = instance.port.to_string();
    port_open(instance.ip, instance.port)
        && (socket_serves(instance.port)
            || output(
                3,
                "mariadb-admin",
                &[
                    "--protocol=tcp",
                    "-h",
                    &instance.ip.to_string(),
                    "-P",
                    &port,
                    "-u",
                    "fencing",
                    "ping",
                ],
                &[("MYSQL_PWD", "fencing")],
            )
            .is_some())
}

/// Whether root gets in through the default socket, and the server there
/// is the one on `port` (the socket is the machine's server's, whatever
/// the port asked about).
fn socket_serves(port: u16) -> bool {
    output(
        10,
        "mariadb",
        &[
            "--protocol=socket",
            "-u",
            "root",
            "-N",
            "-B",
            "-e",
            "SELECT @@port",
        ],
        &[],
    )
    .is_some_and(|out| out.trim() == port.to_string())
}

/// Over TLS as the test user, the server's certificate verified against
/// the test CA: `SELECT 1` answers 1.
pub(super) fn probe_tls(instance: &Instance) -> bool {
    let ca = format!("--ssl-ca={}", instance.paths.tls_file("ca.pem").display());
    let ip = instance.ip.to_string();
    let port = instance.port.to_string();
    output(
        5,
        "mariadb",
        &[
            "--protocol=tcp",
            "-h",
            &ip,
            "-P",
            &port,
            "-u",
            crate::TLS_USER,
            "--connect-timeout=3",
            &ca,
            "--ssl-verify-server-cert",
            "-N",
            "-B",
            "fencing",
            "-e",
            "SELECT 1",
        ],
        &[("MYSQL_PWD", crate::TLS_PASSWORD)],
    )
    .is_some_and(|out| out.trim() == "1")
}

/// The plaintext way in must be shut: checked at each `up`, so a
/// misconfigured variant fails loudly.
pub(super) fn setup_tls(paths: &Paths, service: &Service) -> Result<(), String> {
    let member = &service.members[0];
    let port = member.port.to_string();
    let plaintext = output(
        5,
        "mariadb",
        &[
            "--protocol=tcp",
            "-h",
            "127.0.0.1",
            "-P",
            &port,
            "-u",
            crate::TLS_USER,
            "--connect-timeout=3",
            "--skip-ssl",
            "fencing",
            "-e",
            "SELECT 1",
        ],
        &[("MYSQL_PWD", crate::TLS_PASSWORD)],
    );
    if plaintext.is_some() {
        return Err(format!(
            "{} on 127.0.0.1:{}: a connection without TLS (--skip-ssl) was accepted; \
             the server must refuse it (log {})",
            member.instance,
            member.port,
            log(paths, member.instance).display()
        ));
    }
    eprintln!(
        "mariadb-tls: TLS only, database fencing, users {u}@% and {u}@localhost (REQUIRE SSL) ready",
        u = crate::TLS_USER
    );
    Ok(())
}

/// The database and the test user, from anywhere and from localhost.
const ACCOUNT_SQL: &str = "CREATE DATABASE IF NOT EXISTS fencing;
CREATE USER IF NOT EXISTS 'fencing'@'%' IDENTIFIED BY 'fencing';
CREATE USER IF NOT EXISTS 'fencing'@'localhost' IDENTIFIED BY 'fencing';
ALTER USER 'fencing'@'%' IDENTIFIED BY 'fencing';
ALTER USER 'fencing'@'localhost' IDENTIFIED BY 'fencing';
GRANT ALL PRIVILEGES ON fencing.* TO 'fencing'@'%';
GRANT ALL PRIVILEGES ON fencing.* TO 'fencing'@'localhost';
";

/// Database `fencing`, users `fencing@%` and `fencing@localhost`
/// (password `fencing`), then a login as the tests will.
pub(super) fn setup(paths: &Paths, service: &Service) -> Result<(), String> {
    let member = &service.members[0];
    let port = member.port.to_string();
    let at = format!(
        "{} on 127.0.0.1:{} (log {})",
        member.instance,
        member.port,
        log(paths, member.instance).display()
    );
    // root through the socket (unix_socket auth), else root over TCP with an
    // empty password
    let (ok, out) = if socket_serves(member.port) {
        output_all(
            10,
            "mariadb",
            &["--protocol=socket", "-u", "root"],
            &[],
            Some(ACCOUNT_SQL),
        )
    } else {
        output_all(
            10,
            "mariadb",
            &[
                "--protocol=tcp",
                "-h",
                "127.0.0.1",
                "-P",
                &port,
                "-u",
                "root",
            ],
            &[],
            Some(ACCOUNT_SQL),
        )
    };
    if !ok {
        return Err(format!(
            "{at}: creating user fencing and database fencing as root failed: {}",
            out.trim()
        ));
    }
    let login = output(
        10,
        "mariadb",
        &[
            "--protocol=tcp",
            "-h",
            "127.0.0.1",
            "-P",
            &port,
            "-u",
            "fencing",
            "fencing",
            "-e",
            "SELECT 1",
        ],
        &[("MYSQL_PWD", "fencing")],
    );
    if login.is_none() {
        return Err(format!(
            "{at}: cannot log in as fencing/fencing to database fencing"
        ));
    }
    eprintln!(
        "mariadb: database fencing, users fencing@% and fencing@localhost (password fencing) ready"
    );
    Ok(())
}

fn log(paths: &Paths, instance: &str) -> PathBuf {
    paths.logs.join(format!("{instance}.log"))
}
