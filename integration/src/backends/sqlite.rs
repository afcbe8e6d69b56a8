//! SQLite: embedded, a file per run in the temporary directory.

use std::time::Duration;

use fencing_harness::env::with_option;

use super::{Backend, table_prefix};
use crate::run_prefix;

/// SQLite, on a file of this run.
pub const BACKEND: Backend = Backend {
    name: "sqlite",
    descriptor: "sql",
    server: None,
    url: || with_option(&file_url("integration"), &table_prefix()),
    ttl: Duration::from_millis(400),
    store: None,
    unreachable: None,
    #[cfg(feature = "bench")]
    bench: bench::BENCH,
};

/// `sqlite://` on a file of this run, named for `user` (the tests and the
/// bench keep apart).
fn file_url(user: &str) -> String {
    let path = std::env::temp_dir().join(format!("fencing-{user}-{}.sqlite", run_prefix()));
    format!("sqlite://{}", path.display())
}

#[cfg(feature = "bench")]
mod bench {
    use fencing_sql::Dialect;

    use crate::backends::plain::sql::SqlPlain;
    use crate::backends::plain::{Bench, Plain};

    /// The SQL rows on a file of their own; no server, so neither in the
    /// scale rows nor with a load to read.
    pub(super) const BENCH: Bench = Bench {
        plain: Plain::Sql(SqlPlain {
            dialect: Dialect::Sqlite,
            url: || super::file_url("bench"),
            version: |v| format!("SQLite {v} (bundled by sqlx)"),
        }),
        scale: false,
        load: None,
        in_memory: false,
        server_header: None,
    };
}
