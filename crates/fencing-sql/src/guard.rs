//! Fencing the caller's own transaction.

use async_trait::async_trait;
use fencing_core::adapter::Call;
use fencing_core::{Error, FencingToken, Result};

use crate::error::{map_error, upsert_verdict};
use crate::{Dialect, Tables, sql};

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
    if domain.is_empty() || domain.len() > crate::SqlStore::MAX_KEY_LEN || domain.contains('\0') {
        return Err(Error::invalid_input(format!(
            "fence domain must be 1..={} bytes without NUL, got {} bytes",
            crate::SqlStore::MAX_KEY_LEN,
            domain.len()
        )));
    }
    let raw = token.to_i64()?;
    let conn: &mut DB::Connection = tx;
    let dialect = conn.dialect();
    let op = format!("fence domain {domain:?}");
    let stmt = sql::guard_upsert(dialect, tables);
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
