//! The one place S3 failures become [`fencing_core::Error`]s.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use fencing_aws::Unanswered;
use fencing_core::Error;
pub(crate) use fencing_core::adapter::blob::http::Failure;
use fencing_core::adapter::blob::http::{self, Meaning, Override, Request};

const BACKEND: &str = "s3";

/// What was being done when the SDK failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// A ranged `GetObject` of the frame header (or `HeadObject`).
    Head,
    /// `GetObject`.
    Read,
    /// A conditional `PutObject`.
    Write,
    /// A conditional `DeleteObject` (`If-Match`).
    Delete,
}

/// S3's exceptions to the core's status table.
const OVERRIDES: &[Override] = &[
    // S3's answer to two conditional writes racing on one key.
    Override::status(409)
        .code("ConditionalRequestConflict")
        .writes()
        .means(Meaning::LostRace),
    // 409 OperationAborted and the like: a conflicting bucket operation;
    // trying again may work.
    Override::status(409).means(Meaning::Retryable),
    // A missing bucket is configuration, not an absent object.
    Override::status(404)
        .code("NoSuchBucket")
        .means(Meaning::Permanent),
    // S3's own "not applied, try again" answers: the request body was not
    // read in time, or throttled. Any other 408/503 (a load balancer's,
    // perhaps after forwarding the write) may follow an applied write.
    Override::status(408)
        .code("RequestTimeout")
        .means(Meaning::Retryable),
    Override::status(503)
        .code("SlowDown")
        .means(Meaning::Retryable),
    // 2xx/3xx with a response the SDK could not read: the write went
    // through, but we cannot say at which version.
    Override::statuses(200, 399)
        .writes()
        .means(Meaning::OutcomeUnknown),
];

/// Maps an SDK failure of `op` on `bucket`/`key`.
///
/// HTTP status decides (the core's table with S3's [`OVERRIDES`]), not the
/// error code string: S3's 412 has no modelled error variant. Codes only
/// refine a status (a 404 `NoSuchBucket` is a configuration error, not an
/// absent object). A conditional `PutObject` is an update to the table:
/// S3 answers 404 to `If-Match` on a key that is gone.
pub(crate) fn classify<E>(op: Op, bucket: &str, key: &str, err: SdkError<E>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let write = matches!(op, Op::Write | Op::Delete);
    let what = match op {
        Op::Head => "HeadObject",
        Op::Read => "GetObject",
        Op::Write => "conditional PutObject",
        Op::Delete => "conditional DeleteObject",
    };
    let fail =
        |retryable: bool, err: SdkError<E>| Failure::Error(Error::backend(BACKEND, retryable, err));
    let operation = || format!("{what} s3://{bucket}/{key}");
    let unknown =
        |err: SdkError<E>| Failure::Error(Error::outcome_unknown(BACKEND, operation(), err));

    match fencing_aws::unanswered(&err, write) {
        Some(Unanswered::NotApplied { retryable }) => return fail(retryable, err),
        Some(Unanswered::Tls) => return Failure::Error(Error::tls(BACKEND, err)),
        Some(Unanswered::MayHaveApplied) => return unknown(err),
        None => {}
    }
    let status = err.raw_response().map(|r| r.status().as_u16());
    match (&err, status) {
        // Keys the server does not know, or a secret that does not match.
        (_, Some(403))
            if matches!(
                err.as_service_error().and_then(ProvideErrorMetadata::code),
                Some("InvalidAccessKeyId" | "SignatureDoesNotMatch")
            ) =>
        {
            Failure::Error(Error::unauthenticated(BACKEND, err))
        }
        // An answer came back.
        (_, Some(status)) => {
            let request = match op {
                Op::Head => Request::Head,
                Op::Read => Request::Read,
                Op::Write | Op::Delete => Request::Update,
            };
            let code = err
                .as_service_error()
                .and_then(ProvideErrorMetadata::code)
                .map(str::to_owned);
            http::failure(
                BACKEND,
                request,
                status,
                code.as_deref(),
                OVERRIDES,
                operation,
                err,
            )
        }
        (_, None) if write => unknown(err),
        (_, None) => fail(true, err),
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_s3::config::http::HttpResponse;
    use aws_sdk_s3::error::{ConnectorError, ErrorMetadata};
    use aws_sdk_s3::operation::put_object::PutObjectError;
    use aws_sdk_s3::primitives::SdkBody;

    use super::*;

    /// A service error as the SDK surfaces it: S3's 412 and 409 carry no
    /// modelled variant, only a status and perhaps a code.
    fn answered(status: u16, code: Option<&str>) -> SdkError<PutObjectError> {
        let mut meta = ErrorMetadata::builder();
        if let Some(code) = code {
            meta = meta.code(code);
        }
        let raw = HttpResponse::new(status.try_into().expect("a status"), SdkBody::empty());
        SdkError::service_error(PutObjectError::generic(meta.build()), raw)
    }

    fn io(kind: std::io::ErrorKind) -> SdkError<PutObjectError> {
        SdkError::dispatch_failure(ConnectorError::io(Box::new(std::io::Error::from(kind))))
    }

    #[test]
    fn statuses_decide_not_modelled_variants() {
        let cases = [
            (Op::Write, answered(412, None), "precondition"),
            (
                Op::Write,
                answered(412, Some("PreconditionFailed")),
                "precondition",
            ),
            (
                Op::Write,
                answered(409, Some("ConditionalRequestConflict")),
                "precondition",
            ),
            (
                Op::Write,
                answered(409, Some("OperationAborted")),
                "backend retryable=true",
            ),
            (Op::Write, answered(404, Some("NoSuchKey")), "precondition"),
            (
                Op::Write,
                answered(404, Some("NoSuchBucket")),
                "backend retryable=false",
            ),
            (Op::Head, answered(404, None), "not found"),
            (Op::Read, answered(404, Some("NoSuchKey")), "not found"),
            (
                Op::Read,
                answered(404, Some("NoSuchBucket")),
                "backend retryable=false",
            ),
            (Op::Head, answered(412, None), "backend retryable=false"),
            (
                Op::Write,
                answered(403, Some("AccessDenied")),
                "backend retryable=false",
            ),
            (
                Op::Write,
                answered(503, Some("SlowDown")),
                "backend retryable=true",
            ),
            // Only S3's own throttling promises the write was not applied;
            // another 503 (a load balancer's, after forwarding) may come
            // after it was.
            (Op::Write, answered(503, None), "unknown"),
            (
                Op::Write,
                answered(503, Some("ServiceUnavailable")),
                "unknown",
            ),
            (Op::Read, answered(503, None), "backend retryable=true"),
            (
                Op::Write,
                answered(408, Some("RequestTimeout")),
                "backend retryable=true",
            ),
            (Op::Write, answered(408, None), "unknown"),
            (Op::Write, answered(500, Some("InternalError")), "unknown"),
            (
                Op::Read,
                answered(500, Some("InternalError")),
                "backend retryable=true",
            ),
        ];
        for (op, err, want) in cases {
            let what = format!(
                "{op:?} {:?}",
                err.raw_response().map(|r| r.status().as_u16())
            );
            assert_eq!(classify(op, "b", "k", err).describe(), want, "{what}");
        }
    }

    #[test]
    fn a_write_that_may_have_been_sent_is_an_unknown_outcome() {
        use std::io::ErrorKind;
        let timeout = || SdkError::<PutObjectError>::timeout_error("deadline");
        assert_eq!(
            classify(Op::Write, "b", "k", timeout()).describe(),
            "unknown"
        );
        assert_eq!(
            classify(Op::Head, "b", "k", timeout()).describe(),
            "backend retryable=true"
        );
        assert_eq!(
            classify(Op::Write, "b", "k", io(ErrorKind::ConnectionReset)).describe(),
            "unknown"
        );
        assert_eq!(
            classify(Op::Read, "b", "k", io(ErrorKind::ConnectionReset)).describe(),
            "backend retryable=true"
        );
        // Unreachable may come after the request went out (an ICMP error
        // on a retransmission): not proof that nothing was sent.
        assert_eq!(
            classify(Op::Write, "b", "k", io(ErrorKind::HostUnreachable)).describe(),
            "unknown"
        );
        // Refused: nothing was sent, so even a write may be retried.
        assert_eq!(
            classify(Op::Write, "b", "k", io(ErrorKind::ConnectionRefused)).describe(),
            "backend retryable=true"
        );
        let built = SdkError::<PutObjectError>::construction_failure("bad input");
        assert_eq!(
            classify(Op::Write, "b", "k", built).describe(),
            "backend retryable=false"
        );
    }

    #[test]
    fn the_sdk_error_is_kept_as_the_source() {
        let Failure::Error(e) = classify(Op::Write, "b", "k", answered(403, Some("AccessDenied")))
        else {
            panic!("an error");
        };
        let source = std::error::Error::source(&e).expect("chained");
        assert!(
            format!("{}", aws_sdk_s3::error::DisplayErrorContext(source)).contains("AccessDenied"),
            "{e:?}"
        );
    }
}
