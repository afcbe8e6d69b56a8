//! What the Redis tests share.
#![allow(dead_code)] // each test binary uses its own part

/// A plain connection to `url`, to look at the server behind the issuer's
/// back.
pub(crate) async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A lease on `resource` that must be granted at once, released again;
/// returns it (its token, to compare).
pub(crate) async fn grant_once(
    issuer: &fencing_redis::RedisIssuer,
    resource: &str,
    ttl: std::time::Duration,
) -> fencing_core::Lease {
    use fencing_core::{LeaseRequest, TokenIssuer};
    let lease = issuer
        .try_acquire(&LeaseRequest::new(resource, ttl))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{resource} is free"));
    issuer.release(&lease).await.unwrap();
    lease
}
