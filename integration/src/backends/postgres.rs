//! PostgreSQL: issuer and store on this run's tables.

use std::time::Duration;

use fencing_harness::env::{self, with_option};

use super::{Backend, table_prefix};

/// PostgreSQL, on `FENCING_PG_URL`.
pub const BACKEND: Backend = Backend {
    name: "postgres",
    descriptor: "sql",
    server: Some(&env::POSTGRES),
    url: || with_option(&env::POSTGRES.endpoint(), &table_prefix()),
    ttl: Duration::from_millis(400),
    store: None,
    unreachable: Some("postgres://fencing:fencing@127.0.0.1:1/fencing"),
    #[cfg(feature = "bench")]
    bench: bench::BENCH,
};

#[cfg(feature = "bench")]
mod bench {
    use fencing_harness::env;
    use fencing_sql::Dialect;
    use fencing_sql::sqlx;

    use crate::backends::plain::sql::SqlPlain;
    use crate::backends::plain::{Bench, BoxResult, Plain};

    /// The SQL rows, and the scale rows (its issuer's two statements bare).
    pub(super) const BENCH: Bench = Bench {
        plain: Plain::Sql(SqlPlain {
            dialect: Dialect::Postgres,
            url: || env::POSTGRES.endpoint(),
            version: |v| format!("PostgreSQL {v}"),
        }),
        scale: true,
        load: Some(|| Box::pin(load())),
        in_memory: false,
        server_header: None,
    };

    /// `pg_stat_activity`: connections to the database.
    async fn load() -> BoxResult<String> {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(&env::POSTGRES.endpoint())
            .await?;
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()",
        )
        .fetch_one(&pool)
        .await?;
        pool.close().await;
        Ok(format!(
            "PostgreSQL: {n} connections (1 of them this reading's)"
        ))
    }
}
