//! How the PostgreSQL servers are started: the Debian cluster, and
//! postgres-tls, a cluster of its own made at its first start.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::util::{output_all, write};
use crate::{Instance, Launch};

/// The newest installed PostgreSQL server's `bin` directory, e.g.
/// `/usr/lib/postgresql/15/bin`.
///
/// # Errors
/// When no server is installed under `/usr/lib/postgresql`.
pub fn server_bin() -> Result<PathBuf, String> {
    let root = Path::new("/usr/lib/postgresql");
    let versions = std::fs::read_dir(root)
        .map_err(|e| format!("no PostgreSQL server installed ({}: {e})", root.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("bin/postgres").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned());
    newest(versions)
        .map(|v| root.join(v).join("bin"))
        .ok_or_else(|| format!("no PostgreSQL server installed under {}", root.display()))
}

/// The newest of major versions like `15`, `9.6` (compared as numbers).
pub(super) fn newest(versions: impl Iterator<Item = String>) -> Option<String> {
    let key = |v: &String| -> Vec<u64> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    versions.max_by_key(key)
}

/// `postgres`: the Debian cluster, run in the foreground as user postgres
/// (what pg_ctlcluster does, minus the daemonizing).
pub(super) fn single(instance: &Instance) -> Result<Launch, String> {
    let fail = |e: String| format!("{} (port {}): {e}", instance.name, instance.port);
    let bin = server_bin().map_err(fail)?;
    let version = bin
        .parent()
        .and_then(Path::file_name)
        .map(|v| v.to_string_lossy().into_owned())
        .unwrap_or_default();
    let conf = PathBuf::from(format!("/etc/postgresql/{version}/main/postgresql.conf"));
    if !conf.is_file() {
        run(instance, 120, "pg_createcluster", &[&version, "main"])?;
    }
    run(
        instance,
        10,
        "install",
        &[
            "-d",
            "-o",
            "postgres",
            "-g",
            "postgres",
            "-m",
            "2775",
            "/var/run/postgresql",
        ],
    )?;
    let mut args = as_postgres_args();
    args.extend([
        bin.join("postgres").display().to_string(),
        "-D".to_owned(),
        format!("/var/lib/postgresql/{version}/main"),
        "-c".to_owned(),
        format!("config_file={}", conf.display()),
    ]);
    args.extend(listen(instance));
    Ok(Launch::new("setpriv", args, "/"))
}

/// `postgres-tls`: a second PostgreSQL cluster of its own (the machine's
/// main one is left alone): TLS with the test certificate, SCRAM
/// passwords, and pg_hba refusing every TCP connection without TLS. The
/// account and database are made at initdb time in single-user mode,
/// before the server ever listens, so the readiness probe can log in as
/// the test user.
pub(super) fn tls(instance: &Instance) -> Result<Launch, String> {
    let bin =
        server_bin().map_err(|e| format!("{} (port {}): {e}", instance.name, instance.port))?;
    let dir = &instance.dir;
    let d = dir.display().to_string();
    run(
        instance,
        10,
        "install",
        &["-d", "-o", "postgres", "-g", "postgres", "-m", "0700", &d],
    )?;
    let pgdata = dir.join("pgdata");
    if !dir.join("initialized").is_file() {
        let _ = std::fs::remove_dir_all(&pgdata);
        let pgdata = pgdata.display().to_string();
        as_postgres(
            instance,
            &bin.join("initdb"),
            &[
                "-D",
                &pgdata,
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-locale",
                "--auth-local=peer",
                "--auth-host=reject",
            ],
            None,
        )?;
        let out = as_postgres(
            instance,
            &bin.join("postgres"),
            &[
                "--single",
                "-D",
                &pgdata,
                "-c",
                "password_encryption=scram-sha-256",
                "postgres",
            ],
            Some(&account_sql()),
        )?;
        // Single-user mode exits 0 on a failed statement: its ERROR lines tell.
        if out.contains("ERROR") || out.contains("FATAL") {
            return Err(format!(
                "{} (port {}): creating user {} and database fencing failed; see {}",
                instance.name,
                instance.port,
                crate::TLS_USER,
                log_file(instance).display()
            ));
        }
        write(&dir.join("initialized"), "").map_err(|e| format!("{}: {e}", instance.name))?;
    }
    // PostgreSQL wants its key owned by its own user, mode 0600: a copy,
    // refreshed at each start.
    for (name, mode) in [("server.pem", "0644"), ("server-key.pem", "0600")] {
        let from = instance.paths.tls_file(name).display().to_string();
        let to = dir.join(name).display().to_string();
        run(
            instance,
            10,
            "install",
            &["-o", "postgres", "-g", "postgres", "-m", mode, &from, &to],
        )?;
    }
    let hba = dir.join("pg_hba.conf");
    write(&hba, &tls_hba()).map_err(|e| format!("{}: {e}", instance.name))?;
    std::fs::set_permissions(&hba, std::fs::Permissions::from_mode(0o644))
        .map_err(|e| format!("{}: {}: {e}", instance.name, hba.display()))?;
    let mut args = as_postgres_args();
    args.extend([
        bin.join("postgres").display().to_string(),
        "-D".to_owned(),
        pgdata.display().to_string(),
    ]);
    args.extend(listen(instance));
    for setting in [
        format!("unix_socket_directories={d}"),
        format!("hba_file={}", hba.display()),
        "ssl=on".to_owned(),
        format!("ssl_cert_file={d}/server.pem"),
        format!("ssl_key_file={d}/server-key.pem"),
        "password_encryption=scram-sha-256".to_owned(),
    ] {
        args.extend(["-c".to_owned(), setting]);
    }
    Ok(Launch::new("setpriv", args, dir))
}

/// The test account and its database, made in single-user mode.
pub(super) fn account_sql() -> String {
    format!(
        "CREATE ROLE {user} LOGIN PASSWORD '{password}';\nCREATE DATABASE fencing OWNER {user};\n",
        user = crate::TLS_USER,
        password = crate::TLS_PASSWORD
    )
}

/// postgres-tls's pg_hba.conf: the superuser through the socket, the test
/// user over TLS with a SCRAM password, nothing else. (Its listen address
/// already limits who can connect, so the `hostssl` line takes any
/// address: natively 127.0.0.1, as the bash had it, and a namespace's
/// clients when the nemesis runs it.)
pub(super) fn tls_hba() -> String {
    format!(
        "# written by the fencing-servers spec at each start\n\
         local     all      postgres                peer\n\
         hostssl   fencing  {user}  0.0.0.0/0     scram-sha-256\n\
         hostnossl all      all      0.0.0.0/0     reject\n\
         hostnossl all      all      ::/0          reject\n",
        user = crate::TLS_USER
    )
}

/// `setpriv` arguments that run the rest as user postgres.
pub(super) fn as_postgres_args() -> Vec<String> {
    ["--reuid=postgres", "--regid=postgres", "--init-groups"]
        .map(str::to_owned)
        .to_vec()
}

/// `-c listen_addresses=IP -c port=PORT`.
pub(super) fn listen(instance: &Instance) -> Vec<String> {
    vec![
        "-c".to_owned(),
        format!("listen_addresses={}", instance.ip),
        "-c".to_owned(),
        format!("port={}", instance.port),
    ]
}

/// `program args…` as user postgres, from the instance's directory (one it
/// may enter), its output appended to the instance's log; the output.
pub(super) fn as_postgres(
    instance: &Instance,
    program: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String, String> {
    let d = instance.dir.display().to_string();
    let program = program.display().to_string();
    let mut all: Vec<&str> = vec!["--reuid=postgres", "--regid=postgres", "--init-groups"];
    all.extend(["env", "-C", &d, &program]);
    all.extend_from_slice(args);
    let (ok, out) = output_all(300, "setpriv", &all, &[], stdin);
    append_log(instance, &out);
    if ok {
        Ok(out)
    } else {
        Err(format!(
            "{} (port {}): {} failed; see {}",
            instance.name,
            instance.port,
            Path::new(&program)
                .file_name()
                .map_or(program.clone(), |n| n.to_string_lossy().into_owned()),
            log_file(instance).display()
        ))
    }
}

/// A preparatory command (as root), its output appended to the log.
pub(super) fn run(
    instance: &Instance,
    secs: u32,
    program: &str,
    args: &[&str],
) -> Result<(), String> {
    let (ok, out) = output_all(secs, program, args, &[], None);
    append_log(instance, &out);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} (port {}): {program} {} failed: {}; see {}",
            instance.name,
            instance.port,
            args.join(" "),
            out.trim(),
            log_file(instance).display()
        ))
    }
}

/// The instance's log: `<logs>/<name>.log`.
pub(super) fn log_file(instance: &Instance) -> PathBuf {
    instance.paths.logs.join(format!("{}.log", instance.name))
}

fn append_log(instance: &Instance, text: &str) {
    use std::io::Write;
    if text.is_empty() {
        return;
    }
    let log = log_file(instance);
    let _ = std::fs::create_dir_all(&instance.paths.logs);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
    {
        let _ = f.write_all(text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_version_wins_as_a_number() {
        let v = |list: &[&str]| newest(list.iter().map(|s| (*s).to_owned()));
        assert_eq!(v(&["9.6", "15", "13"]).as_deref(), Some("15"));
        assert_eq!(v(&["16", "17"]).as_deref(), Some("17"));
        assert_eq!(v(&[]), None);
    }

    #[test]
    fn postgres_tls_takes_only_tls_with_a_password() {
        let hba = tls_hba();
        assert!(hba.contains("hostssl   fencing  fencing  0.0.0.0/0     scram-sha-256"));
        assert!(hba.contains("hostnossl all      all      0.0.0.0/0     reject"));
        assert!(!hba.lines().any(|l| l.starts_with("host ")));
        assert_eq!(
            account_sql(),
            "CREATE ROLE fencing LOGIN PASSWORD 'fencing-tls-secret';\nCREATE DATABASE fencing OWNER fencing;\n"
        );
    }
}
