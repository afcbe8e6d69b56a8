//! A throwaway PostgreSQL cluster of the caller's own: the nemesis's, in a
//! network namespace.

use std::io::Write;

use super::start::{as_postgres, as_postgres_args, listen, run, server_bin};
use crate::{Instance, Launch};

/// Makes (at its first start) a cluster in `instance.dir/pgdata` that
/// trusts every connection from `trust_from` (a CIDR network, e.g.
/// `10.77.0.0/16`) as any user, and says how to run it on
/// `instance.ip:instance.port` with its socket in its data directory. Its
/// superuser is `postgres` ([`private_url`]). Commits do not wait for the
/// disk: for tests that never crash it (the restart tests cover
/// durability).
///
/// # Errors
/// When no PostgreSQL server is installed, or initdb fails (its output is
/// in `<logs>/<instance name>.log`).
pub fn private_cluster(instance: &Instance, trust_from: &str) -> Result<Launch, String> {
    let fail = |e: String| format!("{} (port {}): {e}", instance.name, instance.port);
    let bin = server_bin().map_err(fail)?;
    let data = instance.dir.join("pgdata");
    let data_s = data.display().to_string();
    // The parent of a data directory must be traversable by its owner.
    run(
        instance,
        10,
        "chmod",
        &["755", &instance.dir.display().to_string()],
    )?;
    if !data.join("PG_VERSION").is_file() {
        std::fs::create_dir_all(&data).map_err(|e| fail(format!("{data_s}: {e}")))?;
        run(instance, 30, "chown", &["-R", "postgres:postgres", &data_s])?;
        as_postgres(
            instance,
            &bin.join("initdb"),
            &["-D", &data_s, "-A", "trust", "-U", "postgres", "--no-sync"],
            None,
        )?;
        let hba = data.join("pg_hba.conf");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&hba)
            .and_then(|mut f| writeln!(f, "host all all {trust_from} trust"))
            .map_err(|e| fail(format!("{}: {e}", hba.display())))?;
    }
    let mut args = as_postgres_args();
    args.extend([
        bin.join("postgres").display().to_string(),
        "-D".to_owned(),
        data_s.clone(),
    ]);
    args.extend(listen(instance));
    args.extend([
        "-c".to_owned(),
        format!("unix_socket_directories={data_s}"),
        // The nemesis never crashes PostgreSQL (the restart tests cover
        // durability): commits need not wait for the disk.
        "-c".to_owned(),
        "synchronous_commit=off".to_owned(),
    ]);
    Ok(Launch::new("setpriv", args, &instance.dir))
}

/// The URL of [`private_cluster`]'s superuser and database.
pub fn private_url(instance: &Instance) -> String {
    format!(
        "postgres://postgres@{}:{}/postgres",
        instance.ip, instance.port
    )
}
