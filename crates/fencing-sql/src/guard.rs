//! Fencing the caller's own transaction.

use async_trait::async_trait;
use fencing_core::adapter::Call;
use fencing_core::{Error, FencingToken, Result};

use crate::error::{judge_upsert, map_error, upsert_verdict};
use crate::{Dialect, ParamStyle, Tables, sql};

/// Checks and advances a **fence domain** inside the caller's transaction:
/// if `token` is at least the domain's mark, the mark is raised to `token`
/// and the row stays locked until the transaction ends; otherwise
/// [`Error::StaleToken`] is returned and the caller rolls back.
///
/// It takes a [`sqlx::Transaction`], never a bare connection: outside a
/// transaction the fence would commit on its own, and the writes after it
/// would not be fenced at all.
///
/// Call it first in the transaction. Every write the transaction then makes
/// — any rows, any tables — commits only if no higher token has fenced the
/// domain, and a zombie's transaction waits for the current holder's to
/// finish and is then refused. The domain row is a lock shared by everyone
/// writing under that domain; pick domains as wide as the lease (one per
/// leased resource, typically).
///
/// **One name, one mark.** The domain's mark is the row of that name in
/// `tables.records`, the mark [`SqlStore`](crate::SqlStore) keeps for the
/// key of that name (the value is left alone). On the same database and
/// tables, `store.fence("orders", 6)` (an election's takeover fence, `fence
/// lead --fence postgres://…#orders`, the HTTP layer on a `SqlStore`)
/// refuses `fence_transaction(…, "orders", 5)`, and this fence with 6
/// refuses `store.put("orders", …, 5)`; a store write to the name waits for
/// the guarded transaction to end. Still one statement per call.
///
/// Earlier releases kept these marks in `tables.domains`, which the store
/// never read. Opening the tables ([`Db::create_tables`](crate::Db::create_tables),
/// `SqlStore::new`, `SqlIssuer::new`) carries them into the records table,
/// and this fence refuses a token below the name's mark there too, so no
/// mark is lost. A process still running an earlier release writes only
/// the domains table and is not refused by the store's marks: stop those
/// first (see the crate README).
///
/// **Not inside a savepoint that may be rolled back.** `ROLLBACK TO
/// SAVEPOINT` (sqlx's nested `tx.begin()` dropped or rolled back, a
/// `try/except` around a savepoint in an ORM) undoes the fence with
/// everything after the savepoint while the outer transaction goes on:
/// the domain's mark goes back on every database, so the commit no longer
/// raises it (a lower token is not refused later), and on PostgreSQL the
/// row's lock is released too, so a newer holder can fence and commit
/// meanwhile and this transaction's later writes are not checked against
/// it (InnoDB keeps the row lock; SQLite keeps its database lock). Fence in
/// the outermost transaction, before any savepoint; if a rollback to a
/// savepoint took the fence with it, fence again before writing.
///
/// Run it at `READ COMMITTED` (PostgreSQL's default) or MariaDB's default
/// `REPEATABLE READ` (the upsert reads the latest row); on SQLite begin the
/// transaction with `pool.begin_with("BEGIN IMMEDIATE")` so two writers do
/// not deadlock upgrading their locks.
///
/// ```no_run
/// # async fn example(pool: sqlx::PgPool, token: fencing_core::FencingToken) -> Result<(), Box<dyn std::error::Error>> {
/// use fencing_sql::{Tables, fence_transaction};
///
/// let tables = Tables::default();
/// let mut tx = pool.begin().await?;
/// fence_transaction(&mut tx, &tables, "orders", token).await?; // StaleToken → tx is dropped, rolled back
/// sqlx::query("UPDATE orders SET status = 'shipped' WHERE id = $1").bind(7_i64).execute(&mut *tx).await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
///
/// A bare connection is not a transaction, and does not compile:
///
/// ```compile_fail
/// # async fn example(pool: sqlx::PgPool, token: fencing_core::FencingToken) -> Result<(), Box<dyn std::error::Error>> {
/// use fencing_sql::{Tables, fence_transaction};
///
/// let mut conn = pool.acquire().await?;
/// fence_transaction(&mut *conn, &Tables::default(), "orders", token).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::StaleToken`] naming the domain, `token` and the mark;
/// [`Error::TokenOutOfRange`] above `i64::MAX`; [`Error::InvalidInput`] for
/// an empty domain or one over 512 bytes; [`Error::Backend`] (not
/// retryable) if the row holds a negative mark, which fencing never writes
/// (another program's data, left as it is); [`Error::UnsafeConfiguration`]
/// if the upsert wrote nothing and no higher mark explains it (a trigger or
/// rule on the records table drops writes): the domain was not fenced.
pub async fn fence_transaction<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    tables: &Tables,
    domain: &str,
    token: FencingToken,
) -> Result<()>
where
    DB: sqlx::Database,
    DB::Connection: FenceConnection,
{
    let raw = check_domain(domain, token)?;
    let conn: &mut DB::Connection = tx;
    let dialect = conn.dialect();
    let op = format!("fence domain {domain:?}");
    let stmt = sql::guard_upsert(dialect, tables, ParamStyle::of(dialect));
    let written = conn
        .upsert(&stmt, domain, raw)
        .await
        .map_err(|e| map_error(dialect, e, Call::write(&op)))?;
    let read_mark = async {
        let select = sql::select_mark(dialect, &tables.records);
        conn.select(&select, domain)
            .await
            .map_err(|e| map_error(dialect, e, Call::read(&op)))
    };
    upsert_verdict(
        written,
        read_mark,
        (dialect, &tables.records, domain),
        token,
    )
    .await
}

/// A domain and token the guard can fence: the token as the database
/// keeps it.
fn check_domain(domain: &str, token: FencingToken) -> Result<i64> {
    if domain.is_empty() || domain.len() > crate::SqlStore::MAX_KEY_LEN || domain.contains('\0') {
        return Err(Error::invalid_input(format!(
            "fence domain must be 1..={} bytes without NUL, got {} bytes",
            crate::SqlStore::MAX_KEY_LEN,
            domain.len()
        )));
    }
    token.to_i64()
}

/// [`fence_transaction`] for a database driver other than sqlx: the same
/// two statements on the same tables, with the driver's parameter markers,
/// and the same verdict on their answers. The `fencing` Python package runs
/// them on psycopg, PyMySQL, sqlite3 and SQLAlchemy connections; marks it
/// writes and marks [`SqlStore`](crate::SqlStore) and `fence_transaction`
/// write refuse each other's lower tokens.
///
/// In the caller's transaction, first:
/// 1. run [`upsert`](Self::upsert) with the values of
///    [`upsert_params`](Self::upsert_params) (which checks the domain and
///    the token); `written` is the mark it returns: the one column of its
///    row on PostgreSQL and SQLite (`None` if no row), and on MySQL the OK
///    packet's last insert id, through
///    [`mark_from_insert_id`](Self::mark_from_insert_id);
/// 2. if `written` is `None`, run [`select_mark`](Self::select_mark) with
///    the domain: `read` is its one column (`None` if no row);
/// 3. [`verdict`](Self::verdict): `Ok` to go on; an error to roll back.
///
/// ```
/// use fencing_core::FencingToken;
/// use fencing_sql::{Dialect, GuardStatements, ParamStyle, Tables};
///
/// let guard = GuardStatements::new(Dialect::Postgres, &Tables::default(), ParamStyle::Format);
/// assert!(guard.upsert().starts_with("INSERT INTO fencing_records (k, lock_token) VALUES (%s, GREATEST(%s"));
/// assert_eq!(guard.upsert_params("orders", FencingToken::new(7))?, ["orders".into(), 7.into(), "orders".into()]);
/// // The row answered 9: a newer holder fenced the domain.
/// let stale = guard.verdict("orders", FencingToken::new(7), Some(9), None).unwrap_err();
/// assert_eq!(stale.stale_tokens(), Some((FencingToken::new(7), FencingToken::new(9))));
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct GuardStatements {
    dialect: Dialect,
    records: String,
    upsert: String,
    select_mark: String,
}

/// One value bound to a [`GuardStatements`] parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuardParam {
    /// The domain.
    Text(String),
    /// The token, as the database keeps it.
    Integer(i64),
}

impl From<&str> for GuardParam {
    fn from(text: &str) -> Self {
        Self::Text(text.to_owned())
    }
}

impl From<i64> for GuardParam {
    fn from(n: i64) -> Self {
        Self::Integer(n)
    }
}

impl GuardStatements {
    /// The statements for `dialect` on `tables`, their parameters marked in
    /// `style`.
    pub fn new(dialect: Dialect, tables: &Tables, style: ParamStyle) -> Self {
        Self {
            dialect,
            records: tables.records.clone(),
            upsert: sql::guard_upsert(dialect, tables, style),
            select_mark: sql::select_mark_in(style, &tables.records),
        }
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The fencing upsert: raises the domain's mark to the token unless it
    /// is higher, and locks the row until the transaction ends. Three
    /// parameters: [`upsert_params`](Self::upsert_params).
    pub fn upsert(&self) -> &str {
        &self.upsert
    }

    /// The upsert's values, in order (`p1`, `p2`, `p3` in the named style).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty domain, one over 512 bytes or
    /// holding NUL; [`Error::TokenOutOfRange`] above `i64::MAX`.
    pub fn upsert_params(&self, domain: &str, token: FencingToken) -> Result<[GuardParam; 3]> {
        let raw = check_domain(domain, token)?;
        Ok([domain.into(), raw.into(), domain.into()])
    }

    /// Reads the domain's mark; one parameter, the domain.
    pub fn select_mark(&self) -> &str {
        &self.select_mark
    }

    /// The mark a MySQL upsert reports: the OK packet's last insert id,
    /// which the server keeps unsigned (a foreign negative mark comes back
    /// as its two's complement, read here as the negative it was).
    pub fn mark_from_insert_id(id: u64) -> i64 {
        i64::from_ne_bytes(id.to_ne_bytes())
    }

    /// What the upsert's answer means: `written` is the mark it reported,
    /// `read` the mark [`select_mark`](Self::select_mark) read when it
    /// reported none (not looked at otherwise).
    ///
    /// # Errors
    /// [`Error::StaleToken`] naming the domain, `token` and the mark (roll
    /// back); [`Error::Backend`] (not retryable) for a negative mark,
    /// which fencing never writes; [`Error::UnsafeConfiguration`] if the
    /// upsert wrote nothing and no higher mark explains it, or reported a
    /// mark below `token` (which it sets).
    pub fn verdict(
        &self,
        domain: &str,
        token: FencingToken,
        written: Option<i64>,
        read: Option<i64>,
    ) -> Result<()> {
        judge_upsert(written, read, (self.dialect, &self.records, domain), token)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// The connection inside a transaction that [`fence_transaction`] can run
/// on: PostgreSQL, MySQL/MariaDB or SQLite. Sealed.
#[async_trait]
pub trait FenceConnection: sealed::Sealed + Send {
    #[doc(hidden)]
    fn dialect(&self) -> Dialect;
    /// Runs the guard's upsert (binds: domain, token, domain); `Some(mark)`
    /// if it reports one, `None` if refused without saying the mark.
    #[doc(hidden)]
    async fn upsert(
        &mut self,
        sql: &str,
        domain: &str,
        token: i64,
    ) -> Result<Option<i64>, sqlx::Error>;
    #[doc(hidden)]
    async fn select(&mut self, sql: &str, domain: &str) -> Result<Option<i64>, sqlx::Error>;
}

/// `FenceConnection` for one connection type: the dialect, and the upsert
/// given as `|conn, sql, domain, token| body`, by default reading the mark
/// from `RETURNING` (PostgreSQL, SQLite; MySQL reads `LAST_INSERT_ID`).
/// The select is the same for all.
macro_rules! fence_connection {
    ($feature:literal, $conn:ty, $dialect:expr) => {
        fence_connection!($feature, $conn, $dialect, |conn, sql, domain, token| {
            let query = sqlx::query_scalar(sql)
                .bind(domain)
                .bind(token)
                .bind(domain);
            query.fetch_optional(conn).await
        });
    };
    ($feature:literal, $conn:ty, $dialect:expr,
     |$c:ident, $sql:ident, $domain:ident, $token:ident| $upsert:expr) => {
        #[cfg(feature = $feature)]
        impl sealed::Sealed for $conn {}
        #[cfg(feature = $feature)]
        #[async_trait]
        impl FenceConnection for $conn {
            fn dialect(&self) -> Dialect {
                $dialect
            }
            async fn upsert(
                &mut self,
                $sql: &str,
                $domain: &str,
                $token: i64,
            ) -> Result<Option<i64>, sqlx::Error> {
                let $c = &mut *self;
                $upsert
            }
            async fn select(
                &mut self,
                sql: &str,
                domain: &str,
            ) -> Result<Option<i64>, sqlx::Error> {
                sqlx::query_scalar(sql)
                    .bind(domain)
                    .fetch_optional(&mut *self)
                    .await
            }
        }
    };
}
fence_connection!("postgres", sqlx::PgConnection, Dialect::Postgres);
fence_connection!("sqlite", sqlx::SqliteConnection, Dialect::Sqlite);
fence_connection!(
    "mysql",
    sqlx::MySqlConnection,
    Dialect::MySql,
    |conn, sql, domain, token| {
        let result = sqlx::query(sql)
            .bind(domain)
            .bind(token)
            .bind(domain)
            .execute(conn)
            .await?;
        Ok(Some(crate::store::mysql_mark(&result)))
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(written: Option<i64>, read: Option<i64>) -> Result<()> {
        GuardStatements::new(Dialect::MySql, &Tables::default(), ParamStyle::Format).verdict(
            "orders",
            FencingToken::new(7),
            written,
            read,
        )
    }

    /// Each answer's meaning; a reported mark below the token (a driver
    /// that does not report `LAST_INSERT_ID` answers 0) is not "fenced".
    #[test]
    fn the_verdict_on_each_answer() {
        assert!(verdict(Some(7), None).is_ok());
        assert_eq!(
            verdict(Some(9), None).unwrap_err().stale_tokens(),
            Some((FencingToken::new(7), FencingToken::new(9)))
        );
        assert!(matches!(
            verdict(Some(0), None),
            Err(Error::UnsafeConfiguration { .. })
        ));
        assert!(matches!(
            verdict(Some(6), None),
            Err(Error::UnsafeConfiguration { .. })
        ));
        assert!(matches!(
            verdict(Some(-1), None),
            Err(Error::Backend { .. })
        ));
        assert!(verdict(None, Some(9)).unwrap_err().is_stale());
        assert!(matches!(
            verdict(None, Some(-5)),
            Err(Error::Backend { .. })
        ));
        assert!(matches!(
            verdict(None, Some(7)),
            Err(Error::UnsafeConfiguration { .. })
        ));
        assert!(matches!(
            verdict(None, None),
            Err(Error::UnsafeConfiguration { .. })
        ));
        assert_eq!(
            GuardStatements::mark_from_insert_id(u64::MAX),
            -1,
            "MySQL's ~0 for a foreign negative mark"
        );
    }
}
