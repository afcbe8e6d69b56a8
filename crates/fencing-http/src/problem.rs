//! The answers the layer gives instead of calling the inner service: RFC 9457
//! problem details (`application/problem+json`), or a gRPC status for a gRPC
//! request.
//!
//! | kind | HTTP | gRPC | when |
//! | --- | --- | --- | --- |
//! | [`StaleToken`](ProblemKind::StaleToken) | 409 | `ABORTED` (10) | the store has accepted a higher token for the resource |
//! | [`MissingToken`](ProblemKind::MissingToken) | 428 | `FAILED_PRECONDITION` (9) | no token header |
//! | [`MissingResource`](ProblemKind::MissingResource) | 428 | `FAILED_PRECONDITION` (9) | no resource header (or the extractor found none) |
//! | [`MalformedToken`](ProblemKind::MalformedToken) | 400 | `INVALID_ARGUMENT` (3) | not a decimal `u64`, or sent twice |
//! | [`TokenOutOfRange`](ProblemKind::TokenOutOfRange) | 400 | `INVALID_ARGUMENT` (3) | above `u64::MAX` or the store's [`Limits::max_token`](fencing_core::Limits) |
//! | [`InvalidResource`](ProblemKind::InvalidResource) | 400 | `INVALID_ARGUMENT` (3) | empty, sent twice, not UTF-8, or a key the store refuses |
//! | [`Unavailable`](ProblemKind::Unavailable) | 503 + `Retry-After` | `UNAVAILABLE` (14) | a store failure that may pass (retryable, or an unknown outcome: `fence` is idempotent), or the in-process gate's wait ran out |
//! | [`StoreError`](ProblemKind::StoreError) | 500 | `INTERNAL` (13) | any other store failure |
//!
//! The body of a 409, for a client that presented token 33 after 34 was
//! accepted:
//!
//! ```json
//! {
//!   "type": "urn:fencing:problem:stale-token",
//!   "title": "Stale fencing token",
//!   "status": 409,
//!   "detail": "the store has already accepted token 34 for \"orders/7\"; token 33 is stale: take the lease again",
//!   "resource": "orders/7",
//!   "presented": 33,
//!   "current": 34
//! }
//! ```
//!
//! `type` is an identifier, not a link. Tokens are JSON numbers (exact
//! `u64`; a JavaScript client loses precision above 2^53).

use bytes::Bytes;
use fencing_core::{Error, FencingToken};
use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};
use serde_json::{Map, Value, json};

/// The media type of the bodies the layer writes.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// What went wrong: each kind has one `type` URI, title and status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProblemKind {
    /// 409: the store has accepted a higher token for the resource.
    StaleToken,
    /// 428: the request carries no token.
    MissingToken,
    /// 428: the request names no resource.
    MissingResource,
    /// 400: the token is not a decimal `u64`, or was sent more than once.
    MalformedToken,
    /// 400: the token is above `u64::MAX` or what the store can hold.
    TokenOutOfRange,
    /// 400: the resource is empty, repeated, not UTF-8, or refused by the store.
    InvalidResource,
    /// 503: the store (or the in-process gate) could not decide now; retrying
    /// the same request is safe.
    Unavailable,
    /// 500: the store failed in a way a retry will not fix.
    StoreError,
}

impl ProblemKind {
    /// The `type` member.
    pub fn type_uri(self) -> &'static str {
        match self {
            Self::StaleToken => "urn:fencing:problem:stale-token",
            Self::MissingToken => "urn:fencing:problem:missing-token",
            Self::MissingResource => "urn:fencing:problem:missing-resource",
            Self::MalformedToken => "urn:fencing:problem:malformed-token",
            Self::TokenOutOfRange => "urn:fencing:problem:token-out-of-range",
            Self::InvalidResource => "urn:fencing:problem:invalid-resource",
            Self::Unavailable => "urn:fencing:problem:unavailable",
            Self::StoreError => "urn:fencing:problem:store-error",
        }
    }

    /// The `title` member.
    pub fn title(self) -> &'static str {
        match self {
            Self::StaleToken => "Stale fencing token",
            Self::MissingToken => "Fencing token required",
            Self::MissingResource => "Fencing resource required",
            Self::MalformedToken => "Malformed fencing token",
            Self::TokenOutOfRange => "Fencing token out of range",
            Self::InvalidResource => "Invalid fencing resource",
            Self::Unavailable => "Fencing check unavailable",
            Self::StoreError => "Fencing store error",
        }
    }

    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        match self {
            Self::StaleToken => StatusCode::CONFLICT,
            Self::MissingToken | Self::MissingResource => StatusCode::PRECONDITION_REQUIRED,
            Self::MalformedToken | Self::TokenOutOfRange | Self::InvalidResource => {
                StatusCode::BAD_REQUEST
            }
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::StoreError => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The gRPC status code for a gRPC request.
    pub fn grpc_code(self) -> u8 {
        match self {
            Self::StaleToken => 10,                          // ABORTED
            Self::MissingToken | Self::MissingResource => 9, // FAILED_PRECONDITION
            Self::MalformedToken | Self::TokenOutOfRange | Self::InvalidResource => 3, // INVALID_ARGUMENT
            Self::Unavailable => 14, // UNAVAILABLE
            Self::StoreError => 13,  // INTERNAL
        }
    }
}

/// A refusal: what the layer answers instead of calling the inner service.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Problem {
    /// What went wrong.
    pub kind: ProblemKind,
    /// A sentence for the client: what happened and what to do.
    pub detail: String,
    /// The resource, when it was read.
    pub resource: Option<String>,
    /// The token the request carried, when it was read.
    pub presented: Option<FencingToken>,
    /// The store's mark, for a stale token.
    pub current: Option<FencingToken>,
}

impl Problem {
    pub(crate) fn new(kind: ProblemKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
            resource: None,
            presented: None,
            current: None,
        }
    }

    pub(crate) fn with_resource(mut self, resource: &str) -> Self {
        self.resource = Some(resource.to_owned());
        self
    }

    /// The answer to a failed `fence(key, token)` on behalf of `resource`.
    pub(crate) fn from_store(err: &Error, resource: &str, token: FencingToken) -> Self {
        let problem = match err {
            Error::StaleToken { current, .. } => Self {
                current: Some(*current),
                ..Self::new(
                    ProblemKind::StaleToken,
                    format!(
                        "the store has already accepted token {current} for {resource:?}; token {token} is stale: take the lease again"
                    ),
                )
            },
            Error::TokenOutOfRange { max, .. } => Self::new(
                ProblemKind::TokenOutOfRange,
                format!("token {token} is above {max}, the highest this store can hold"),
            ),
            Error::InvalidInput { message } => Self::new(ProblemKind::InvalidResource, message),
            e if e.is_retryable() || matches!(e, Error::OutcomeUnknown { .. }) => Self::new(
                ProblemKind::Unavailable,
                format!("the fencing store could not check the token now ({e}); retry the request"),
            ),
            e => Self::new(
                ProblemKind::StoreError,
                format!("the fencing store failed ({e})"),
            ),
        };
        Self {
            presented: Some(token),
            ..problem.with_resource(resource)
        }
    }

    /// The `application/problem+json` body.
    pub fn to_json(&self) -> Value {
        let mut body = Map::new();
        body.insert("type".into(), json!(self.kind.type_uri()));
        body.insert("title".into(), json!(self.kind.title()));
        body.insert("status".into(), json!(self.kind.status().as_u16()));
        body.insert("detail".into(), json!(self.detail));
        if let Some(resource) = &self.resource {
            body.insert("resource".into(), json!(resource));
        }
        if let Some(presented) = self.presented {
            body.insert("presented".into(), json!(presented.get()));
        }
        if let Some(current) = self.current {
            body.insert("current".into(), json!(current.get()));
        }
        Value::Object(body)
    }

    /// The HTTP response: the status, `Content-Type: application/problem+json`
    /// (and `Retry-After: 1` on a 503), the JSON body.
    pub fn to_http(&self) -> Response<Bytes> {
        let body = Bytes::from(self.to_json().to_string());
        let mut response = Response::new(body);
        *response.status_mut() = self.kind.status();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if self.kind == ProblemKind::Unavailable {
            headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }

    /// The gRPC "trailers-only" response: HTTP 200, `content-type:
    /// application/grpc`, `grpc-status` and a percent-encoded `grpc-message`
    /// (the detail), no body. A tonic client reads it as a `Status` with
    /// [`ProblemKind::grpc_code`].
    pub fn to_grpc(&self) -> Response<Bytes> {
        let mut response = Response::new(Bytes::new());
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert(
            "grpc-status",
            HeaderValue::from(u16::from(self.kind.grpc_code())),
        );
        if let Ok(message) = HeaderValue::from_str(&grpc_percent_encode(&self.detail)) {
            headers.insert("grpc-message", message);
        }
        response
    }
}

/// gRPC's `grpc-message` encoding: bytes outside printable ASCII, and `%`,
/// as `%XX`.
fn grpc_percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_token_names_both_tokens_and_the_resource() {
        let err = Error::StaleToken {
            key: "orders/7".into(),
            presented: FencingToken::new(33),
            current: FencingToken::new(34),
        };
        let problem = Problem::from_store(&err, "orders/7", FencingToken::new(33));
        assert_eq!(problem.kind, ProblemKind::StaleToken);
        let body = problem.to_json();
        assert_eq!(body["type"], "urn:fencing:problem:stale-token");
        assert_eq!(body["status"], 409);
        assert_eq!(body["presented"], 33);
        assert_eq!(body["current"], 34);
        assert_eq!(body["resource"], "orders/7");
        let response = problem.to_http();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(response.headers()[CONTENT_TYPE], PROBLEM_JSON);
    }

    #[test]
    fn store_failures_are_503_when_a_retry_may_pass_and_500_otherwise() {
        let token = FencingToken::new(1);
        let retryable = Error::backend("test", true, "connection reset");
        let unknown = Error::outcome_unknown("test", "fence", "timed out");
        let fatal = Error::backend("test", false, "permission denied");
        for (err, kind) in [
            (retryable, ProblemKind::Unavailable),
            (unknown, ProblemKind::Unavailable),
            (fatal, ProblemKind::StoreError),
        ] {
            let problem = Problem::from_store(&err, "r", token);
            assert_eq!(problem.kind, kind, "{err}");
        }
        let response = Problem::new(ProblemKind::Unavailable, "x").to_http();
        assert_eq!(response.headers()[RETRY_AFTER], "1");
    }

    #[test]
    fn grpc_answers_carry_the_status_and_an_encoded_message() {
        let response = Problem::new(ProblemKind::StaleToken, "100% stale: é").to_grpc();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["grpc-status"], "10");
        assert_eq!(response.headers()["grpc-message"], "100%25 stale: %C3%A9");
    }
}
