//! The one error type every issuer and store returns.

use std::time::Duration;

use crate::FencingToken;

/// A boxed error from a backend's client library, kept as the `source()`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A specialised `Result` for fencing operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when issuing tokens or writing with them.
///
/// Variants name what happened, not which backend said it: each adapter maps
/// its backend's codes into these in one place. [`Error::is_retryable`] says
/// whether repeating the same call is safe.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store refused a write because it has accepted a higher token.
    /// Nothing was applied.
    #[error(
        "stale fencing token for key {key:?}: presented {presented}, but the store has already accepted {current}; nothing was written"
    )]
    StaleToken {
        /// The key (or fence domain) written to.
        key: String,
        /// The token the caller presented.
        presented: FencingToken,
        /// The highest token the store holds for the key. Refused by the
        /// store's floor ([`FencedStore::raise_floor`](crate::FencedStore::raise_floor)):
        /// the floor + 1, as if that token had been accepted on every key.
        current: FencingToken,
    },

    /// The object holds data that was not written through fencing (it has no
    /// fencing frame: a program that knows nothing of fencing wrote it), so
    /// its mark is unknown and treating it as zero would let any stale token
    /// in. Nothing was written. Adopting such objects at mark 0 is an
    /// explicit option of the store (`BlobStore::adopt_unfenced`).
    #[error(
        "{key:?} holds data that was not written through fencing (no fencing frame), so its mark is unknown; nothing was written. To take such objects over at mark 0, open the store with `adopt_unfenced` (URL option `?adopt_unfenced=true`), or delete the object"
    )]
    Unfenced {
        /// The key.
        key: String,
    },

    /// The lease is no longer held by this holder: it expired, was released,
    /// or was taken by another holder. Stop the work it guarded.
    #[error("lease on {resource:?} with token {token} is no longer held")]
    LeaseLost {
        /// The leased resource.
        resource: String,
        /// The token of the lost lease.
        token: FencingToken,
    },

    /// The resource is held (or waited for) by another holder, and the
    /// operation needs it free (e.g. raising an issuer's token floor).
    /// Nothing was changed; try again when it is free.
    #[error(
        "{resource:?} is held or waited for by another holder: {operation} needs it free; try again when it is"
    )]
    Busy {
        /// The resource.
        resource: String,
        /// What needs it free, e.g. `"raise_floor"`.
        operation: &'static str,
    },

    /// The operation did not finish within its time limit, and nothing was
    /// granted or applied (an outcome that may have been applied is
    /// [`Error::OutcomeUnknown`]).
    #[error("timed out after {after:?} waiting to {operation}")]
    Timeout {
        /// What was being waited for, e.g. `acquire "jobs/nightly"`.
        operation: String,
        /// How long the caller waited.
        after: Duration,
    },

    /// A token above what the backend can store (e.g. `i64::MAX` for SQL),
    /// or a floor or grant that would leave no room for the next token.
    /// Nothing was written.
    #[error("fencing token {token} is out of range for this backend (max {max})")]
    TokenOutOfRange {
        /// The token presented; for a refused grant, the token that would
        /// have been granted; for a refused floor, the floor.
        token: FencingToken,
        /// The largest token the backend can store; for a refused floor,
        /// the highest floor it accepts now.
        max: FencingToken,
    },

    /// Bad input (an empty or oversize key, a value over the backend's limit,
    /// a malformed URL or option). Refused before any request was sent.
    #[error("invalid input: {message}")]
    InvalidInput {
        /// What is wrong and what the limit is.
        message: String,
    },

    /// The backend is configured in a way that could let a token go
    /// backwards (e.g. a Redis counter without persistence), and the caller
    /// did not opt in.
    #[error("unsafe {backend} configuration: {reason}")]
    UnsafeConfiguration {
        /// The backend, e.g. `"redis"`.
        backend: &'static str,
        /// Why it is unsafe and how to opt in or fix it.
        reason: String,
    },

    /// The TLS handshake failed: the server's certificate is not trusted
    /// (another CA, another host name, expired), or the server refused our
    /// client certificate or asked for one we did not present. Nothing was
    /// sent; not retryable: fix `sslrootcert`, `sslcert`/`sslkey` or the
    /// host name.
    #[error(
        "TLS handshake with {backend} failed: check the CA (sslrootcert), the client certificate (sslcert, sslkey) and the host name"
    )]
    Tls {
        /// The backend, e.g. `"postgres"`.
        backend: &'static str,
        /// The TLS library's reason.
        #[source]
        source: BoxError,
    },

    /// The server refused our credentials: an unknown user, a wrong
    /// password, a disabled account. Nothing was applied; not retryable.
    #[error("{backend} refused the credentials (user name or password)")]
    Unauthenticated {
        /// The backend.
        backend: &'static str,
        /// The server's answer (never the password itself).
        #[source]
        source: BoxError,
    },

    /// The backend cannot do this operation (e.g. an issuer that cannot take
    /// a token floor).
    #[error("{backend} does not support {operation}")]
    Unsupported {
        /// The backend.
        backend: &'static str,
        /// The operation asked for.
        operation: &'static str,
    },

    /// Other writers kept changing the object between our read and our
    /// conditional write, more often than the retry bound allows. Nothing of
    /// ours was applied; retrying is safe.
    #[error("gave up writing {key:?} after {attempts} attempts lost to concurrent writers")]
    Contention {
        /// The contended key.
        key: String,
        /// How many conditional writes were tried.
        attempts: u32,
    },

    /// The request may or may not have been applied (e.g. a timeout or a
    /// dropped connection after it was sent). Read back before deciding.
    #[error("outcome unknown: {operation} on {backend} may have been applied")]
    OutcomeUnknown {
        /// The backend, e.g. `"postgres"`.
        backend: &'static str,
        /// What was sent.
        operation: String,
        /// The underlying failure.
        #[source]
        source: BoxError,
    },

    /// Any other backend failure: connection refused, permission denied, a
    /// missing bucket or table. Nothing was applied.
    #[error("{backend} error{}", if *.retryable { " (retryable)" } else { "" })]
    Backend {
        /// The backend, e.g. `"etcd"`.
        backend: &'static str,
        /// Whether repeating the call may succeed.
        retryable: bool,
        /// The underlying failure.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// An [`Error::InvalidInput`].
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::InvalidInput {
            message: message.into(),
        }
    }

    /// The [`Error::StaleToken`] of a token at or below a store's floor
    /// ([`FencedStore::raise_floor`](crate::FencedStore::raise_floor)):
    /// the key's lowest acceptable token is `floor + 1`.
    pub fn below_floor(key: &str, presented: FencingToken, floor: FencingToken) -> Self {
        Self::StaleToken {
            key: key.to_owned(),
            presented,
            current: FencingToken::new(floor.get().saturating_add(1)),
        }
    }

    /// The [`Error::InvalidInput`] of a floor asked below the current one:
    /// a floor never goes down.
    pub fn floor_lowered(current: FencingToken, asked: FencingToken) -> Self {
        Self::invalid_input(format!(
            "the store's floor is {current}; a floor is never lowered (asked for {asked})"
        ))
    }

    /// An [`Error::LeaseLost`] for `lease` (its resource and token).
    pub fn lease_lost(lease: &crate::Lease) -> Self {
        Self::LeaseLost {
            resource: lease.resource().to_owned(),
            token: lease.token(),
        }
    }

    /// An [`Error::Busy`]: `resource` is held, and `operation` needs it free.
    pub fn busy(resource: impl Into<String>, operation: &'static str) -> Self {
        Self::Busy {
            resource: resource.into(),
            operation,
        }
    }

    /// An [`Error::Backend`] wrapping a client-library error.
    pub fn backend(backend: &'static str, retryable: bool, source: impl Into<BoxError>) -> Self {
        Self::Backend {
            backend,
            retryable,
            source: source.into(),
        }
    }

    /// An [`Error::OutcomeUnknown`].
    pub fn outcome_unknown(
        backend: &'static str,
        operation: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Self::OutcomeUnknown {
            backend,
            operation: operation.into(),
            source: source.into(),
        }
    }

    /// An [`Error::Tls`].
    pub fn tls(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Self::Tls {
            backend,
            source: source.into(),
        }
    }

    /// An [`Error::Unauthenticated`].
    pub fn unauthenticated(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Self::Unauthenticated {
            backend,
            source: source.into(),
        }
    }

    /// The message and every cause below it, `: `-separated and redacted
    /// ([`crate::redact::redact_text`]): what a log line or the CLI prints, so
    /// nobody writes the chain printer again and no SDK's request URL
    /// shows its signature.
    pub fn chain(&self) -> String {
        error_chain(self)
    }

    /// Whether repeating the same call is safe and may succeed.
    ///
    /// A stale token never becomes fresh; an unknown outcome must be read
    /// back first, so neither is retryable. A busy resource becomes free
    /// when its holder releases it or its lease expires.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Timeout { .. } | Self::Contention { .. } | Self::Busy { .. } => true,
            Self::Backend { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// Whether the store refused the write because it has accepted a higher
    /// token ([`Error::StaleToken`]): this holder has been superseded, so
    /// stop the work and take the lease again rather than retry. Nothing
    /// was written. [`Error::stale_tokens`] gives the two tokens.
    ///
    /// ```
    /// # use fencing_core::{Error, FencingToken};
    /// let e = Error::StaleToken {
    ///     key: "reports/nightly".into(),
    ///     presented: FencingToken::new(33),
    ///     current: FencingToken::new(34),
    /// };
    /// assert!(e.is_stale() && !e.is_retryable());
    /// ```
    pub fn is_stale(&self) -> bool {
        matches!(self, Self::StaleToken { .. })
    }

    /// The `(presented, current)` tokens of a [`Error::StaleToken`].
    pub fn stale_tokens(&self) -> Option<(FencingToken, FencingToken)> {
        match self {
            Self::StaleToken {
                presented, current, ..
            } => Some((*presented, *current)),
            _ => None,
        }
    }
}

/// `err` and every cause below it, `: `-separated (a cause an SDK already
/// repeats in its own message is not printed twice), redacted
/// ([`crate::redact::redact_text`]): the one chain printer, for the CLI, the
/// tests and any log line. [`Error::chain`] is the same for our errors.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(e) = cause {
        let line = e.to_string();
        if !text.ends_with(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        cause = e.source();
    }
    crate::redact::redact_text(&text)
}

/// The message of an [`Error::InvalidInput`], for this crate's config
/// tests (other crates have `fencing_testkit::refusal`).
#[cfg(test)]
pub(crate) fn invalid_input_message<T: std::fmt::Debug>(what: &str, result: Result<T>) -> String {
    match result {
        Err(Error::InvalidInput { message }) => message,
        other => panic!("{what}: expected InvalidInput, got {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn assert_send_sync<T: Send + Sync + 'static>() {}
    const _: () = assert_send_sync::<Error>();

    #[test]
    fn stale_token_names_both_tokens_and_the_key() {
        let e = Error::StaleToken {
            key: "orders/7".into(),
            presented: FencingToken::new(33),
            current: FencingToken::new(34),
        };
        let text = e.to_string();
        assert!(
            text.contains("33") && text.contains("34") && text.contains("orders/7"),
            "{text}"
        );
        assert_eq!(e.stale_tokens(), Some((33.into(), 34.into())));
        assert!(!e.is_retryable());
    }

    #[test]
    fn only_the_stale_token_refusal_is_stale() {
        let stale = Error::StaleToken {
            key: "orders/7".into(),
            presented: FencingToken::new(33),
            current: FencingToken::new(34),
        };
        assert!(stale.is_stale());
        // Refused too, but not for a higher token: a lost lease, a frameless
        // object or bad input are not "superseded by another holder".
        let lease_lost = Error::LeaseLost {
            resource: "orders/7".into(),
            token: FencingToken::new(33),
        };
        let unfenced = Error::Unfenced {
            key: "orders/7".into(),
        };
        for other in [lease_lost, unfenced, Error::invalid_input("x")] {
            assert!(!other.is_stale(), "{other:?}");
        }
    }

    #[test]
    fn busy_names_the_resource_and_is_retryable() {
        let e = Error::busy("jobs/nightly", "raise_floor");
        let text = e.to_string();
        assert!(
            text.contains("\"jobs/nightly\" is held") && text.contains("raise_floor"),
            "{text}"
        );
        assert!(e.is_retryable());
        assert!(!matches!(e, Error::InvalidInput { .. }));
    }

    #[test]
    fn sources_are_chained() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = Error::backend("etcd", true, io);
        let source = std::error::Error::source(&e).expect("source kept");
        assert_eq!(source.to_string(), "refused");
        assert!(e.is_retryable());
        assert!(e.to_string().contains("retryable"));
        let unknown = Error::outcome_unknown("postgres", "put \"k\"", "connection reset");
        assert!(!unknown.is_retryable());
        assert!(std::error::Error::source(&unknown).is_some());
    }
}
