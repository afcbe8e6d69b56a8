//! Whether a PostgreSQL server answers, and the set-ups that follow: the
//! test account on the machine's cluster, postgres-tls refusing plaintext.

use std::net::Ipv4Addr;
use std::path::Path;

use crate::util::{output, output_all};
use crate::{Instance, Paths, Service};

/// `pg_isready` says it accepts connections.
pub(super) fn probe(instance: &Instance) -> bool {
    output(
        3,
        "pg_isready",
        &[
            "-q",
            "-h",
            &instance.ip.to_string(),
            "-p",
            &instance.port.to_string(),
        ],
        &[],
    )
    .is_some()
}

/// The account exists from the first start (made before the server
/// listens), so logging in over TLS (verify-full against the test CA) is
/// the probe.
pub(super) fn probe_tls(instance: &Instance) -> bool {
    psql_tls(
        &instance.paths.tls,
        instance.ip,
        instance.port,
        "verify-full",
        &["-c", "SELECT 1"],
    )
    .is_some_and(|out| out.trim() == "1")
}

/// `psql` as the test user over TCP (password from the environment),
/// with `sslmode`; its output when it succeeds.
fn psql_tls(tls: &Path, ip: Ipv4Addr, port: u16, sslmode: &str, args: &[&str]) -> Option<String> {
    let conninfo = format!(
        "host={ip} port={port} sslmode={sslmode} sslrootcert={} user={} dbname=fencing",
        tls.join("ca.pem").display(),
        crate::TLS_USER
    );
    let mut all = vec!["-XAtq", conninfo.as_str()];
    all.extend_from_slice(args);
    output(
        5,
        "psql",
        &all,
        &[
            ("PGPASSWORD", crate::TLS_PASSWORD),
            ("PGCONNECT_TIMEOUT", "3"),
        ],
    )
}

/// Answering proved TLS (verify-full) with the password; without TLS
/// pg_hba must say no. Checked at each `up`, so a misconfigured variant
/// fails loudly.
pub(super) fn setup_tls(paths: &Paths, service: &Service) -> Result<(), String> {
    let member = &service.members[0];
    if psql_tls(
        &paths.tls,
        Ipv4Addr::LOCALHOST,
        member.port,
        "disable",
        &["-c", "SELECT 1"],
    )
    .is_some()
    {
        return Err(format!(
            "{} on 127.0.0.1:{}: a connection without TLS (sslmode=disable) was accepted; \
             the server must refuse it (log {})",
            member.instance,
            member.port,
            paths
                .logs
                .join(format!("{}.log", member.instance))
                .display()
        ));
    }
    eprintln!(
        "postgres-tls: TLS only, database fencing, user {} (scram-sha-256) ready",
        crate::TLS_USER
    );
    Ok(())
}

/// The role and database the tests use, made or reset.
const ACCOUNT_SQL: &str = "DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'fencing') THEN
    CREATE ROLE fencing LOGIN PASSWORD 'fencing';
  ELSE
    ALTER ROLE fencing LOGIN PASSWORD 'fencing';
  END IF;
END $$;
SELECT 'CREATE DATABASE fencing OWNER fencing' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'fencing')\\gexec
";

/// Database `fencing` and user `fencing`/`fencing`, then a login with the
/// URL the tests will use.
pub(super) fn setup(paths: &Paths, service: &Service) -> Result<(), String> {
    let member = &service.members[0];
    let port = member.port.to_string();
    let at = format!(
        "{} on 127.0.0.1:{} (log {})",
        member.instance,
        member.port,
        paths
            .logs
            .join(format!("{}.log", member.instance))
            .display()
    );
    let (ok, out) = psql_admin(&port, ACCOUNT_SQL);
    if !ok {
        return Err(format!(
            "{at}: creating user fencing and database fencing failed: {}",
            out.trim()
        ));
    }
    // Check the URL the tests will use.
    let login = output(
        10,
        "psql",
        &[
            "-XAtq",
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "fencing",
            "-d",
            "fencing",
            "-c",
            "SELECT 1",
        ],
        &[("PGPASSWORD", "fencing"), ("PGCONNECT_TIMEOUT", "5")],
    );
    if login.is_none() {
        return Err(format!(
            "{at}: cannot log in as fencing/fencing to database fencing"
        ));
    }
    eprintln!("postgres: database fencing, user fencing/fencing ready");
    Ok(())
}

/// `sql` as the postgres superuser: through the socket (peer or trust) as
/// user postgres, else over TCP as postgres (trust).
fn psql_admin(port: &str, sql: &str) -> (bool, String) {
    let through_socket = output(5, "id", &["postgres"], &[]).is_some()
        && output(
            10,
            "runuser",
            &[
                "-u", "postgres", "--", "env", "-C", "/", "psql", "-XAtq", "-p", port, "-d",
                "postgres", "-c", "SELECT 1",
            ],
            &[],
        )
        .is_some();
    let admin = [
        "-X",
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-p",
        port,
        "-d",
        "postgres",
    ];
    if through_socket {
        let mut args = vec!["-u", "postgres", "--", "env", "-C", "/", "psql"];
        args.extend(admin);
        output_all(60, "runuser", &args, &[], Some(sql))
    } else {
        let mut args = vec!["-h", "127.0.0.1", "-U", "postgres"];
        args.extend(admin);
        output_all(60, "psql", &args, &[("PGCONNECT_TIMEOUT", "5")], Some(sql))
    }
}
