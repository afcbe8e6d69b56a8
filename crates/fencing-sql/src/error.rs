//! sqlx errors → [`fencing::Error`], in one place.

use fencing::Error;

use crate::Dialect;

/// SQLSTATEs (and SQLite result codes) after which retrying is safe:
/// serialization failures, deadlocks, lock timeouts, a server shutting down,
/// a busy or locked SQLite database.
const RETRYABLE_CODES: &[&str] = &[
    "40001", "40P01", "55P03", "57P01", "57P02", "57P03", "5", "6", "261", "262", "517",
];

/// Maps an sqlx error. `write` says whether the statement changes data: a
/// connection lost while a write was in flight is [`Error::OutcomeUnknown`],
/// since the database may have committed it.
pub(crate) fn map_error(dialect: Dialect, operation: &str, write: bool, e: sqlx::Error) -> Error {
    let backend = dialect.name();
    match e {
        // Never sent: no connection could be had.
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => {
            Error::backend(backend, true, e)
        }
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::Tls(_) if write => {
            Error::outcome_unknown(backend, operation, e)
        }
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) => Error::backend(backend, true, e),
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
