//! SQL databases' plain side: the fenced upsert of [`SqlStore`] against a
//! plain upsert of the same table shape, and the statements of
//! [`SqlIssuer`] (`fencing_sql::raw`) run bare through sqlx, all on one
//! shared pool.

use std::time::Duration;

use bytes::Bytes;
use fencing_sql::sqlx::{self, MySqlPool, PgPool, SqlitePool};
use fencing_sql::{Db, Dialect, SqlIssuer, SqlStore, Tables, raw};
use fencing_tokens::{FencedStore, FencingToken, HolderId, LeaseRequest, TokenIssuer};

use super::BoxResult;

/// How the bench opens a SQL database.
#[derive(Clone, Copy, Debug)]
pub struct SqlPlain {
    /// Its dialect.
    pub dialect: Dialect,
    /// Its URL for the bench (no options: the bench names its own tables).
    pub url: fn() -> String,
    /// The report's line for the version the server gives.
    pub version: fn(&str) -> String,
}

/// A pool of the one dialect.
#[derive(Clone, Debug)]
enum Pool {
    Pg(PgPool),
    My(MySqlPool),
    Lite(SqlitePool),
}

/// Runs the same code on whichever pool is inside.
macro_rules! on_pool {
    ($pool:expr, $p:ident => $body:expr) => {
        match $pool {
            Pool::Pg($p) => $body,
            Pool::My($p) => $body,
            Pool::Lite($p) => $body,
        }
    };
}

/// The lease TTL of the acquire benchmarks (released at once in any case).
const TTL: Duration = Duration::from_secs(10);

/// The fenced and plain sides on one pool.
#[derive(Clone, Debug)]
pub struct Sides {
    plain: SqlPlain,
    pool: Pool,
    store: SqlStore,
    issuer: SqlIssuer,
    db: Db,
    plain_put: String,
    acquire: String,
    release: String,
}

impl Sides {
    /// Opens a pool to `url` with the options of `SqlConfig::connect_db` (16
    /// connections, sqlx's defaults otherwise, so a connection is pinged
    /// each time it leaves the pool) unless `ping` is false, and puts the
    /// store, the issuer and the bare statements on it, on tables named
    /// `{prefix}…`.
    ///
    /// # Errors
    /// If the database does not answer, or the tables cannot be made.
    pub async fn connect(plain: SqlPlain, url: &str, prefix: &str, ping: bool) -> BoxResult<Self> {
        let dialect = plain.dialect;
        let pool = match dialect {
            Dialect::Postgres => {
                let o: sqlx::postgres::PgConnectOptions = url.parse()?;
                Pool::Pg(pool_options(ping).connect_with(o).await?)
            }
            Dialect::MySql => {
                let o: sqlx::mysql::MySqlConnectOptions =
                    url.replacen("mariadb:", "mysql:", 1).parse()?;
                Pool::My(pool_options(ping).connect_with(o).await?)
            }
            Dialect::Sqlite => {
                let o: sqlx::sqlite::SqliteConnectOptions = url.parse()?;
                let o = o
                    .create_if_missing(true)
                    .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                    .busy_timeout(Duration::from_secs(30));
                Pool::Lite(pool_options(ping).connect_with(o).await?)
            }
            other => return Err(format!("no plain side for the {other:?} dialect").into()),
        };
        let tables = Tables::from_prefix(prefix)?;
        let db = match &pool {
            Pool::Pg(p) => Db::postgres(p.clone()),
            Pool::My(p) => Db::mysql(p.clone()),
            Pool::Lite(p) => Db::sqlite(p.clone()),
        }
        .with_tables(tables.clone());
        let store = SqlStore::new(db.clone()).await?;
        let issuer = SqlIssuer::new(db.clone()).await?;
        Ok(Self {
            plain,
            plain_put: plain_upsert(dialect, &tables.records),
            acquire: raw::acquire(dialect, &tables.leases),
            release: raw::release(dialect, &tables.leases),
            pool,
            store,
            issuer,
            db,
        })
    }

    /// The fenced store.
    pub fn store(&self) -> &SqlStore {
        &self.store
    }

    /// `SqlStore::put`.
    ///
    /// # Errors
    /// As the store's.
    pub async fn fenced_put(&self, key: &str, value: Bytes, token: u64) -> BoxResult<()> {
        Ok(self.store.put(key, value, FencingToken::new(token)).await?)
    }

    /// The plain upsert: the same row shape, no condition.
    ///
    /// # Errors
    /// As sqlx's.
    pub async fn plain_put(&self, key: &str, value: &[u8], token: u64) -> BoxResult<()> {
        let token = i64::try_from(token)?;
        on_pool!(&self.pool, p => sqlx::query(&self.plain_put).bind(key).bind(value).bind(token).execute(p).await.map(drop))?;
        Ok(())
    }

    /// `SqlIssuer::try_acquire` then `release`.
    ///
    /// # Errors
    /// As the issuer's, or if the resource was held.
    pub async fn fenced_lock(&self, resource: &str, holder: &HolderId) -> BoxResult<()> {
        let request = LeaseRequest::new(resource, TTL).with_holder(holder.clone());
        let lease = self
            .issuer
            .try_acquire(&request)
            .await?
            .ok_or("the fenced side's resource was held")?;
        Ok(self.issuer.release(&lease).await?)
    }

    /// The issuer's two statements, bare.
    ///
    /// # Errors
    /// As sqlx's, or if the resource was held.
    pub async fn raw_lock(&self, resource: &str, holder: &HolderId) -> BoxResult<()> {
        if self.raw_lock_on(resource, holder).await? {
            Ok(())
        } else {
            Err("the raw side's resource was held".into())
        }
    }

    /// The issuer's two statements, bare: `false` if another holder had
    /// the resource.
    ///
    /// # Errors
    /// As sqlx's, or if the release changed no row.
    pub async fn raw_lock_on(&self, resource: &str, holder: &HolderId) -> BoxResult<bool> {
        let holder = holder.as_str().as_bytes();
        let ttl = raw::ttl_units(self.db.dialect(), TTL);
        // The acquire with its three binds, on any of the pools' query types.
        macro_rules! acquire {
            ($query:path) => {
                $query(&self.acquire).bind(resource).bind(holder).bind(ttl)
            };
        }
        let token: Option<i64> = match &self.pool {
            Pool::Pg(p) => acquire!(sqlx::query_scalar).fetch_optional(p).await?,
            Pool::Lite(p) => acquire!(sqlx::query_scalar).fetch_optional(p).await?,
            Pool::My(p) => {
                let id = acquire!(sqlx::query).execute(p).await?.last_insert_id();
                (id & raw::MYSQL_HELD_BIT == 0)
                    .then(|| i64::try_from(id))
                    .transpose()?
            }
        };
        let Some(token) = token else {
            return Ok(false);
        };
        let released = on_pool!(&self.pool, p => sqlx::query(&self.release).bind(resource).bind(holder).bind(token).execute(p).await?.rows_affected());
        if released != 1 {
            return Err("the raw release changed no row".into());
        }
        Ok(true)
    }

    /// The server's version, as the report lists it.
    ///
    /// # Errors
    /// As sqlx's.
    pub async fn version(&self) -> BoxResult<String> {
        let v: String = match &self.pool {
            Pool::Pg(p) => {
                sqlx::query_scalar("SHOW server_version")
                    .fetch_one(p)
                    .await?
            }
            Pool::My(p) => sqlx::query_scalar("SELECT VERSION()").fetch_one(p).await?,
            Pool::Lite(p) => {
                sqlx::query_scalar("SELECT sqlite_version()")
                    .fetch_one(p)
                    .await?
            }
        };
        Ok((self.plain.version)(&v))
    }

    /// Drops the tables and closes the pool.
    pub async fn clean_up(&self) {
        if let Err(e) = self.db.drop_tables().await {
            eprintln!(
                "bench: could not drop the {:?} tables: {e}",
                self.plain.dialect
            );
        }
        on_pool!(&self.pool, p => p.close().await);
    }
}

/// The pool options of `SqlConfig::connect_db`, pinging or not.
fn pool_options<DB: sqlx::Database>(ping: bool) -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire(ping)
}

fn placeholder(d: Dialect, n: usize) -> String {
    match d {
        Dialect::Postgres => format!("${n}"),
        _ => "?".to_owned(),
    }
}

/// The plain upsert: the fenced one without its `WHERE lock_token <= …`
/// (PostgreSQL, SQLite) or `IF(lock_token <= …)` (MySQL), and without
/// reading the mark back. Binds: key, value, token.
fn plain_upsert(d: Dialect, t: &str) -> String {
    let p = |n| placeholder(d, n);
    match d {
        Dialect::MySql => format!(
            "INSERT INTO {t} (k, v, lock_token) VALUES (?, ?, ?) \
             ON DUPLICATE KEY UPDATE v = VALUES(v), lock_token = VALUES(lock_token)"
        ),
        _ => format!(
            "INSERT INTO {t} (k, v, lock_token) VALUES ({}, {}, {}) \
             ON CONFLICT (k) DO UPDATE SET v = excluded.v, lock_token = excluded.lock_token",
            p(1),
            p(2),
            p(3)
        ),
    }
}
