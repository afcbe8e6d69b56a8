//! Opening a pool on a URL: one probe connection first, so a server that
//! is down or refuses the login says so, then the pool.

use fencing_core::adapter::Call;
use fencing_core::redact;
#[cfg(feature = "mysql")]
use fencing_core::tls::TlsMode;
use fencing_core::tls::TlsOptions;
use fencing_core::{Error, Result};

#[cfg(feature = "postgres")]
use super::tls::postgres_tls;
#[cfg(feature = "mysql")]
use super::tls::{mysql_host, mysql_tls};
use super::{Db, Pool};
use crate::error::map_error;
use crate::{Dialect, Tables};

impl Db {
    /// Opens a pool on `url` (a scheme [`SqlConfig`](crate::SqlConfig)
    /// accepted, without our option) for `tables`. (SQLite takes no TLS:
    /// its config refuses the options.)
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql")),
        allow(unused_variables)
    )]
    pub(crate) async fn open(url: &str, tables: Tables, tls: &TlsOptions) -> Result<Self> {
        let scheme = url.split_once(':').map(|(s, _)| s).unwrap_or_default();
        // The MySQL driver does not say what its pool's options asked for
        // (PostgreSQL's does, read in `on`): kept from the URL.
        let (pool, asked) = match scheme {
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => {
                let options: sqlx::postgres::PgConnectOptions =
                    url.parse().map_err(|e| bad_url(url, e))?;
                let options = postgres_tls(options, tls)?;
                let pool = probe_and_open(Dialect::Postgres, options, pool_options()).await?;
                (Pool::Postgres(pool), None)
            }
            #[cfg(feature = "mysql")]
            "mysql" | "mariadb" => {
                let url = url.replacen("mariadb:", "mysql:", 1);
                let options: sqlx::mysql::MySqlConnectOptions =
                    url.parse().map_err(|e| bad_url(&url, e))?;
                let asked = (mysql_host(&url), tls.mode(TlsMode::Prefer));
                let options = mysql_tls(options, tls)?;
                // A server default of `autocommit=0` (or an `init_connect`
                // setting it) would leave every write in an open transaction,
                // rolled back when the connection closes.
                let pool = pool_options().after_connect(|conn, _| {
                    Box::pin(async move {
                        sqlx::Executor::execute(conn, "SET autocommit = 1").await?;
                        Ok(())
                    })
                });
                let pool = probe_and_open(Dialect::MySql, options, pool).await?;
                (Pool::MySql(pool), Some(asked))
            }
            #[cfg(feature = "sqlite")]
            "sqlite" => {
                let options: sqlx::sqlite::SqliteConnectOptions =
                    url.parse().map_err(|e| bad_url(url, e))?;
                let options = options
                    .create_if_missing(true)
                    .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                    .busy_timeout(std::time::Duration::from_secs(30));
                // Every connection to `:memory:` is a database of its own.
                let in_memory = url.contains(":memory:") || url.contains("mode=memory");
                let pool = pool_options().max_connections(if in_memory { 1 } else { 16 });
                let pool = pool
                    .connect_with(options)
                    .await
                    .map_err(|e| map_error(Dialect::Sqlite, e, Call::read("connect")))?;
                (Pool::Sqlite(pool), None)
            }
            _ => return Err(crate::config::unsupported(url)),
        };
        let db = Self::on(pool, tables);
        Ok(match asked {
            Some(asked) => Self {
                transport: Some(asked),
                ..db
            },
            None => db,
        })
    }
}

/// Opens and closes one connection first, so a server that is down or
/// refuses the credentials is reported as such (a pool only says it timed
/// out), then opens the pool.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn probe_and_open<DB: sqlx::Database>(
    dialect: Dialect,
    options: <DB::Connection as sqlx::Connection>::Options,
    pool: sqlx::pool::PoolOptions<DB>,
) -> Result<sqlx::Pool<DB>> {
    use sqlx::{ConnectOptions, Connection};
    let failed = |e| map_error(dialect, e, Call::read("connect"));
    let conn = options.connect().await.map_err(failed)?;
    let _ = conn.close().await;
    pool.connect_with(options).await.map_err(failed)
}

fn pool_options<DB: sqlx::Database>() -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .max_connections(16)
        .acquire_timeout(std::time::Duration::from_secs(10))
}

fn bad_url(url: &str, e: sqlx::Error) -> Error {
    Error::invalid_input(format!("malformed database URL {:?}: {e}", redact(url)))
}
