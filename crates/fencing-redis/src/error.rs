//! The one place Redis failures become [`fencing_core::Error`]s.

use fencing_core::{Error, FencingToken, Result};

use crate::BACKEND;

/// Maps a Redis error: an I/O failure once a write was sent is an unknown
/// outcome; refusals and timeouts before sending are retryable.
pub(crate) fn map_error(operation: &str, write: bool, e: redis::RedisError) -> Error {
    if e.is_connection_refusal() {
        Error::backend(BACKEND, true, e)
    } else if write && (e.is_io_error() || e.is_timeout() || e.is_connection_dropped()) {
        Error::outcome_unknown(BACKEND, operation, e)
    } else {
        let retryable = e.is_io_error() || e.is_timeout() || e.is_connection_dropped();
        Error::backend(BACKEND, retryable, e)
    }
}

pub(crate) fn parse_token(raw: &str) -> Result<FencingToken> {
    raw.parse().map_err(|_| {
        Error::invalid_input(format!("Redis fence counter holds {raw:?}, not a token"))
    })
}
