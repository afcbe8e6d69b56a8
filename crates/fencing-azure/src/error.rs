//! The one place Azure Blob failures become [`fencing_core::Error`]s.

use azure_core::error::ErrorKind;
use fencing_core::Error;

const BACKEND: &str = "azure";

/// What was being done when the client failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// A ranged Get Blob of the frame header.
    Head,
    /// Get Blob (possibly in ranges, each conditional on the first's ETag).
    Read,
    /// Put Blob with `If-None-Match: *`.
    Create,
    /// Put Blob with `If-Match: <ETag>`.
    Update,
}

/// What a failure means to the fenced-write loop.
#[derive(Debug)]
pub(crate) enum Failure {
    /// 404 `BlobNotFound` on a read: the blob is absent.
    NotFound,
    /// The condition did not hold; nothing was written: 412, or 409
    /// `BlobAlreadyExists` (Azure's answer to `If-None-Match: *` on an
    /// existing blob). On `Read`: the blob changed between two ranges.
    PreconditionFailed,
    /// 416 on a ranged read: the blob is empty (so it has no frame). Only
    /// for `Head`.
    EmptyRange,
    /// Anything else.
    Error(Error),
}

/// Maps a client failure of `op` on `container`/`key`.
pub(crate) fn classify(op: Op, container: &str, key: &str, err: azure_core::Error) -> Failure {
    let write = matches!(op, Op::Create | Op::Update);
    let fail = |retryable: bool, err: azure_core::Error| {
        Failure::Error(Error::backend(BACKEND, retryable, err))
    };
    let unknown = |err: azure_core::Error| {
        Failure::Error(Error::outcome_unknown(
            BACKEND,
            format!("conditional Put Blob of {key:?} in container {container:?}"),
            err,
        ))
    };

    let (status, code) = match err.kind() {
        ErrorKind::HttpResponse {
            status, error_code, ..
        } => (u16::from(*status), error_code.clone()),
        // The connection failed before the request went out.
        ErrorKind::Connection => return fail(true, err),
        // Sent (or partly sent) and then lost: a timeout, a reset.
        ErrorKind::Io if write => return unknown(err),
        ErrorKind::Io => return fail(true, err),
        // A write's response that cannot be read: it went through.
        ErrorKind::DataConversion if write => return unknown(err),
        // Bad credentials, a request that cannot be built.
        _ => return fail(false, err),
    };
    let code = code.as_deref();
    match status {
        // Only a condition that did not hold is a lost race. Any other 412
        // (a lease on the blob: `LeaseIdMissing`) will not go away by
        // reading again: retrying it 32 times would only hide it.
        412 if matches!(code, Some("ConditionNotMet") | None) => Failure::PreconditionFailed,
        409 if write && code == Some("BlobAlreadyExists") => Failure::PreconditionFailed,
        416 if op == Op::Head => Failure::EmptyRange,
        404 if code == Some("ContainerNotFound") => fail(false, err),
        404 if write => Failure::PreconditionFailed,
        404 => Failure::NotFound,
        // Throttled: not applied.
        429 | 503 => fail(true, err),
        408 | 500..=599 if write => unknown(err),
        408 | 500..=599 => fail(true, err),
        // 400, 401, 403 (AuthenticationFailed, AuthorizationPermissionMismatch),
        // other 409s (a lease, an archived blob): retrying will not help.
        _ => fail(false, err),
    }
}

#[cfg(test)]
mod tests {
    use azure_core::http::StatusCode;

    use super::*;

    fn answered(status: StatusCode, code: Option<&str>) -> azure_core::Error {
        ErrorKind::HttpResponse {
            status,
            error_code: code.map(str::to_owned),
            raw_response: None,
        }
        .into_error()
    }

    fn kind(failure: &Failure) -> String {
        match failure {
            Failure::NotFound => "not found".into(),
            Failure::EmptyRange => "empty".into(),
            Failure::PreconditionFailed => "precondition".into(),
            Failure::Error(Error::Backend { retryable, .. }) => {
                format!("backend retryable={retryable}")
            }
            Failure::Error(Error::OutcomeUnknown { .. }) => "unknown".into(),
            Failure::Error(e) => format!("{e:?}"),
        }
    }

    #[test]
    fn codes_and_statuses_map_to_the_loop() {
        let cases = [
            (
                Op::Update,
                answered(StatusCode::PreconditionFailed, Some("ConditionNotMet")),
                "precondition",
            ),
            (
                Op::Create,
                answered(StatusCode::Conflict, Some("BlobAlreadyExists")),
                "precondition",
            ),
            (
                Op::Update,
                answered(StatusCode::PreconditionFailed, Some("LeaseIdMissing")),
                "backend retryable=false",
            ),
            (
                Op::Update,
                answered(StatusCode::Conflict, Some("LeaseAlreadyPresent")),
                "backend retryable=false",
            ),
            (
                Op::Head,
                answered(
                    StatusCode::RequestedRangeNotSatisfiable,
                    Some("InvalidRange"),
                ),
                "empty",
            ),
            (
                Op::Update,
                answered(StatusCode::Conflict, Some("LeaseIdMissing")),
                "backend retryable=false",
            ),
            (
                Op::Create,
                answered(StatusCode::NotFound, Some("ContainerNotFound")),
                "backend retryable=false",
            ),
            (
                Op::Head,
                answered(StatusCode::NotFound, Some("ContainerNotFound")),
                "backend retryable=false",
            ),
            (
                Op::Head,
                answered(StatusCode::NotFound, Some("BlobNotFound")),
                "not found",
            ),
            (
                Op::Read,
                answered(StatusCode::NotFound, Some("BlobNotFound")),
                "not found",
            ),
            (
                Op::Read,
                answered(StatusCode::PreconditionFailed, None),
                "precondition",
            ),
            (
                Op::Update,
                answered(StatusCode::Forbidden, Some("AuthenticationFailed")),
                "backend retryable=false",
            ),
            (
                Op::Update,
                answered(StatusCode::ServiceUnavailable, Some("ServerBusy")),
                "backend retryable=true",
            ),
            (
                Op::Update,
                answered(StatusCode::InternalServerError, None),
                "unknown",
            ),
            (
                Op::Head,
                answered(StatusCode::InternalServerError, None),
                "backend retryable=true",
            ),
            (
                Op::Update,
                ErrorKind::Connection.into_error(),
                "backend retryable=true",
            ),
            (Op::Update, ErrorKind::Io.into_error(), "unknown"),
            (
                Op::Read,
                ErrorKind::Io.into_error(),
                "backend retryable=true",
            ),
            (
                Op::Update,
                ErrorKind::Credential.into_error(),
                "backend retryable=false",
            ),
        ];
        for (op, err, want) in cases {
            let what = format!("{op:?} {:?}", err.kind());
            assert_eq!(kind(&classify(op, "c", "k", err)), want, "{what}");
        }
    }
}
