//! sqlx errors → [`fencing_core::Error`], in one place.

use fencing_core::adapter::Call;
use fencing_core::{Error, FencingToken, Result};

use crate::Dialect;

/// SQLSTATEs (and SQLite result codes) after which retrying is safe:
/// serialization failures, deadlocks, lock timeouts, a server shutting down,
/// a busy or locked SQLite database.
const RETRYABLE_CODES: &[&str] = &[
    "40001", "40P01", "55P03", "57P01", "57P02", "57P03", "5", "6", "261", "262", "517",
];

/// Maps an sqlx error of `call`: a connection lost while a write
/// ([`Call::write`]) was in flight is [`Error::OutcomeUnknown`], since the
/// database may have committed it.
pub(crate) fn map_error(dialect: Dialect, e: sqlx::Error, call: Call<'_>) -> Error {
    let backend = dialect.name();
    match e {
        // Never sent: no connection could be had.
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => {
            Error::backend(backend, true, e)
        }
        // A write's connection may fail its TLS after the statement went
        // out (an alert from a proxy restarting): it may have been applied.
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::Tls(_) if call.write => {
            Error::outcome_unknown(backend, call.name, e)
        }
        // Otherwise a handshake (sqlx reports an untrusted certificate as an
        // io::Error around the rustls one): nothing was sent.
        sqlx::Error::Tls(_) => Error::tls(backend, e),
        sqlx::Error::Io(ref io) if fencing_core::adapter::tls_failure(io) => Error::tls(backend, e),
        sqlx::Error::Io(_) => Error::backend(backend, true, e),
        // A wrong password, an unknown user, no pg_hba.conf entry for this
        // transport (a plaintext login where only TLS is allowed).
        sqlx::Error::Database(ref db)
            if matches!(db.code().as_deref(), Some("28P01" | "28000")) =>
        {
            Error::unauthenticated(backend, e)
        }
        // Only a lease grant does arithmetic on a token: `token + 1` at
        // i64::MAX (see `sql::next_token`). Nothing was granted.
        sqlx::Error::Database(ref db) if token_overflow(dialect, db.as_ref()) => {
            Error::TokenOutOfRange {
                token: FencingToken::MAX_I64
                    .checked_next()
                    .unwrap_or(FencingToken::MAX_I64),
                max: FencingToken::MAX_I64,
            }
        }
        sqlx::Error::Database(ref db) => {
            let retryable = db
                .code()
                .is_some_and(|c| RETRYABLE_CODES.contains(&c.as_ref()));
            Error::backend(backend, retryable, e)
        }
        sqlx::Error::Configuration(_) => {
            Error::invalid_input(format!("{backend} configuration: {e}"))
        }
        other => Error::backend(backend, false, other),
    }
}

/// Whether the database refused a token above `i64::MAX`: SQLSTATE 22003
/// (numeric value out of range) on PostgreSQL and MySQL, and on SQLite the
/// `NOT NULL` refusal of the token column that `sql::next_token` provokes.
fn token_overflow(dialect: Dialect, db: &dyn sqlx::error::DatabaseError) -> bool {
    match dialect {
        Dialect::Postgres | Dialect::MySql => db.code().as_deref() == Some("22003"),
        // SQLITE_CONSTRAINT_NOTNULL
        Dialect::Sqlite => db.code().as_deref() == Some("1299") && db.message().ends_with(".token"),
    }
}

/// A fenced upsert that reported no write, on a key the database then shows
/// no higher mark for: something on the table (a trigger, a rule, a
/// row-level policy) drops writes. Reading that as "mark 0, accepted" would
/// let the caller believe it fenced, and a zombie write through.
pub(crate) fn wrote_nothing(dialect: Dialect, table: &str, key: &str) -> Error {
    Error::UnsafeConfiguration {
        backend: dialect.name(),
        reason: format!(
            "the fenced upsert of {key:?} in {table} wrote nothing, yet no higher mark refused it: \
             something on the table (a trigger, a rule, a row-level policy) drops writes, \
             so it cannot be fenced"
        ),
    }
}

/// A row whose mark is negative: fencing never writes one, so another
/// program did. Refused, never taken over as "mark 0".
pub(crate) fn foreign_mark(dialect: Dialect, table: &str, key: &str, mark: i64) -> Error {
    Error::backend(
        dialect.name(),
        false,
        format!(
            "{key:?} in {table} holds lock_token {mark}, which was not written by fencing (marks are never \
             negative); nothing was written: fix or delete the row"
        ),
    )
}

/// What a fenced upsert's answer means. `written` is the mark it reported
/// (`None`: refused or dropped without saying); `read_mark` reads the row's
/// mark then. Accepted at `token`; stale above it; foreign data below
/// zero; a reported mark below `token` (the statement sets it) or a
/// refusal no higher mark explains means something rewrites or drops the
/// write ([`wrote_nothing`]).
pub(crate) async fn upsert_verdict(
    written: Option<i64>,
    read_mark: impl std::future::Future<Output = Result<Option<i64>>>,
    at: (Dialect, &str, &str),
    token: FencingToken,
) -> Result<()> {
    let read = match written {
        Some(_) => None,
        None => read_mark.await?,
    };
    judge_upsert(written, read, at, token)
}

/// [`upsert_verdict`] once the mark is read: `read` is the row's mark read
/// after an upsert that reported none (`written` is `None`), and is not
/// looked at otherwise.
pub(crate) fn judge_upsert(
    written: Option<i64>,
    read: Option<i64>,
    (dialect, table, key): (Dialect, &str, &str),
    token: FencingToken,
) -> Result<()> {
    let raw = token.to_i64()?;
    let mark = match (written, read) {
        (Some(mark), _) => mark,
        (None, Some(mark)) if mark > raw || mark < 0 => mark,
        (None, _) => return Err(wrote_nothing(dialect, table, key)),
    };
    if mark < 0 {
        return Err(foreign_mark(dialect, table, key, mark));
    }
    match mark.cmp(&raw) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(Error::StaleToken {
            key: key.to_owned(),
            presented: token,
            current: FencingToken::from_i64(mark)?,
        }),
        // The statement sets the token or reports the higher mark: a lower
        // one means something else answered (a trigger rewriting the row,
        // a driver that does not report MySQL's LAST_INSERT_ID).
        std::cmp::Ordering::Less => Err(Error::UnsafeConfiguration {
            backend: dialect.name(),
            reason: format!(
                "the fenced upsert of {key:?} in {table} reported mark {mark}, below the token {raw} \
                 it sets: something rewrites the row or its answer, so whether it was fenced is unknown"
            ),
        }),
    }
}
