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
/// `Generic` (store `"FencedObjectStore"`), or of `AlreadyExists` when a
/// `PutMode::Create` met an object a newer holder wrote.
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
    match err {
        StoreError::Generic { store, source } if *store == FENCED => source.downcast_ref::<Error>(),
        StoreError::AlreadyExists { source, .. } => source.downcast_ref::<Error>(),
        _ => None,
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
