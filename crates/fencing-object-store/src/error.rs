//! The one mapping each way: object_store's errors into ours (for
//! [`ObjectStoreBackend`](crate::ObjectStoreBackend)), ours into
//! object_store's (for [`FencedObjectStore`](crate::FencedObjectStore)'s
//! callers), and [`fencing_error`] to find ours again.

use fencing_core::redact::redact_text;
use fencing_core::{Error, error_chain};
use object_store::Error as StoreError;

/// The name of this backend in messages and metrics.
pub(crate) const NAME: &str = "object_store";

/// What [`FencedObjectStore`](crate::FencedObjectStore) reports as the
/// `store` of the errors it makes itself.
pub(crate) const FENCED: &str = "FencedObjectStore";

/// An object_store error from a read or a write the store made, as ours.
/// The text is redacted (a SAS or a presigned signature in a URL the
/// error quotes never leaves); a write's transport failure is
/// [`Error::OutcomeUnknown`], since the request may have been applied.
pub(crate) fn into_fencing(err: StoreError, operation: &str, write: bool) -> Error {
    let text = redact_text(&error_chain(&err));
    match err {
        StoreError::PermissionDenied { .. } | StoreError::Unauthenticated { .. } => {
            Error::unauthenticated(NAME, text)
        }
        StoreError::InvalidPath { .. } => Error::invalid_input(text),
        StoreError::NotImplemented { .. } | StoreError::NotSupported { .. } => Error::backend(
            NAME,
            false,
            format!(
                "{operation} is not supported by this ObjectStore, so it cannot be fenced on \
                 (a conditional write on a version is what fencing needs): {text}"
            ),
        ),
        StoreError::Generic { .. } if write => Error::outcome_unknown(NAME, operation, text),
        _ => Error::backend(NAME, true, text),
    }
}

/// One of our errors as object_store's: [`Error::StaleToken`],
/// [`Error::LeaseLost`], [`Error::Unfenced`] and the rest travel as the
/// source of [`object_store::Error::Generic`] (`store` is
/// `"FencedObjectStore"`), never as `Precondition`, which an engine reads as
/// a lost compare-and-swap to retry.
pub(crate) fn into_store(err: Error) -> StoreError {
    StoreError::Generic {
        store: FENCED,
        source: Box::new(err),
    }
}

/// The fencing error behind an object_store error that
/// [`FencedObjectStore`](crate::FencedObjectStore) returned, if it was one
/// of ours: match on it to tell a stale token (a newer holder wrote; stop)
/// from the store's own errors. Ours travel as the source of
/// `Generic` (store `"FencedObjectStore"`), of `AlreadyExists` when a
/// `PutMode::Create` met an object a newer holder wrote, or further down
/// the chain (a rename whose tombstone was refused after its copy landed;
/// a layer of yours that keeps our error as its source): the first one in
/// the `source()` chain is returned.
///
/// ```
/// use fencing_object_store::fencing_error;
///
/// fn stop_now(err: &object_store::Error) -> bool {
///     fencing_error(err).is_some_and(|e| e.is_stale() || matches!(e, fencing_core::Error::LeaseLost { .. }))
/// }
/// # let _ = stop_now;
/// ```
pub fn fencing_error(err: &StoreError) -> Option<&Error> {
    let mut cause = std::error::Error::source(err);
    while let Some(e) = cause {
        if let Some(ours) = e.downcast_ref::<Error>() {
            return Some(ours);
        }
        cause = e.source();
    }
    None
}

/// A rename whose copy landed at `to` but whose tombstone at `from` was
/// not written. Never "nothing was written"; the tombstone's error (a
/// newer holder's mark at `from`, say) stays typed behind `source()`, for
/// [`fencing_error`].
pub(crate) fn rename_half_done(from: &str, to: &str, tombstone: StoreError) -> StoreError {
    StoreError::Generic {
        store: FENCED,
        source: Box::new(RenameHalfDone {
            from: from.to_owned(),
            to: to.to_owned(),
            tombstone: redacted(tombstone),
        }),
    }
}

#[derive(Debug)]
struct RenameHalfDone {
    from: String,
    to: String,
    tombstone: StoreError,
}

impl std::fmt::Display for RenameHalfDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            from,
            to,
            tombstone,
        } = self;
        write!(
            f,
            "renaming {from} to {to}: {to} was written, but the tombstone at {from} was not: \
             {tombstone}"
        )
    }
}

impl std::error::Error for RenameHalfDone {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.tombstone)
    }
}

/// Whether object_store's own retry loop sent this request more than once
/// before the answer it reports. A conditional write it retried after an
/// answer was lost (a 5xx, S3's 409) may have been applied by the first
/// attempt, and its retry then fails the precondition: such a failure is
/// not a lost race. object_store says so only in its text ("after N
/// retries"), which is what this reads.
pub(crate) fn was_retried(err: &StoreError) -> bool {
    let chain = error_chain(err);
    chain.contains(", after ") && chain.contains(" retries")
}

/// Whether a failed ranged read may be the range's fault: an object
/// shorter than its first byte (an empty one) answers a ranged read with
/// an error, and is then read whole. Answers about the object itself
/// (absent, conditions, access) are not.
pub(crate) fn may_be_range(err: &StoreError) -> bool {
    !matches!(
        err,
        StoreError::NotFound { .. }
            | StoreError::Precondition { .. }
            | StoreError::NotModified { .. }
            | StoreError::PermissionDenied { .. }
            | StoreError::Unauthenticated { .. }
            | StoreError::InvalidPath { .. }
    )
}

/// Whether a failed request's answer says it was refused without being
/// applied: a 4xx status other than 408 (timeout), 409 (conflict), 412
/// (precondition) and 429 (throttled). object_store says so only in its
/// text ("Server returned non-2xx status code: 400 Bad Request").
pub(crate) fn refused_before_applying(err: &StoreError) -> bool {
    let chain = error_chain(err);
    let Some((_, rest)) = chain.split_once("status code: ") else {
        return false;
    };
    let code: String = rest.chars().take_while(char::is_ascii_digit).collect();
    matches!(code.parse::<u16>(), Ok(400..=499))
        && !matches!(code.as_str(), "408" | "409" | "412" | "429")
}

/// An error of the store underneath, as this crate hands it on: the same
/// variant (an engine matches on `NotFound`, `AlreadyExists`,
/// `Precondition`), its source replaced by the redacted text of its chain,
/// since object_store quotes request URLs, which can carry an Azure SAS or
/// a presigned signature. Errors of ours pass unchanged.
pub(crate) fn redacted(err: StoreError) -> StoreError {
    if fencing_error(&err).is_some() {
        return err;
    }
    fn text(
        source: &(dyn std::error::Error + Send + Sync + 'static),
    ) -> Box<dyn std::error::Error + Send + Sync> {
        redact_text(&error_chain(source)).into()
    }
    match err {
        StoreError::Generic { store, source } => StoreError::Generic {
            store,
            source: text(&*source),
        },
        StoreError::NotFound { path, source } => StoreError::NotFound {
            path: redact_text(&path),
            source: text(&*source),
        },
        StoreError::AlreadyExists { path, source } => StoreError::AlreadyExists {
            path: redact_text(&path),
            source: text(&*source),
        },
        StoreError::Precondition { path, source } => StoreError::Precondition {
            path: redact_text(&path),
            source: text(&*source),
        },
        StoreError::NotModified { path, source } => StoreError::NotModified {
            path: redact_text(&path),
            source: text(&*source),
        },
        StoreError::PermissionDenied { path, source } => StoreError::PermissionDenied {
            path: redact_text(&path),
            source: text(&*source),
        },
        StoreError::Unauthenticated { path, source } => StoreError::Unauthenticated {
            path: redact_text(&path),
            source: text(&*source),
        },
        StoreError::NotSupported { source } => StoreError::NotSupported {
            source: text(&*source),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_in_an_underlying_error_does_not_pass_through() {
        let err = StoreError::NotFound {
            path: "c/k".into(),
            source: "GET https://a.blob.core.windows.net/c/k?sv=2024&sig=SECRETSIG failed".into(),
        };
        let out = redacted(err);
        assert!(matches!(out, StoreError::NotFound { .. }));
        let shown = format!("{out} {out:?} {}", error_chain(&out));
        assert!(!shown.contains("SECRETSIG"), "{shown}");
    }

    #[test]
    fn a_fencing_error_is_found_through_the_errors_that_wrap_it() {
        use fencing_core::FencingToken;
        let stale = || {
            into_store(Error::StaleToken {
                key: "a".into(),
                presented: FencingToken::new(7),
                current: FencingToken::new(9),
            })
        };
        let half_done = rename_half_done("a", "b", stale());
        let in_a_layer_of_yours = StoreError::Generic {
            store: "YourLayer",
            source: Box::new(rename_half_done("a", "b", stale())),
        };
        for err in [stale(), half_done, in_a_layer_of_yours] {
            assert_eq!(
                fencing_error(&err).and_then(Error::stale_tokens),
                Some((FencingToken::new(7), FencingToken::new(9))),
                "{err:?}"
            );
            let chain = error_chain(&err);
            assert_eq!(chain.matches("presented 7").count(), 1, "{chain}");
        }
        let theirs = StoreError::Generic {
            store: "S3",
            source: "stale fencing token, said as text".into(),
        };
        assert!(fencing_error(&theirs).is_none());
    }

    #[test]
    fn a_4xx_answer_was_refused_and_a_5xx_or_a_conflict_may_have_landed() {
        let with = |text: &str| StoreError::Generic {
            store: "S3",
            source: text.to_owned().into(),
        };
        assert!(refused_before_applying(&with(
            "Error performing PUT http://x in 1ms - Server returned non-2xx status code: 400 Bad Request: KeyTooLong"
        )));
        for text in [
            "Server returned non-2xx status code: 503 Service Unavailable",
            "Server returned non-2xx status code: 409 Conflict",
            "Server returned non-2xx status code: 429 Too Many Requests",
            "HTTP error: connection reset",
        ] {
            assert!(!refused_before_applying(&with(text)), "{text}");
        }
    }
}
