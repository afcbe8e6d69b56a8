//! The fenced key-value store.

use async_trait::async_trait;
use bytes::Bytes;
use fencing_core::adapter::Call;
use fencing_core::safety::SafetyCheck;
use fencing_core::{Error, FencedStore, FencingToken, Limits, Result, Versioned};
use sqlx::Row;

use crate::Dialect;
use crate::db::{Db, on_pool, on_returning_pool};
use crate::error::{foreign_mark, judge_upsert, map_error};
use crate::sql::{self, ValueChange};

/// A [`FencedStore`] on a SQL table (`key`, `value`, `lock_token BIGINT`).
///
/// Every write is **one statement**: an upsert that applies only where the
/// stored token is `<=` the presented one, so the check and the write are
/// atomic and an accepted write costs one round trip. A refused write costs
/// a second, read-only statement to name the mark in the error.
///
/// A key's mark is also the mark of the fence domain of that name: on the
/// same database and tables, [`fence_transaction`](crate::fence_transaction)
/// checks and raises the same row, so `fence("orders", 6)` here (an
/// election's takeover fence, the HTTP layer's admission) refuses a
/// transaction guarded with 5 for `orders`, and a guarded transaction with
/// 6 refuses a `put` with 5. A row only the guard wrote holds a mark and no
/// value: `get` reads it as absent.
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
    mark_and_floor: String,
    floor: String,
    raise_floor: String,
    remove_floored: String,
}

impl SqlStore {
    /// The longest key.
    pub const MAX_KEY_LEN: usize = 512;
    /// The largest value.
    pub const MAX_VALUE_LEN: usize = 16 * 1024 * 1024;

    /// A store on `db`, creating its table if needed.
    ///
    /// # Errors
    /// [`Error::Backend`](fencing_core::Error::Backend) if the table cannot
    /// be created or the server cannot be reached;
    /// [`Error::UnsafeConfiguration`](fencing_core::Error::UnsafeConfiguration) for a MySQL pool
    /// whose sessions run with `autocommit` off (its writes would be rolled
    /// back when the connection closes).
    pub async fn new(db: Db) -> Result<Self> {
        db.check_session().await?;
        db.create_tables().await?;
        let d = db.dialect();
        let tables = &db.tables;
        let t = &tables.records;
        let mut max_value_len = Self::MAX_VALUE_LEN;
        if d == Dialect::MySql {
            // A value near max_allowed_packet would be cut off by the server.
            let packet: i64 = on_pool!(&db.pool, p => sqlx::query_scalar("SELECT CAST(@@max_allowed_packet AS SIGNED)").fetch_one(p).await)
                .map_err(|e| map_error(d, e, Call::read("read max_allowed_packet")))?;
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
                put: sql::fenced_upsert(d, tables, ValueChange::Set),
                fence: sql::fenced_upsert(d, tables, ValueChange::Keep),
                delete: sql::fenced_upsert(d, tables, ValueChange::Clear),
                get: sql::select_record(d, t),
                mark: sql::select_mark(d, t),
                mark_and_floor: sql::select_mark_and_floor(d, tables),
                floor: sql::select_floor(tables),
                raise_floor: sql::raise_store_floor(d, tables),
                remove_floored: sql::remove_floored(d, tables),
            },
            db,
        })
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
                .bind(raw)
                .fetch_optional(p)
                .await
                .map(|row| row.map(|_| raw)),
            // No row affected (sqlx counts a matched row as affected):
            // the floor's `WHERE` left nothing to insert.
            mysql: sqlx::query(sql)
                .bind(key)
                .bind(value)
                .bind(raw)
                .bind(raw)
                .execute(p)
                .await
                .map(|r| (r.rows_affected() > 0).then(|| mysql_mark(&r))),
        )
        .map_err(|e| map_error(d, e, Call::write(&format!("{op} {key:?}"))))?;
        let at = (d, self.db.tables.records.as_str(), key);
        if mark.is_some() {
            return judge_upsert(mark, None, at, token);
        }
        // The key's mark names the refusal where it explains it (or is
        // foreign data); else the floor. Both are read after the statement,
        // so a floor raised since may cover the token too: the mark is the
        // answer that held when the statement ran.
        let (read, floor) = self.mark_and_floor(key).await?;
        let mark_explains = read.is_some_and(|m| m > raw || m < 0);
        match floor.filter(|floor| *floor >= raw) {
            Some(floor) if !mark_explains => {
                Err(Error::below_floor(key, token, self.token_of(key, floor)?))
            }
            _ => judge_upsert(None, read, at, token),
        }
    }

    /// A key's mark as stored and the floor (`None`: none raised).
    async fn mark_and_floor(&self, key: &str) -> Result<(Option<i64>, Option<i64>)> {
        let d = self.db.dialect();
        let (mark, floor): (Option<i64>, Option<i64>) = on_pool!(&self.db.pool, p => {
            sqlx::query_as(&self.statements.mark_and_floor).bind(key).fetch_one(p).await
        })
        .map_err(|e| map_error(d, e, Call::read(&format!("read mark {key:?}"))))?;
        Ok((mark, floor.filter(|f| *f >= 0)))
    }

    /// The floor as stored (`None`: none raised).
    async fn raw_floor(&self) -> Result<Option<i64>> {
        let d = self.db.dialect();
        let floor: Option<i64> = on_pool!(&self.db.pool, p => sqlx::query_scalar(&self.statements.floor).fetch_optional(p).await)
            .map_err(|e| map_error(d, e, Call::read("read the store's floor")))?;
        Ok(floor.filter(|f| *f >= 0))
    }

    /// The row's mark as stored (negative: foreign data).
    async fn raw_mark(&self, key: &str) -> Result<Option<i64>> {
        let d = self.db.dialect();
        on_pool!(&self.db.pool, p => sqlx::query_scalar(&self.statements.mark).bind(key).fetch_optional(p).await)
            .map_err(|e| map_error(d, e, Call::read(&format!("read mark {key:?}"))))
    }

    /// A stored mark as a token, refusing a negative one as foreign data.
    fn token_of(&self, key: &str, mark: i64) -> Result<FencingToken> {
        FencingToken::from_i64(mark)
            .map_err(|_| foreign_mark(self.db.dialect(), &self.db.tables.records, key, mark))
    }
}

/// The mark MySQL's upsert reported through `LAST_INSERT_ID` (see
/// [`GuardStatements::mark_from_insert_id`](crate::GuardStatements::mark_from_insert_id)).
#[cfg(feature = "mysql")]
pub(crate) fn mysql_mark(result: &sqlx::mysql::MySqlQueryResult) -> i64 {
    crate::GuardStatements::mark_from_insert_id(result.last_insert_id())
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
        .map_err(|e| map_error(d, e, Call::read(&format!("get {key:?}"))))?;
        match row {
            Some((Some(value), mark)) => Ok(Some(Versioned {
                value: Bytes::from(value),
                token: self.token_of(key, mark)?,
            })),
            Some((None, mark)) => self.token_of(key, mark).map(|_| None),
            None => Ok(None),
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
        self.raw_mark(key)
            .await?
            .map(|mark| self.token_of(key, mark))
            .transpose()
    }

    async fn delete(&self, key: &str, token: FencingToken) -> Result<()> {
        self.limits.check_write(key, token, 0)?;
        self.upsert(&self.statements.delete, "delete", key, None, token)
            .await
    }

    async fn floor(&self) -> Result<Option<FencingToken>> {
        self.raw_floor()
            .await?
            .map(|f| self.token_of("", f))
            .transpose()
    }

    async fn raise_floor(&self, floor: FencingToken) -> Result<FencingToken> {
        self.limits.check_floor(floor)?;
        let d = self.db.dialect();
        let raw = floor.to_i64()?;
        // Raising to the same floor again is answered with it: a lost
        // answer is merely sent again.
        on_pool!(&self.db.pool, p => sqlx::query(&self.statements.raise_floor).bind(raw).execute(p).await.map(|_| ()))
            .map_err(|e| map_error(d, e, Call::idempotent("raise the store's floor")))?;
        let now = self.raw_floor().await?.unwrap_or(-1);
        if now > raw {
            return Err(Error::floor_lowered(self.token_of("", now)?, floor));
        }
        Ok(floor)
    }

    async fn remove_floored_marks(&self, most: u32) -> Result<u64> {
        let d = self.db.dialect();
        on_pool!(&self.db.pool, p => sqlx::query(&self.statements.remove_floored).bind(i64::from(most)).execute(p).await.map(|r| r.rows_affected()))
            .map_err(|e| map_error(d, e, Call::idempotent("remove the marks under the floor")))
    }

    async fn verify(&self) -> Result<Vec<SafetyCheck>> {
        let mut checks = vec![self.db.transport_check().await?];
        checks.extend(fencing_core::safety::probe_store(self).await?);
        Ok(checks)
    }
}
