//! The one place Azure Blob failures become [`fencing_core::Error`]s.

use azure_core::error::ErrorKind;
use fencing_core::Error;
pub(crate) use fencing_core::adapter::blob::http::Failure;
use fencing_core::adapter::blob::http::{self, Meaning, Override};
use fencing_core::adapter::{Redacted, tls_failure};

const BACKEND: &str = "azure";

/// What was being done when the client failed: a `Head` is a ranged Get
/// Blob of the frame header, a `Read` a Get Blob (possibly in ranges, each
/// conditional on the first's ETag), a `Create` a Put Blob with
/// `If-None-Match: *`, an `Update` one with `If-Match: <ETag>`.
pub(crate) use fencing_core::adapter::blob::http::Request as Op;

/// Azure's exceptions to the core's status table.
const OVERRIDES: &[Override] = &[
    // Only a condition that did not hold is a lost race (also on a read in
    // ranges conditional on the first's ETag). Any other 412 (a lease on
    // the blob: `LeaseIdMissing`) will not go away by reading again:
    // retrying it 32 times would only hide it.
    Override::status(412)
        .code("ConditionNotMet")
        .means(Meaning::LostRace),
    Override::status(412)
        .code_missing()
        .means(Meaning::LostRace),
    Override::status(412).means(Meaning::Permanent),
    // Azure's answer to `If-None-Match: *` on an existing blob. Other 409s
    // (a lease, an archived blob) are permanent, as in the table.
    Override::status(409)
        .code("BlobAlreadyExists")
        .writes()
        .means(Meaning::LostRace),
    // A missing container is configuration, not an absent blob.
    Override::status(404)
        .code("ContainerNotFound")
        .means(Meaning::Permanent),
    // A blob deleted under a write.
    Override::status(404).writes().means(Meaning::LostRace),
    // Throttled: not applied. Any other 503 (a gateway's, perhaps after
    // forwarding the write) may follow an applied write.
    Override::status(503)
        .code("ServerBusy")
        .means(Meaning::Retryable),
];

/// Maps a client failure of `op` on `container`/`key`: an answer by the
/// core's status table with Azure's [`OVERRIDES`], anything else by the
/// client's error kind.
///
/// The client's messages carry the request URL, SAS signature and all: the
/// error kept as the `source()` is its [`Redacted`] text.
pub(crate) fn classify(op: Op, container: &str, key: &str, err: azure_core::Error) -> Failure {
    let write = op.is_write();
    let fail = |retryable: bool, err: azure_core::Error| {
        Failure::Error(Error::backend(BACKEND, retryable, Redacted::new(&err)))
    };
    let operation = || format!("conditional Put Blob of {key:?} in container {container:?}");
    let unknown = |err: azure_core::Error| {
        Failure::Error(Error::outcome_unknown(
            BACKEND,
            operation(),
            Redacted::new(&err),
        ))
    };
    if tls_failure(&err) {
        return Failure::Error(Error::tls(BACKEND, Redacted::new(&err)));
    }

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
    // A SAS or key the account does not accept: a wrong signature or an
    // expired SAS (Azure: AuthenticationFailed; Azurite says
    // AuthorizationFailure for both, as Azure does for a SAS without the
    // right permissions).
    if status == 403
        && matches!(
            code.as_deref(),
            Some("AuthenticationFailed" | "AuthorizationFailure")
        )
    {
        return Failure::Error(Error::unauthenticated(BACKEND, Redacted::new(&err)));
    }
    http::failure(
        BACKEND,
        op,
        status,
        code.as_deref(),
        OVERRIDES,
        operation,
        Redacted::new(&err),
    )
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
                "unauthenticated",
            ),
            (
                Op::Read,
                answered(StatusCode::Forbidden, Some("AuthorizationFailure")),
                "unauthenticated",
            ),
            (
                Op::Read,
                answered(
                    StatusCode::Forbidden,
                    Some("AuthorizationPermissionMismatch"),
                ),
                "backend retryable=false",
            ),
            (
                Op::Update,
                answered(StatusCode::ServiceUnavailable, Some("ServerBusy")),
                "backend retryable=true",
            ),
            // Only Azure's own throttling promises the write was not
            // applied; another 503 (a gateway's, after forwarding) may come
            // after it was.
            (
                Op::Update,
                answered(StatusCode::ServiceUnavailable, None),
                "unknown",
            ),
            (
                Op::Create,
                answered(StatusCode::ServiceUnavailable, Some("ServiceUnavailable")),
                "unknown",
            ),
            (
                Op::Head,
                answered(StatusCode::ServiceUnavailable, None),
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
            assert_eq!(classify(op, "c", "k", err).describe(), want, "{what}");
        }
    }
}
