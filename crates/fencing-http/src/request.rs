//! Reading a fenced request: its resource, its token, the store key.

use fencing_core::FencingToken;
use http::HeaderName;
use http::request::Parts;

use crate::config::{Config, ResourceSource};
use crate::problem::{Problem, ProblemKind};

/// What a fenced request was admitted with; the inner service finds it in
/// the request's extensions (`req.extensions().get::<Admission>()`, or
/// axum's `Extension<Admission>`).
///
/// Use the token to fence the handler's own writes in the same transaction
/// (e.g. `fencing_sql::fence_transaction(&mut tx, &tables, &admission.key,
/// admission.token)`), so that a request admitted here cannot land a write
/// after a higher token's: see the crate docs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Admission {
    /// The resource, as the request named it.
    pub resource: String,
    /// The store key that was fenced (the layer's prefix + the resource).
    pub key: String,
    /// The token the request carried; the store's mark for `key` was at
    /// most this when it was admitted, and is at least this now.
    pub token: FencingToken,
}

/// Reads the resource and token of a fenced request, or the answer to give.
pub(crate) fn admission(config: &Config, parts: &Parts) -> Result<Admission, Problem> {
    let resource = match &config.resource {
        ResourceSource::Header(name) => resource_header(parts, name)?,
        ResourceSource::Fixed(resource) => resource.clone(),
        ResourceSource::Extractor(extract) => extract(parts).ok_or_else(|| {
            Problem::new(
                ProblemKind::MissingResource,
                "this request names no fencing resource",
            )
        })?,
    };
    if resource.is_empty() {
        return Err(Problem::new(
            ProblemKind::InvalidResource,
            "the fencing resource is empty",
        ));
    }
    let token = token_header(parts, &config.token_header)
        .map_err(|problem| problem.with_resource(&resource))?;
    let limits = config.store.limits();
    let key = format!("{}{resource}", config.key_prefix);
    let bad_key = |message: String| {
        Problem::new(ProblemKind::InvalidResource, message).with_resource(&resource)
    };
    limits
        .check_key(&key)
        .map_err(|e| bad_key(format!("the store refuses the resource as a key: {e}")))?;
    if token > limits.max_token {
        return Err(Problem {
            presented: Some(token),
            ..Problem::new(
                ProblemKind::TokenOutOfRange,
                format!(
                    "token {token} is above {}, the highest this store can hold",
                    limits.max_token
                ),
            )
            .with_resource(&resource)
        });
    }
    Ok(Admission {
        resource,
        key,
        token,
    })
}

/// The one value of `name`, as text.
fn single<'a>(parts: &'a Parts, name: &HeaderName) -> Result<Option<&'a str>, String> {
    let mut values = parts.headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(format!("the {name} header is sent more than once"));
    }
    // UTF-8, not only ASCII: what the client helpers send for any resource
    // without control characters.
    std::str::from_utf8(value.as_bytes())
        .map(|v| Some(v.trim()))
        .map_err(|_| format!("the {name} header is not UTF-8 text"))
}

fn resource_header(parts: &Parts, name: &HeaderName) -> Result<String, Problem> {
    match single(parts, name) {
        Ok(Some(resource)) => Ok(resource.to_owned()),
        Ok(None) => Err(Problem::new(
            ProblemKind::MissingResource,
            format!("send the fenced resource in the {name} header"),
        )),
        Err(message) => Err(Problem::new(ProblemKind::InvalidResource, message)),
    }
}

fn token_header(parts: &Parts, name: &HeaderName) -> Result<FencingToken, Problem> {
    let text = match single(parts, name) {
        Ok(Some(text)) => text,
        Ok(None) => {
            return Err(Problem::new(
                ProblemKind::MissingToken,
                format!("send the fencing token of your lease in the {name} header"),
            ));
        }
        Err(message) => return Err(Problem::new(ProblemKind::MalformedToken, message)),
    };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Problem::new(
            ProblemKind::MalformedToken,
            format!("the {name} header must be a decimal integer, got {text:?}"),
        ));
    }
    text.parse::<u64>().map(FencingToken::new).map_err(|_| {
        Problem::new(
            ProblemKind::TokenOutOfRange,
            format!("the {name} header {text} is above {}", u64::MAX),
        )
    })
}
