//! The one place GCS failures become [`fencing_core::Error`]s.

use fencing_core::Error;
use fencing_core::adapter::blob::http;
pub(crate) use fencing_core::adapter::blob::http::Failure;
use fencing_core::adapter::never_sent;

const BACKEND: &str = "gcs";

/// What was being done when the client failed: a `Head` reads the
/// generation and metadata only, a `Create` uploads with
/// `ifGenerationMatch=0`, an `Update` with `ifGenerationMatch=<generation>`.
pub(crate) use fencing_core::adapter::blob::http::Request as Op;

/// Maps a client failure of `op` on `bucket`/`key`: an answer by the
/// core's status table (GCS needs no overrides: a 404 on an update is an
/// object deleted meanwhile, on a create a missing bucket), anything else
/// by what the client says of it.
pub(crate) fn classify(
    op: Op,
    bucket: &str,
    key: &str,
    err: google_cloud_storage::Error,
) -> Failure {
    let fail = |retryable: bool, err: google_cloud_storage::Error| {
        Failure::Error(Error::backend(BACKEND, retryable, err))
    };
    let operation = || format!("conditional upload of {key:?} to {bucket}");

    if let Some(status) = err.http_status_code() {
        return http::failure(BACKEND, op, status, None, &[], operation, err);
    }
    if err.is_connect() || never_sent(&err) {
        // Nothing was sent.
        return fail(true, err);
    }
    if err.is_authentication() {
        let transient = err.is_transient_and_before_rpc();
        return fail(transient, err);
    }
    if err.is_binding() {
        return fail(false, err);
    }
    if err.is_serialization() && !checksum_mismatch(&err) {
        // The request could not be built; nothing was sent.
        return fail(false, err);
    }
    // Timeouts, broken connections, an unreadable response or a checksum
    // mismatch reported after the upload: a write may have been applied.
    if op.is_write() {
        Failure::Error(Error::outcome_unknown(BACKEND, operation(), err))
    } else {
        fail(true, err)
    }
}

/// The client reports a checksum mismatch found *after* the upload
/// completed as a serialization error; the object was written.
fn checksum_mismatch(err: &google_cloud_storage::Error) -> bool {
    let mut cause = std::error::Error::source(err);
    while let Some(e) = cause {
        if let Some(write) = e.downcast_ref::<google_cloud_storage::error::WriteError>() {
            return matches!(
                write,
                google_cloud_storage::error::WriteError::ChecksumMismatch { .. }
            );
        }
        cause = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use google_cloud_storage::http::HeaderMap;

    use super::*;

    fn answered(status: u16) -> google_cloud_storage::Error {
        google_cloud_storage::Error::http(status, HeaderMap::new(), bytes::Bytes::new())
    }

    #[test]
    fn statuses_and_transport_failures_map_to_the_loop() {
        use google_cloud_storage::Error as E;
        let cases = [
            (Op::Update, answered(412), "precondition"),
            (Op::Create, answered(412), "precondition"),
            (Op::Update, answered(404), "precondition"),
            (Op::Create, answered(404), "backend retryable=false"),
            (Op::Head, answered(404), "not found"),
            (Op::Read, answered(404), "not found"),
            (Op::Head, answered(412), "backend retryable=false"),
            (Op::Update, answered(403), "backend retryable=false"),
            (Op::Update, answered(429), "backend retryable=true"),
            (Op::Update, answered(503), "unknown"),
            (Op::Read, answered(503), "backend retryable=true"),
            (Op::Update, E::connect("refused"), "backend retryable=true"),
            (Op::Update, E::timeout("deadline"), "unknown"),
            (Op::Head, E::timeout("deadline"), "backend retryable=true"),
            (Op::Update, E::io("reset"), "unknown"),
            (
                Op::Update,
                E::binding("bad bucket"),
                "backend retryable=false",
            ),
            (
                Op::Update,
                E::ser("cannot encode"),
                "backend retryable=false",
            ),
        ];
        for (op, err, want) in cases {
            let what = format!("{op:?} {err}");
            assert_eq!(classify(op, "b", "k", err).describe(), want, "{what}");
        }
    }
}
