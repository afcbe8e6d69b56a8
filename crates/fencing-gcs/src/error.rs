//! The one place GCS failures become [`fencing_core::Error`]s.

use fencing_core::Error;

const BACKEND: &str = "gcs";

/// What was being done when the client failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// A read for the generation and metadata only.
    Head,
    /// A whole read.
    Read,
    /// An upload with `ifGenerationMatch=0`.
    Create,
    /// An upload with `ifGenerationMatch=<generation>`.
    Update,
}

/// What a failure means to the fenced-write loop.
#[derive(Debug)]
pub(crate) enum Failure {
    /// 404 on a read: the object is absent. Only for `Head`/`Read`.
    NotFound,
    /// 412: the generation did not match; nothing was written. Also a 404
    /// on `Update` (the object went away meanwhile). Only for writes.
    PreconditionFailed,
    /// 416 on a ranged read: the object is empty (so it has no frame).
    /// Only for `Head`.
    EmptyRange,
    /// Anything else.
    Error(Error),
}

/// Maps a client failure of `op` on `bucket`/`key`.
pub(crate) fn classify(
    op: Op,
    bucket: &str,
    key: &str,
    err: google_cloud_storage::Error,
) -> Failure {
    let write = matches!(op, Op::Create | Op::Update);
    let fail = |retryable: bool, err: google_cloud_storage::Error| {
        Failure::Error(Error::backend(BACKEND, retryable, err))
    };
    let unknown = |err: google_cloud_storage::Error| {
        Failure::Error(Error::outcome_unknown(
            BACKEND,
            format!("conditional upload of {key:?} to {bucket}"),
            err,
        ))
    };

    if let Some(status) = err.http_status_code() {
        let lost = || {
            tracing::debug!(bucket, key, status, ?op, "conditional upload refused");
            Failure::PreconditionFailed
        };
        return match status {
            412 if write => lost(),
            404 if op == Op::Update => lost(),
            // Creating in a bucket that does not exist.
            404 if write => fail(false, err),
            404 => Failure::NotFound,
            416 if op == Op::Head => Failure::EmptyRange,
            // Rate limited: not applied.
            429 => fail(true, err),
            408 | 500..=599 if write => unknown(err),
            408 | 500..=599 => fail(true, err),
            // 400, 401, 403 …: bad name, credentials, permissions.
            _ => fail(false, err),
        };
    }
    if err.is_connect() || refused(&err) {
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
    if write { unknown(err) } else { fail(true, err) }
}

/// A connection refused or unreachable before anything was sent.
fn refused(err: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::HostUnreachable
                    | ErrorKind::NetworkUnreachable
            )
        {
            return true;
        }
        cause = e.source();
    }
    false
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
            assert_eq!(kind(&classify(op, "b", "k", err)), want, "{what}");
        }
    }
}
