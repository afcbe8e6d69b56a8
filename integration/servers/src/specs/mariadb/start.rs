//! How the MariaDB servers are started: the machine's, and mariadb-tls, a
//! server of its own made at its first start.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::util::{output_all, write};
use crate::{Instance, Launch};

/// The server binary.
const MARIADBD: &str = "/usr/sbin/mariadbd";

/// `mariadb`: the machine's server and data directory, as its package set
/// them up (/etc/mysql names the socket and the data directory).
pub(super) fn single(instance: &Instance) -> Result<Launch, String> {
    run(
        instance,
        10,
        "install",
        &["-d", "-o", "mysql", "-g", "mysql", "/run/mysqld"],
    )?;
    if !Path::new("/var/lib/mysql/mysql").is_dir() {
        // the package normally initializes it
        run(
            instance,
            300,
            "mariadb-install-db",
            &["--user=mysql", "--datadir=/var/lib/mysql"],
        )?;
    }
    let log = own_log(instance)?;
    let args = [
        "--user=mysql".to_owned(),
        format!("--bind-address={}", instance.ip),
        format!("--port={}", instance.port),
        format!("--log-error={}", log.display()),
    ];
    Ok(Launch::new(MARIADBD, args, "/"))
}

/// `mariadb-tls`: a second mariadbd with its own datadir, socket and pid
/// file, and no option files (--no-defaults: /etc/mysql/ configures the
/// machine's server). TLS required for every TCP client; the test user,
/// REQUIRE SSL, is (re)made by --init-file at each start, before the
/// server listens.
pub(super) fn tls(instance: &Instance) -> Result<Launch, String> {
    let dir = &instance.dir;
    let d = dir.display().to_string();
    run(
        instance,
        10,
        "install",
        &["-d", "-o", "mysql", "-g", "mysql", "-m", "0750", &d],
    )?;
    if !dir.join("initialized").is_file() {
        let _ = std::fs::remove_dir_all(dir.join("data"));
        run(
            instance,
            300,
            "mariadb-install-db",
            &[
                "--no-defaults",
                "--user=mysql",
                &format!("--datadir={d}/data"),
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
        )?;
        write(&dir.join("initialized"), "").map_err(|e| format!("{}: {e}", instance.name))?;
    }
    let init = dir.join("init.sql");
    write(&init, &init_sql()).map_err(|e| format!("{}: {e}", instance.name))?;
    run(
        instance,
        10,
        "chown",
        &["mysql:", &init.display().to_string()],
    )?;
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{}: {}: {e}", instance.name, init.display()))?;
    let log = own_log(instance)?;
    let tls = |name: &str| instance.paths.tls_file(name).display().to_string();
    let args = [
        "--no-defaults".to_owned(),
        "--user=mysql".to_owned(),
        format!("--datadir={d}/data"),
        format!("--socket={d}/mysqld.sock"),
        format!("--pid-file={d}/mysqld.pid"),
        format!("--bind-address={}", instance.ip),
        format!("--port={}", instance.port),
        format!("--log-error={}", log.display()),
        format!("--init-file={}", init.display()),
        format!("--ssl-cert={}", tls("server.pem")),
        format!("--ssl-key={}", tls("server-key.pem")),
        format!("--ssl-ca={}", tls("ca.pem")),
        "--require-secure-transport=ON".to_owned(),
    ];
    Ok(Launch::new(MARIADBD, args, dir))
}

/// mariadb-tls's init file: database `fencing`, the test user from
/// anywhere and from localhost, REQUIRE SSL, its password reset.
pub(crate) fn init_sql() -> String {
    let mut sql = String::from("CREATE DATABASE IF NOT EXISTS fencing;\n");
    for host in ["%", "localhost"] {
        let user = format!("'{}'@'{host}'", crate::TLS_USER);
        let password = crate::TLS_PASSWORD;
        sql.push_str(&format!(
            "CREATE USER IF NOT EXISTS {user} IDENTIFIED BY '{password}' REQUIRE SSL;\n\
             ALTER USER {user} IDENTIFIED BY '{password}' REQUIRE SSL;\n\
             GRANT ALL PRIVILEGES ON fencing.* TO {user};\n"
        ));
    }
    sql
}

/// The instance's log: `<logs>/<name>.log`.
pub(super) fn log_file(instance: &Instance) -> PathBuf {
    instance.paths.logs.join(format!("{}.log", instance.name))
}

/// mariadbd writes its error log itself, as user mysql: give it our log
/// file.
fn own_log(instance: &Instance) -> Result<PathBuf, String> {
    let log = log_file(instance);
    std::fs::create_dir_all(&instance.paths.logs)
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
        })
        .map_err(|e| format!("{}: {}: {e}", instance.name, log.display()))?;
    run(
        instance,
        10,
        "chown",
        &["mysql:", &log.display().to_string()],
    )?;
    Ok(log)
}

/// A preparatory command (as root), its output appended to the log.
fn run(instance: &Instance, secs: u32, program: &str, args: &[&str]) -> Result<(), String> {
    use std::io::Write;
    let (ok, out) = output_all(secs, program, args, &[], None);
    let log = log_file(instance);
    if !out.is_empty() {
        let _ = std::fs::create_dir_all(&instance.paths.logs);
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
        {
            let _ = f.write_all(out.as_bytes());
        }
    }
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} (port {}): {program} failed: {}; see {}",
            instance.name,
            instance.port,
            out.lines().last().unwrap_or_default(),
            log.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_init_file_makes_both_accounts_require_ssl() {
        let sql = init_sql();
        assert!(sql.starts_with("CREATE DATABASE IF NOT EXISTS fencing;\n"));
        for host in ["%", "localhost"] {
            assert!(sql.contains(&format!(
                "ALTER USER 'fencing'@'{host}' IDENTIFIED BY 'fencing-tls-secret' REQUIRE SSL;"
            )));
            assert!(sql.contains(&format!(
                "GRANT ALL PRIVILEGES ON fencing.* TO 'fencing'@'{host}';"
            )));
        }
    }
}
