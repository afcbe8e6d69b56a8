//! What the SQL test files share: this run's tables (one random prefix per
//! test binary), its SQLite file, and opening a server that may be missing.

use std::sync::OnceLock;

use fencing_core::Result;
use fencing_harness::env::Server;
use fencing_sql::{Db, SqlConfig, Tables};

/// One table prefix per test run.
pub(crate) fn tables() -> Tables {
    static PREFIX: OnceLock<String> = OnceLock::new();
    let prefix = PREFIX.get_or_init(|| fencing_testkit::unique_prefix().replace('-', "_") + "_");
    Tables::from_prefix(prefix).expect("valid prefix")
}

/// This run's SQLite file.
pub(crate) fn sqlite_url() -> String {
    static PATH: OnceLock<std::path::PathBuf> = OnceLock::new();
    let path = PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("fencing-test-{}.sqlite", tables().records))
    });
    format!("sqlite://{}", path.display())
}

/// A pool on `url` (its own tables), as a caller opens one.
pub(crate) async fn open(url: &str) -> Result<Db> {
    SqlConfig::from_url(url)?.connect_db().await
}

/// The database at `url` on this run's tables, or `None` when the run
/// skips `server`; one that does not answer fails naming it (`None`: the
/// SQLite file, which must open).
pub(crate) async fn connect(server: Option<&Server>, url: &str) -> Option<Db> {
    if server.is_some_and(Server::skipped) {
        return None;
    }
    match open(url).await {
        Ok(db) => Some(db.with_tables(tables())),
        Err(e) => match server {
            Some(server) => server.unavailable(&e),
            None => panic!("cannot open {url}: {e}"),
        },
    }
}
