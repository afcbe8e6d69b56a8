//! [`Db`]: the connection pool and the tables to use there, and the macros
//! that run one body on whichever driver's pool is inside. Opening it, its
//! checks, the TLS mapping and the tables' creation are in the submodules.

use std::fmt;

use fencing_core::tls::TlsMode;

#[cfg(feature = "postgres")]
use self::tls::pg_mode;
use crate::{Dialect, Tables};

mod checks;
mod open;
mod schema;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod tls;

#[derive(Clone, Debug)]
pub(crate) enum Pool {
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlPool),
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
}

/// Like [`on_pool!`], with one body for the dialects whose statements
/// answer with `RETURNING` (PostgreSQL, SQLite) and one for MySQL, which
/// answers through `LAST_INSERT_ID`.
macro_rules! on_returning_pool {
    ($pool:expr, $p:ident => returning: $returning:expr, mysql: $mysql:expr $(,)?) => {
        match $pool {
            #[cfg(feature = "postgres")]
            $crate::db::Pool::Postgres($p) => $returning,
            #[cfg(feature = "sqlite")]
            $crate::db::Pool::Sqlite($p) => $returning,
            #[cfg(feature = "mysql")]
            $crate::db::Pool::MySql($p) => $mysql,
        }
    };
}
pub(crate) use on_returning_pool;

/// Runs the same code on whichever pool is inside: the statements differ by
/// dialect, the calls that run them do not.
macro_rules! on_pool {
    ($pool:expr, $p:ident => $body:expr) => {
        $crate::db::on_returning_pool!($pool, $p => returning: $body, mysql: $body)
    };
}
pub(crate) use on_pool;

/// A connection pool to PostgreSQL, MySQL/MariaDB or SQLite, and the tables
/// to use there. Cheap to clone.
#[derive(Clone)]
pub struct Db {
    pub(crate) pool: Pool,
    pub(crate) tables: Tables,
    /// [`Db::accept_volatile_commits`].
    pub(crate) volatile_commits_accepted: bool,
    /// The host and the TLS mode asked for, when known (not for a MySQL
    /// pool passed in).
    transport: Option<(String, TlsMode)>,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db")
            .field("dialect", &self.dialect())
            .field("tables", &self.tables)
            .field("volatile_commits_accepted", &self.volatile_commits_accepted)
            .finish()
    }
}

impl Db {
    /// `pool` on `tables`, with the transport a PostgreSQL pool's own
    /// options tell (the other drivers' do not say).
    fn on(pool: Pool, tables: Tables) -> Self {
        #[allow(unreachable_patterns)]
        let transport = match &pool {
            #[cfg(feature = "postgres")]
            Pool::Postgres(p) => {
                let options = p.connect_options();
                Some((
                    options.get_host().to_owned(),
                    pg_mode(options.get_ssl_mode()),
                ))
            }
            _ => None,
        };
        Self {
            pool,
            tables,
            volatile_commits_accepted: false,
            transport,
        }
    }

    /// Uses an existing PostgreSQL pool (its own TLS settings).
    #[cfg(feature = "postgres")]
    pub fn postgres(pool: sqlx::PgPool) -> Self {
        Self::on(Pool::Postgres(pool), Tables::default())
    }

    /// Uses an existing MySQL/MariaDB pool (its own TLS settings).
    #[cfg(feature = "mysql")]
    pub fn mysql(pool: sqlx::MySqlPool) -> Self {
        Self::on(Pool::MySql(pool), Tables::default())
    }

    /// Uses an existing SQLite pool. Give it a `busy_timeout` (and WAL) so
    /// concurrent writers wait instead of failing with `SQLITE_BUSY`.
    #[cfg(feature = "sqlite")]
    pub fn sqlite(pool: sqlx::SqlitePool) -> Self {
        Self::on(Pool::Sqlite(pool), Tables::default())
    }

    /// Accepts a server whose commits can be lost in a crash (PostgreSQL
    /// `synchronous_commit=off` or `fsync=off`, MySQL/MariaDB
    /// `innodb_flush_log_at_trx_commit` 0 or 2, SQLite `synchronous` below
    /// `FULL` or an in-memory database): [`SqlIssuer::new`](crate::SqlIssuer::new)
    /// refuses such a server otherwise, since a lost commit re-issues its
    /// tokens. Tokens can then go backwards after a crash; `verify` still
    /// reports it as unsafe, and says it was accepted.
    #[must_use]
    pub fn accept_volatile_commits(mut self) -> Self {
        self.volatile_commits_accepted = true;
        self
    }

    /// Uses other table names.
    #[must_use]
    pub fn with_tables(mut self, tables: Tables) -> Self {
        self.tables = tables;
        self
    }

    /// The tables in use.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// Which database this is.
    pub fn dialect(&self) -> Dialect {
        match &self.pool {
            #[cfg(feature = "postgres")]
            Pool::Postgres(_) => Dialect::Postgres,
            #[cfg(feature = "mysql")]
            Pool::MySql(_) => Dialect::MySql,
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(_) => Dialect::Sqlite,
        }
    }

    /// Closes the pool.
    pub async fn close(&self) {
        on_pool!(&self.pool, p => p.close().await);
    }
}
