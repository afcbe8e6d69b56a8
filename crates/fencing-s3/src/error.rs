//! The one place S3 failures become [`fencing::Error`]s.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use fencing::Error;

const BACKEND: &str = "s3";

/// What was being done when the SDK failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// `HeadObject`.
    Head,
    /// `GetObject`.
    Read,
    /// A conditional `PutObject`.
    Write,
}

/// What a failure means to the fenced-write loop.
#[derive(Debug)]
pub(crate) enum Failure {
    /// 404 on head or read: the object is absent. Only for `Head`/`Read`.
    NotFound,
    /// The write's condition did not hold: 412, S3's 409
    /// `ConditionalRequestConflict`, or 404 on `If-Match` of a key that is
    /// gone. Nothing was written. Only for `Write`.
    PreconditionFailed,
    /// Anything else.
    Error(Error),
}

/// Maps an SDK failure of `op` on `bucket`/`key`.
///
/// HTTP status decides, not the error code string: S3's 412 has no modelled
/// error variant. Codes only refine a status (a 404 `NoSuchBucket` is a
/// configuration error, not an absent object).
pub(crate) fn classify<E>(op: Op, bucket: &str, key: &str, err: SdkError<E>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let write = op == Op::Write;
    let what = match op {
        Op::Head => "HeadObject",
        Op::Read => "GetObject",
        Op::Write => "conditional PutObject",
    };
    let fail =
        |retryable: bool, err: SdkError<E>| Failure::Error(Error::backend(BACKEND, retryable, err));
    let unknown = |err: SdkError<E>| {
        Failure::Error(Error::outcome_unknown(
            BACKEND,
            format!("{what} s3://{bucket}/{key}"),
            err,
        ))
    };

    let status = err.raw_response().map(|r| r.status().as_u16());
    match (&err, status) {
        // Never sent.
        (SdkError::ConstructionFailure(_), _) => fail(false, err),
        // The request may have been sent and applied.
        (SdkError::TimeoutError(_), _) if write => unknown(err),
        (SdkError::TimeoutError(_), _) => fail(true, err),
        (SdkError::DispatchFailure(d), _) if d.is_user() => fail(false, err),
        (SdkError::DispatchFailure(_), _) if never_sent(&err) => fail(true, err),
        (SdkError::DispatchFailure(_), _) if write => unknown(err),
        (SdkError::DispatchFailure(_), _) => fail(true, err),
        // An answer came back.
        (_, Some(status)) => {
            let code = err.as_service_error().and_then(ProvideErrorMetadata::code);
            match status {
                412 if write => Failure::PreconditionFailed,
                409 if write && code == Some("ConditionalRequestConflict") => {
                    Failure::PreconditionFailed
                }
                404 if code == Some("NoSuchBucket") => fail(false, err),
                // `If-Match` on a key that no longer exists.
                404 if write => Failure::PreconditionFailed,
                404 => Failure::NotFound,
                // Throttled or asked to retry: not applied.
                408 | 429 | 503 => fail(true, err),
                // 409 OperationAborted and the like: a conflicting bucket
                // operation; trying again may work.
                409 => fail(true, err),
                500..=599 if write => unknown(err),
                500..=599 => fail(true, err),
                // 2xx/3xx with a response the SDK could not read: the write
                // went through, but we cannot say at which version.
                200..=399 if write => unknown(err),
                // 400, 401, 403, 405 …: wrong credentials, region, request.
                _ => fail(false, err),
            }
        }
        (_, None) if write => unknown(err),
        (_, None) => fail(true, err),
    }
}

/// Whether the connection failed before any byte of the request was sent
/// (refused, unreachable): only then is a failed write known not applied.
fn never_sent(err: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::HostUnreachable
                    | ErrorKind::NetworkUnreachable
            ) {
                return true;
            }
        }
        cause = e.source();
    }
    false
}
