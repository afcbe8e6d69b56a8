//! MariaDB (the MySQL dialect): issuer and store on this run's tables.

use std::time::Duration;

use fencing_harness::env::{self, with_option};

use super::{Backend, table_prefix};

/// MariaDB, on `FENCING_MYSQL_URL`.
pub const BACKEND: Backend = Backend {
    name: "mariadb",
    descriptor: "sql",
    server: Some(&env::MYSQL),
    url: || with_option(&env::MYSQL.endpoint(), &table_prefix()),
    ttl: Duration::from_millis(400),
    store: None,
    unreachable: Some("mysql://fencing:fencing@127.0.0.1:1/fencing"),
    #[cfg(feature = "bench")]
    bench: bench::BENCH,
};

#[cfg(feature = "bench")]
mod bench {
    use fencing_harness::env;
    use fencing_sql::Dialect;

    use crate::backends::plain::sql::SqlPlain;
    use crate::backends::plain::{Bench, Plain};

    /// The SQL rows; PostgreSQL stands for the SQL issuers in the scale
    /// rows.
    pub(super) const BENCH: Bench = Bench {
        plain: Plain::Sql(SqlPlain {
            dialect: Dialect::MySql,
            url: || env::MYSQL.endpoint(),
            version: |v| format!("MariaDB {v}"),
        }),
        scale: false,
        load: None,
        in_memory: false,
        server_header: None,
    };
}
