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

/// `args` as one command on the append-only Redis
/// (`FENCING_REDIS_AOF_URL`), behind the issuer's back.
pub(crate) async fn aof<T: redis::FromRedisValue>(args: &[&str]) -> T {
    let url = fencing_harness::env::REDIS_AOF.endpoint();
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query_async(&mut raw(&url).await)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// An issuer with `layout` on the append-only Redis, under a prefix of
/// the test's own; `None` if that server is skipped.
pub(crate) async fn on_aof(layout: fencing_redis::Layout) -> Option<fencing_redis::RedisIssuer> {
    use fencing_core::Error;
    use fencing_harness::env::REDIS_AOF;
    if REDIS_AOF.skipped() {
        return None;
    }
    match fencing_redis::RedisConfig::new(REDIS_AOF.endpoint())
        .with_layout(layout)
        .with_prefix(format!("{}:", fencing_testkit::unique_prefix()))
        .connect_issuer()
        .await
    {
        Ok(issuer) => Some(issuer),
        Err(e @ Error::Backend { .. }) => REDIS_AOF.unavailable(&e),
        Err(e) => panic!("{} at {}: {e}", REDIS_AOF.name, REDIS_AOF.endpoint()),
    }
}
