//! Our errors inside OpenDAL's, and [`fencing_error`] to find them again.

use fencing_core::redact::redact_text;
use fencing_core::{BoxError, Error};
use opendal::ErrorKind;

/// The name of this layer in the errors it makes itself.
pub(crate) const LAYER: &str = "FencingLayer";

/// One of our errors as an [`opendal::Error`], carried as its source (which
/// [`fencing_error`] finds) and quoted in its message.
///
/// The kind is never [`ErrorKind::ConditionNotMatch`], which callers read as
/// a lost compare-and-swap to retry: a stale token or a lost lease is
/// [`ErrorKind::PermissionDenied`] (this holder may not write any more; not
/// retryable), bad input [`ErrorKind::ConfigInvalid`], a refused operation
/// [`ErrorKind::Unsupported`], contention [`ErrorKind::Unexpected`] marked
/// temporary (retrying is safe), anything else [`ErrorKind::Unexpected`].
pub(crate) fn into_dal(err: Error) -> opendal::Error {
    let (kind, temporary) = match &err {
        Error::StaleToken { .. } | Error::LeaseLost { .. } => (ErrorKind::PermissionDenied, false),
        Error::InvalidInput { .. } | Error::TokenOutOfRange { .. } => {
            (ErrorKind::ConfigInvalid, false)
        }
        Error::Unsupported { .. } => (ErrorKind::Unsupported, false),
        Error::Contention { .. } => (ErrorKind::Unexpected, true),
        _ => (ErrorKind::Unexpected, false),
    };
    // The whole chain (a backend error's reason is its source), with any
    // URL's credentials taken out; the source kept is ours with every inner
    // error replaced by its redacted text.
    let err = scrub_core(err);
    let message = redact_text(&fencing_core::error_chain(&err));
    opendal::Error::new(kind, message)
        .with_temporary(temporary)
        .set_source(err)
}

/// An inner error as its redacted text only: nothing of it but that text
/// (no URL's signature, no source) is reachable any more.
fn redacted(source: &BoxError) -> BoxError {
    redact_text(&fencing_core::error_chain(source.as_ref())).into()
}

/// `err` with the errors it carries (an SDK's, a service's: their text may
/// quote a signed URL) replaced by their redacted text.
fn scrub_core(err: Error) -> Error {
    match err {
        Error::Backend {
            backend,
            retryable,
            source,
        } => Error::Backend {
            backend,
            retryable,
            source: redacted(&source),
        },
        Error::OutcomeUnknown {
            backend,
            operation,
            source,
        } => Error::OutcomeUnknown {
            backend,
            operation: redact_text(&operation),
            source: redacted(&source),
        },
        Error::Tls { backend, source } => Error::Tls {
            backend,
            source: redacted(&source),
        },
        Error::Unauthenticated { backend, source } => Error::Unauthenticated {
            backend,
            source: redacted(&source),
        },
        other => other,
    }
}

/// An error of the service below, as the layer returns it: its kind and
/// status kept, its text (the service's context: the URL, maybe a SAS or a
/// presigned signature) redacted, and no source. Our own errors, made by
/// [`into_dal`], are redacted already and kept (so [`fencing_error`] finds
/// them).
pub(crate) fn scrub(err: opendal::Error) -> opendal::Error {
    if fencing_error(&err).is_some() {
        return err;
    }
    let shown = err.to_string();
    let debug = format!("{err:?}");
    if std::error::Error::source(&err).is_none()
        && redact_text(&shown) == shown
        && redact_text(&debug) == debug
    {
        return err;
    }
    let clean = opendal::Error::new(err.kind(), redact_text(&shown));
    if err.is_temporary() {
        clean.set_temporary()
    } else if err.is_persistent() {
        clean.set_persistent()
    } else {
        clean
    }
}

/// A failed condition of the caller's (`ConditionNotMatch`, what its
/// protocol stops on) that our fencing error explains: a stale token, kept
/// as the source for [`fencing_error`].
pub(crate) fn condition_with(why: &str, path: &str, ours: Error) -> opendal::Error {
    opendal::Error::new(ErrorKind::ConditionNotMatch, why)
        .with_context("path", path)
        .set_source(scrub_core(ours))
}

/// A refusal of ours: `operation` (with why, in a few words) is not done
/// through the fencing layer.
pub(crate) fn refused(operation: &'static str) -> opendal::Error {
    into_dal(Error::Unsupported {
        backend: LAYER,
        operation,
    })
}

/// The fencing error behind an error an operator with a
/// [`FencingLayer`](crate::FencingLayer) returned, if it was one of ours:
/// match on it to tell a stale token (a newer holder wrote: stop) or a lost
/// lease from the store's own errors.
///
/// ```
/// use fencing_opendal::fencing_error;
///
/// fn stop_now(err: &opendal::Error) -> bool {
///     fencing_error(err).is_some_and(|e| e.is_stale() || matches!(e, fencing_core::Error::LeaseLost { .. }))
/// }
/// # let _ = stop_now;
/// ```
pub fn fencing_error(err: &opendal::Error) -> Option<&Error> {
    let mut cause = std::error::Error::source(err);
    while let Some(e) = cause {
        if let Some(ours) = e.downcast_ref::<Error>() {
            return Some(ours);
        }
        cause = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use fencing_core::FencingToken;

    use super::*;

    #[test]
    fn a_stale_token_is_not_a_lost_condition_and_is_found_again() {
        let err = into_dal(Error::StaleToken {
            key: "db/manifest".into(),
            presented: FencingToken::new(33),
            current: FencingToken::new(34),
        });
        assert_eq!(err.kind(), ErrorKind::PermissionDenied);
        assert!(!err.is_temporary());
        assert!(err.to_string().contains("33") && err.to_string().contains("34"));
        let ours = fencing_error(&err).expect("found");
        assert_eq!(
            ours.stale_tokens(),
            Some((FencingToken::new(33), FencingToken::new(34)))
        );
        // Context added above the layer keeps the source.
        let err = err.with_context("path", "db/manifest");
        assert!(fencing_error(&err).is_some_and(Error::is_stale));
        // The service's own errors are not ours.
        let theirs = opendal::Error::new(ErrorKind::ConditionNotMatch, "412");
        assert!(fencing_error(&theirs).is_none());
    }
}
