//! What an SDK error with no service answer says of its request: sent or
//! not, applied or maybe. The first half of every AWS adapter's one
//! error-mapping function; the answered half (status codes, error codes)
//! is each service's own.

use aws_smithy_runtime_api::client::result::SdkError;
use fencing_core::adapter::{never_sent, tls_failure};

/// How a request that got no service answer failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unanswered {
    /// Not applied: never sent (a request the SDK could not build, a
    /// connection refused), or a read. `retryable` unless the caller's own
    /// configuration is at fault.
    NotApplied {
        /// Whether trying again may succeed.
        retryable: bool,
    },
    /// The TLS handshake failed: nothing was sent.
    Tls,
    /// A write that may have been sent and applied (a timeout, a
    /// connection lost after sending).
    MayHaveApplied,
}

/// The triage of `err` when no service answered it (`None` for a service
/// error or an unreadable answer: the caller's to map). `write`: whether
/// the request changes anything, so that a lost answer may hide an
/// applied write.
pub fn unanswered<E, R>(err: &SdkError<E, R>, write: bool) -> Option<Unanswered>
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    let sent = |write: bool| {
        if write {
            Unanswered::MayHaveApplied
        } else {
            Unanswered::NotApplied { retryable: true }
        }
    };
    Some(match err {
        SdkError::ConstructionFailure(_) => Unanswered::NotApplied { retryable: false },
        SdkError::TimeoutError(_) => sent(write),
        SdkError::DispatchFailure(d) if d.is_user() => Unanswered::NotApplied { retryable: false },
        SdkError::DispatchFailure(_) if tls_failure(err) => Unanswered::Tls,
        SdkError::DispatchFailure(_) if never_sent(err) => {
            Unanswered::NotApplied { retryable: true }
        }
        SdkError::DispatchFailure(_) => sent(write),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use aws_smithy_runtime_api::client::result::ConnectorError;

    use super::*;

    type Failed = SdkError<std::io::Error, ()>;

    fn io(kind: std::io::ErrorKind) -> Failed {
        SdkError::dispatch_failure(ConnectorError::io(Box::new(std::io::Error::from(kind))))
    }

    #[test]
    fn only_a_write_that_may_have_been_sent_may_have_been_applied() {
        let timeout = || Failed::timeout_error(std::io::Error::other("timed out"));
        let reset = || io(std::io::ErrorKind::ConnectionReset);
        for (err, write, expected) in [
            (timeout(), true, Unanswered::MayHaveApplied),
            (timeout(), false, Unanswered::NotApplied { retryable: true }),
            (reset(), true, Unanswered::MayHaveApplied),
            (reset(), false, Unanswered::NotApplied { retryable: true }),
            (
                io(std::io::ErrorKind::ConnectionRefused),
                true,
                Unanswered::NotApplied { retryable: true },
            ),
            (
                Failed::construction_failure(std::io::Error::other("no region")),
                true,
                Unanswered::NotApplied { retryable: false },
            ),
            (
                SdkError::dispatch_failure(ConnectorError::user(Box::new(std::io::Error::other(
                    "bad URI",
                )))),
                true,
                Unanswered::NotApplied { retryable: false },
            ),
        ] {
            assert_eq!(
                unanswered(&err, write),
                Some(expected),
                "{err:?}, write {write}"
            );
        }
        let answered = Failed::response_error(std::io::Error::other("unreadable"), ());
        assert_eq!(unanswered(&answered, true), None, "the caller's to map");
    }
}
