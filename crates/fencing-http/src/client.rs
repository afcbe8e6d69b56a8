//! Client side: attach a lease's resource and token to outgoing requests.

use fencing_core::{FencingToken, Lease};
use http::header::InvalidHeaderValue;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::{RESOURCE_HEADER, TOKEN_HEADER};

/// Sets `Fencing-Resource` and `Fencing-Token` (replacing any earlier
/// values) for `resource` and `token`.
///
/// # Errors
/// The resource contains a control character; nothing is inserted.
/// (Other text, UTF-8 included, is sent as its bytes; the layer reads it
/// back as UTF-8.)
///
/// # Example
/// ```
/// use fencing_core::FencingToken;
/// let mut headers = http::HeaderMap::new();
/// fencing_http::insert_headers(&mut headers, "orders/7", FencingToken::new(34)).unwrap();
/// assert_eq!(headers["fencing-token"], "34");
/// assert_eq!(headers["fencing-resource"], "orders/7");
/// ```
pub fn insert_headers(
    headers: &mut HeaderMap,
    resource: &str,
    token: FencingToken,
) -> Result<(), InvalidHeaderValue> {
    let resource = HeaderValue::from_str(resource)?;
    headers.insert(HeaderName::from_static(RESOURCE_HEADER), resource);
    headers.insert(
        HeaderName::from_static(TOKEN_HEADER),
        HeaderValue::from(token.get()),
    );
    Ok(())
}

/// [`insert_headers`] with the lease's resource and token.
///
/// # Errors
/// See [`insert_headers`].
pub fn insert_lease_headers(
    headers: &mut HeaderMap,
    lease: &Lease,
) -> Result<(), InvalidHeaderValue> {
    insert_headers(headers, lease.resource(), lease.token())
}

/// Attaching the lease to a [`reqwest::RequestBuilder`] (feature `reqwest`).
///
/// ```no_run
/// # async fn demo(lease: fencing_core::Lease) -> Result<(), reqwest::Error> {
/// use fencing_http::RequestBuilderExt;
/// reqwest::Client::new()
///     .put("http://127.0.0.1:8080/orders/7")
///     .fencing_lease(&lease)
///     .body("paid")
///     .send()
///     .await?;
/// # Ok(()) }
/// ```
#[cfg(feature = "reqwest")]
pub trait RequestBuilderExt: Sized {
    /// Sets `Fencing-Resource: resource` and `Fencing-Token: token`. A
    /// resource that is not a valid header value makes `send` fail.
    fn fencing(self, resource: &str, token: FencingToken) -> Self;

    /// [`fencing`](Self::fencing) with the lease's resource and token.
    fn fencing_lease(self, lease: &Lease) -> Self {
        self.fencing(lease.resource(), lease.token())
    }
}

#[cfg(feature = "reqwest")]
impl RequestBuilderExt for reqwest::RequestBuilder {
    fn fencing(self, resource: &str, token: FencingToken) -> Self {
        self.header(RESOURCE_HEADER, resource)
            .header(TOKEN_HEADER, token.get())
    }
}

/// Sets the `fencing-resource` and `fencing-token` gRPC metadata (feature
/// `tonic`), which the layer reads as headers on the server.
///
/// # Errors
/// The resource contains a control character; nothing is inserted.
///
/// # Example
/// ```
/// # use fencing_core::FencingToken;
/// let mut request = tonic::Request::new(());
/// fencing_http::insert_metadata(request.metadata_mut(), "orders/7", FencingToken::new(34)).unwrap();
/// assert_eq!(request.metadata().get("fencing-token").unwrap(), "34");
/// ```
#[cfg(feature = "tonic")]
pub fn insert_metadata(
    metadata: &mut tonic::metadata::MetadataMap,
    resource: &str,
    token: FencingToken,
) -> Result<(), tonic::metadata::errors::InvalidMetadataValue> {
    use tonic::metadata::AsciiMetadataValue;
    let resource: AsciiMetadataValue = resource.parse()?;
    metadata.insert(RESOURCE_HEADER, resource);
    metadata.insert(TOKEN_HEADER, AsciiMetadataValue::from(token.get()));
    Ok(())
}

/// Attaching the lease to a [`tonic::Request`] (feature `tonic`).
#[cfg(feature = "tonic")]
pub trait RequestExt: Sized {
    /// Sets the `fencing-resource` and `fencing-token` metadata.
    ///
    /// # Errors
    /// See [`insert_metadata`].
    fn with_fencing(
        self,
        resource: &str,
        token: FencingToken,
    ) -> Result<Self, tonic::metadata::errors::InvalidMetadataValue>;

    /// [`with_fencing`](Self::with_fencing) with the lease's resource and token.
    ///
    /// # Errors
    /// See [`insert_metadata`].
    fn with_lease(
        self,
        lease: &Lease,
    ) -> Result<Self, tonic::metadata::errors::InvalidMetadataValue> {
        self.with_fencing(lease.resource(), lease.token())
    }
}

#[cfg(feature = "tonic")]
impl<T> RequestExt for tonic::Request<T> {
    fn with_fencing(
        mut self,
        resource: &str,
        token: FencingToken,
    ) -> Result<Self, tonic::metadata::errors::InvalidMetadataValue> {
        insert_metadata(self.metadata_mut(), resource, token)?;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_replace_earlier_values_and_refuse_bad_resources() {
        let mut headers = HeaderMap::new();
        headers.append(TOKEN_HEADER, HeaderValue::from_static("1"));
        insert_headers(&mut headers, "a/b", FencingToken::new(u64::MAX)).unwrap();
        assert_eq!(headers.get_all(TOKEN_HEADER).iter().count(), 1);
        assert_eq!(headers[TOKEN_HEADER], u64::MAX.to_string().as_str());
        let mut untouched = HeaderMap::new();
        assert!(insert_headers(&mut untouched, "bad\nresource", FencingToken::new(1)).is_err());
        assert!(untouched.is_empty());
    }

    #[cfg(feature = "tonic")]
    #[test]
    fn tonic_requests_carry_the_lease_in_metadata() {
        let request = tonic::Request::new(())
            .with_fencing("jobs/nightly", FencingToken::new(9))
            .unwrap();
        let headers = request.metadata().clone().into_headers();
        assert_eq!(headers[RESOURCE_HEADER], "jobs/nightly");
        assert_eq!(headers[TOKEN_HEADER], "9");
        assert!(
            tonic::Request::new(())
                .with_fencing("a\nb", FencingToken::new(1))
                .is_err()
        );
    }
}
