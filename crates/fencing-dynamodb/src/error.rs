//! The one place DynamoDB failures become [`fencing_core::Error`]s.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use fencing_aws::Unanswered;
use fencing_core::Error;
use fencing_core::adapter::Call;

pub(crate) const NAME: &str = "dynamodb";

/// Error codes that mean the request was refused before it was applied and
/// that trying again later may work (throttling, a transaction holding the
/// item).
const NOT_APPLIED_RETRYABLE: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TransactionConflictException",
    "LimitExceededException",
];

/// Error codes of credentials the service does not accept.
const UNAUTHENTICATED: &[&str] = &[
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "MissingAuthenticationTokenException",
    "ExpiredTokenException",
    "InvalidClientTokenId",
];

/// Maps an SDK failure of `call`. A conditional-check failure is not an
/// error here: the store reads the stored mark from it first.
///
/// A write whose answer was lost (a timeout, a reset after sending, a 5xx
/// that does not promise "not applied", a 4xx without DynamoDB's error
/// code, an unreadable answer) is
/// [`Error::OutcomeUnknown`]; the SDK does not retry writes (see
/// [`crate::DynamoStore`]), so nothing was silently sent twice.
pub(crate) fn map_error<E>(err: SdkError<E>, call: Call<'_>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let fail = |retryable: bool, err: SdkError<E>| Error::backend(NAME, retryable, err);
    let unknown = |err: SdkError<E>| Error::outcome_unknown(NAME, call.name.to_owned(), err);
    match fencing_aws::unanswered(&err, call.write) {
        Some(Unanswered::NotApplied { retryable }) => return fail(retryable, err),
        Some(Unanswered::Tls) => return Error::tls(NAME, err),
        Some(Unanswered::MayHaveApplied) => return unknown(err),
        None => {}
    }
    match &err {
        // An answer came back that the SDK could not read.
        SdkError::ResponseError(_) if call.write => unknown(err),
        SdkError::ResponseError(_) => fail(true, err),
        SdkError::ServiceError(service) => {
            let code = service.err().code().unwrap_or_default();
            let status = service.raw().status().as_u16();
            if UNAUTHENTICATED.contains(&code) {
                Error::unauthenticated(NAME, err)
            } else if NOT_APPLIED_RETRYABLE.contains(&code) {
                fail(true, err)
            } else if status >= 500 && call.write {
                // InternalServerError, ServiceUnavailable: may follow an
                // applied write.
                unknown(err)
            } else if code.is_empty() && call.write {
                // DynamoDB names every refusal; a 4xx without a code came
                // from something else on the way (a proxy, a gateway),
                // which may have made it up after forwarding the write.
                unknown(err)
            } else {
                // A missing table (ResourceNotFoundException), access
                // denied, a validation error: not applied, not retryable.
                fail(status >= 500, err)
            }
        }
        _ if call.write => unknown(err),
        _ => fail(true, err),
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::config::http::HttpResponse;
    use aws_sdk_dynamodb::error::{ConnectorError, ErrorMetadata};
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;

    use super::*;

    fn answered(status: u16, code: &str) -> SdkError<UpdateItemError> {
        let meta = ErrorMetadata::builder().code(code).build();
        let raw = HttpResponse::new(status.try_into().expect("a status"), "".into());
        SdkError::service_error(UpdateItemError::generic(meta), raw)
    }

    fn io(kind: std::io::ErrorKind) -> SdkError<UpdateItemError> {
        SdkError::dispatch_failure(ConnectorError::io(Box::new(std::io::Error::from(kind))))
    }

    fn kind(e: &Error) -> String {
        match e {
            Error::OutcomeUnknown { .. } => "unknown".into(),
            Error::Unauthenticated { .. } => "unauthenticated".into(),
            Error::Tls { .. } => "tls".into(),
            Error::Backend { retryable, .. } => format!("backend retryable={retryable}"),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn service_answers() {
        let w = Call::write("put");
        let r = Call::read("get");
        let cases = [
            (
                w,
                answered(400, "ResourceNotFoundException"),
                "backend retryable=false",
            ),
            (
                w,
                answered(400, "ValidationException"),
                "backend retryable=false",
            ),
            (
                w,
                answered(400, "ThrottlingException"),
                "backend retryable=true",
            ),
            (
                w,
                answered(400, "ProvisionedThroughputExceededException"),
                "backend retryable=true",
            ),
            (
                w,
                answered(400, "TransactionConflictException"),
                "backend retryable=true",
            ),
            (
                w,
                answered(400, "UnrecognizedClientException"),
                "unauthenticated",
            ),
            (
                r,
                answered(400, "InvalidSignatureException"),
                "unauthenticated",
            ),
            (w, answered(500, "InternalServerError"), "unknown"),
            (
                r,
                answered(500, "InternalServerError"),
                "backend retryable=true",
            ),
            (w, answered(503, "ServiceUnavailable"), "unknown"),
        ];
        for (call, err, want) in cases {
            assert_eq!(kind(&map_error(err, call)), want, "{}", call.name);
        }
    }

    /// A 4xx without a DynamoDB error code did not come from DynamoDB's
    /// refusal of the request: a proxy may have made it up after
    /// forwarding the write.
    #[test]
    fn a_code_less_4xx_to_a_write_is_an_unknown_outcome() {
        let codeless = |status: u16| {
            let raw = HttpResponse::new(status.try_into().expect("a status"), "".into());
            let meta = ErrorMetadata::builder().build();
            SdkError::service_error(UpdateItemError::generic(meta), raw)
        };
        let w = Call::write("put");
        let r = Call::read("get");
        for status in [400, 403, 413, 429] {
            assert_eq!(kind(&map_error(codeless(status), w)), "unknown", "{status}");
            assert_eq!(
                kind(&map_error(codeless(status), r)),
                "backend retryable=false",
                "{status}"
            );
        }
    }

    #[test]
    fn a_write_whose_answer_was_lost_is_an_unknown_outcome() {
        use std::io::ErrorKind;
        let w = Call::write("put");
        let r = Call::read("get");
        let timeout = || SdkError::<UpdateItemError>::timeout_error("deadline");
        assert_eq!(kind(&map_error(timeout(), w)), "unknown");
        assert_eq!(kind(&map_error(timeout(), r)), "backend retryable=true");
        assert_eq!(
            kind(&map_error(io(ErrorKind::ConnectionReset), w)),
            "unknown"
        );
        assert_eq!(
            kind(&map_error(io(ErrorKind::ConnectionReset), r)),
            "backend retryable=true"
        );
        assert_eq!(
            kind(&map_error(io(ErrorKind::ConnectionRefused), w)),
            "backend retryable=true"
        );
        let built = SdkError::<UpdateItemError>::construction_failure("bad input");
        assert_eq!(kind(&map_error(built, w)), "backend retryable=false");
    }
}
