//! The fenced key-value store.

use async_trait::async_trait;
use bytes::Bytes;
use fencing_core::{Error, FencedStore, FencingToken, Limits, Result, Versioned};
use sqlx::Row;

use crate::Dialect;
use crate::db::{Db, on_pool, on_returning_pool};
use crate::error::{map_error, wrote_nothing};
use crate::sql::{self, ValueChange};

/// A [`FencedStore`] on a SQL table (`key`, `value`, `lock_token BIGINT`).
///
/// Every write is **one statement**: an upsert that applies only where the
/// stored token is `<=` the presented one, so the check and the write are
/// atomic and an accepted write costs one round trip. A refused write costs
/// a second, read-only statement to name the mark in the error.
///
/// Limits: keys up to 512 bytes; values up to 16 MiB (on MySQL, also below
/// the server's `max_allowed_packet`); tokens up to `i64::MAX`.
#[derive(Debug, Clone)]
pub struct SqlStore {
    db: Db,
    limits: Limits,
    statements: Statements,
}

#[derive(Debug, Clone)]
struct Statements {
    put: String,
    fence: String,
    delete: String,
    get: String,
    mark: String,
}

impl SqlStore {
    /// The longest key.
    pub const MAX_KEY_LEN: usize = 512;
    /// The largest value.
    pub const MAX_VALUE_LEN: usize = 16 * 1024 * 1024;

    /// A store on `db`, creating its table if needed.
    ///
    /// # Errors
    /// [`Error::Backend`] if the table cannot be created or the server
    /// cannot be reached; [`Error::UnsafeConfiguration`] for a MySQL pool
    /// whose sessions run with `autocommit` off (its writes would be rolled
    /// back when the connection closes).
    pub async fn new(db: Db) -> Result<Self> {
        db.check_session().await?;
        db.create_tables().await?;
        let d = db.dialect();
        let t = &db.tables.records;
        let mut max_value_len = Self::MAX_VALUE_LEN;
        if d == Dialect::MySql {
            // A value near max_allowed_packet would be cut off by the server.
            let packet: i64 = on_pool!(&db.pool, p => sqlx::query_scalar("SELECT CAST(@@max_allowed_packet AS SIGNED)").fetch_one(p).await)
                .map_err(|e| map_error(d, "read max_allowed_packet", false, e))?;
            let room = usize::try_from(packet)
                .unwrap_or(0)
                .saturating_sub(64 * 1024);
            max_value_len = max_value_len.min(room);
        }
        Ok(Self {
            limits: Limits {
                max_key_len: Self::MAX_KEY_LEN,
                max_value_len,
                max_token: FencingToken::MAX_I64,
            },
            statements: Statements {
                put: sql::fenced_upsert(d, t, "k", Some(ValueChange::Set)),
                fence: sql::fenced_upsert(d, t, "k", Some(ValueChange::Keep)),
                delete: sql::fenced_upsert(d, t, "k", Some(ValueChange::Clear)),
                get: sql::select_record(d, t),
                mark: sql::select_mark(d, t, "k"),
            },
            db,
        })
    }

    /// Connects by URL and creates the table: see [`Db::connect`].
    ///
    /// # Errors
    /// As [`Db::connect`] and [`SqlStore::new`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::new(Db::connect(url).await?).await
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Runs one fenced upsert and decides accepted or stale.
    async fn upsert(
        &self,
        sql: &str,
        op: &str,
        key: &str,
        value: Option<&[u8]>,
        token: FencingToken,
    ) -> Result<()> {
        let d = self.db.dialect();
        let raw = token.to_i64()?;
        let mark = on_returning_pool!(&self.db.pool, p =>
            returning: sqlx::query(sql)
                .bind(key)
                .bind(value)
                .bind(raw)
                .fetch_optional(p)
                .await
                .map(|row| row.map(|_| raw)),
            mysql: sqlx::query(sql)
                .bind(key)
                .bind(value)
                .bind(raw)
                .execute(p)
                .await
                .map(|r| Some(mysql_mark(&r))),
        )
        .map_err(|e| map_error(d, &format!("{op} {key:?}"), true, e))?;
        match mark {
            Some(mark) if mark <= raw => Ok(()),
            Some(mark) => Err(stale(key, token, mark)),
            // Refused, or dropped: only a higher mark says which. Marks only
            // rise, so a refusal leaves one above our token; anything else
            // (no row, a mark at or below ours) means nothing was written.
            None => match self.read_mark(key).await? {
                Some(current) if current > token => Err(Error::StaleToken {
                    key: key.to_owned(),
                    presented: token,
                    current,
                }),
                _ => Err(wrote_nothing(d, &self.db.tables.records, key)),
            },
        }
    }

    async fn read_mark(&self, key: &str) -> Result<Option<FencingToken>> {
        let d = self.db.dialect();
        let raw: Option<i64> = on_pool!(&self.db.pool, p => sqlx::query_scalar(&self.statements.mark).bind(key).fetch_optional(p).await)
            .map_err(|e| map_error(d, &format!("read mark {key:?}"), false, e))?;
        raw.map(FencingToken::from_i64).transpose()
    }
}

/// MySQL's upsert reports the resulting mark through `LAST_INSERT_ID`
/// (0 for a fresh insert, which is always accepted).
#[cfg(feature = "mysql")]
pub(crate) fn mysql_mark(result: &sqlx::mysql::MySqlQueryResult) -> i64 {
    i64::try_from(result.last_insert_id()).unwrap_or(i64::MAX)
}

fn stale(key: &str, presented: FencingToken, mark: i64) -> Error {
    // A negative mark is foreign data, not "mark 0".
    match FencingToken::from_i64(mark) {
        Ok(current) => Error::StaleToken {
            key: key.to_owned(),
            presented,
            current,
        },
        Err(e) => e,
    }
}

#[async_trait]
impl FencedStore for SqlStore {
    fn name(&self) -> &'static str {
        self.db.dialect().name()
    }

    fn limits(&self) -> Limits {
        self.limits
    }

    async fn put(&self, key: &str, value: Bytes, token: FencingToken) -> Result<()> {
        self.limits.check_write(key, token, value.len())?;
        self.upsert(&self.statements.put, "put", key, Some(&value), token)
            .await
    }

    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        self.limits.check_key(key)?;
        let d = self.db.dialect();
        let row: Option<(Option<Vec<u8>>, i64)> = on_pool!(&self.db.pool, p => {
            sqlx::query(&self.statements.get)
                .bind(key)
                .fetch_optional(p)
                .await
                .and_then(|row| row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose())
        })
        .map_err(|e| map_error(d, &format!("get {key:?}"), false, e))?;
        match row {
            Some((Some(value), token)) => Ok(Some(Versioned {
                value: Bytes::from(value),
                token: FencingToken::from_i64(token)?,
            })),
            _ => Ok(None),
        }
    }

    async fn fence(&self, key: &str, token: FencingToken) -> Result<FencingToken> {
        self.limits.check_write(key, token, 0)?;
        self.upsert(&self.statements.fence, "fence", key, None, token)
            .await?;
        Ok(token)
    }

    async fn mark(&self, key: &str) -> Result<Option<FencingToken>> {
        self.limits.check_key(key)?;
        self.read_mark(key).await
    }

    async fn delete(&self, key: &str, token: FencingToken) -> Result<()> {
        self.limits.check_write(key, token, 0)?;
        self.upsert(&self.statements.delete, "delete", key, None, token)
            .await
    }
}
