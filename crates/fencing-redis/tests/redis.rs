//! The issuer suite of `fencing_testkit` (the zombie scenario and the
//! history checker included) on a real Redis with `appendonly yes`
//! (`FENCING_REDIS_AOF_URL`), and the refusal of a Redis without
//! persistence (`FENCING_REDIS_URL`).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{aof, grant_once, on_aof, raw};
use fencing_core::{Error, FencingToken, LeaseRequest, TokenIssuer};
use fencing_harness::env::{REDIS, REDIS_AOF, Server};
use fencing_redis::{Durability, Layout, RedisConfig, RedisIssuer};
use fencing_testkit::issuer::IssuerProfile;

async fn connect(server: &Server, durability: Durability) -> Option<RedisIssuer> {
    if server.skipped() {
        return None;
    }
    match RedisConfig::new(server.endpoint())
        .with_durability(durability)
        .with_prefix(format!("{}:", fencing_testkit::unique_prefix()))
        .connect_issuer()
        .await
    {
        Ok(issuer) => Some(issuer),
        Err(e @ Error::UnsafeConfiguration { .. }) => {
            panic!("{} at {}: {e}", server.name, server.endpoint())
        }
        Err(e) => server.unavailable(&e),
    }
}

async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
    Some(Arc::new(connect(&REDIS_AOF, Durability::Required).await?))
}

fn profile() -> IssuerProfile {
    IssuerProfile::with_ttl(Duration::from_millis(300))
}

fencing_testkit::issuer_conformance!(issuer, profile());

#[tokio::test]
async fn a_redis_without_persistence_is_refused_unless_accepted() {
    if REDIS.skipped() {
        return;
    }
    match RedisConfig::new(REDIS.endpoint()).connect_issuer().await {
        Err(Error::UnsafeConfiguration {
            backend: "redis",
            reason,
        }) => {
            assert!(reason.contains("appendonly"), "{reason}");
        }
        Err(e @ Error::Backend { .. }) => REDIS.unavailable(&e),
        other => panic!("a Redis without an append-only file must be refused, got {other:?}"),
    }
    // Opting in works, and says what it risks in the docs.
    let volatile = connect(&REDIS, Durability::AcceptVolatileCounter)
        .await
        .expect("not skipped");
    let lease = volatile
        .acquire(
            &LeaseRequest::new("r", Duration::from_secs(5)),
            Duration::from_secs(1),
        )
        .await
        .expect("acquire on an accepted volatile Redis");
    volatile.release(&lease).await.unwrap();
}

#[tokio::test]
async fn raise_floor_moves_tokens_above_it_and_never_lowers() {
    let Some(issuer) = connect(&REDIS_AOF, Durability::Required).await else {
        return;
    };
    let ttl = Duration::from_secs(5);
    let first = grant_once(&issuer, "migrated", ttl).await.token().get();
    issuer
        .raise_floor("migrated", (first + 1_000_000).into())
        .await
        .unwrap();
    issuer.raise_floor("migrated", 10.into()).await.unwrap(); // a floor never lowers
    let next = issuer
        .try_acquire(&LeaseRequest::new("migrated", ttl))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.token(), (first + 1_000_001).into());
    // Lua numbers are doubles; the counter stays exact above 2^53.
    let big = (1u64 << 60) + 1;
    issuer.release(&next).await.unwrap();
    issuer.raise_floor("migrated", big.into()).await.unwrap();
    let huge = issuer
        .try_acquire(&LeaseRequest::new("migrated", ttl))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(huge.token().get(), big + 1);
}

#[tokio::test]
async fn an_unreachable_redis_is_a_retryable_backend_error() {
    match RedisConfig::new("redis://127.0.0.1:1")
        .connect_issuer()
        .await
    {
        Err(
            e @ Error::Backend {
                retryable: true, ..
            },
        ) => assert!(e.to_string().contains("redis")),
        other => panic!("expected a retryable backend error, got {other:?}"),
    }
    assert!(matches!(
        RedisConfig::new("http://nope").connect_issuer().await,
        Err(Error::InvalidInput { .. })
    ));
}

/// A connection manager of the caller's, with the config's prefix.
#[tokio::test]
async fn issuer_on_a_callers_connection_manager_takes_the_configs_prefix() {
    if REDIS_AOF.skipped() {
        return;
    }
    let client = redis::Client::open(REDIS_AOF.endpoint()).unwrap();
    let manager = redis::aio::ConnectionManager::new(client).await.unwrap();
    let prefix = format!("{}:", fencing_testkit::unique_prefix());
    let issuer = RedisConfig::new("redis://unused")
        .with_prefix(prefix.clone())
        .issuer_on(manager)
        .await
        .expect("an append-only Redis");
    assert_eq!(issuer.prefix(), prefix);
    let lease = grant_once(&issuer, "r", Duration::from_secs(5)).await;
    let fence: Option<u64> = redis::cmd("GET")
        .arg(format!("{prefix}r:fence"))
        .query_async(&mut raw(&REDIS_AOF.endpoint()).await)
        .await
        .unwrap();
    assert_eq!(fence, Some(lease.token().get()));
}

/// The counter key of `resource` on `issuer`, to delete it by hand.
fn counter_key(issuer: &RedisIssuer, resource: &str) -> String {
    let name = format!("{}{resource}", issuer.prefix());
    match issuer.layout() {
        Layout::Redisson => format!("redisson_lock_token:{{{name}}}"),
        _ => format!("{name}:fence"),
    }
}

/// An operator's `DEL` (or a `FLUSHDB` on a staging Redis) takes the
/// counter: the next grant must still be above every token granted before,
/// on every layout, and a low floor on the missing counter must not bring
/// it back down.
#[tokio::test]
async fn a_counter_deleted_by_hand_grants_above_every_earlier_token() {
    let ttl = Duration::from_secs(5);
    for layout in [Layout::Fencing, Layout::SetNx, Layout::Redisson] {
        let Some(issuer) = on_aof(layout).await else {
            return;
        };
        let resource = fencing_testkit::unique_name("deleted");
        let mut highest = FencingToken::ZERO;
        for _ in 0..3 {
            let token = grant_once(&issuer, &resource, ttl).await.token();
            assert!(token > highest, "{layout:?}: {token} after {highest}");
            highest = token;
        }
        let counter = counter_key(&issuer, &resource);
        let _: i64 = aof(&["DEL", &counter]).await;
        let token = grant_once(&issuer, &resource, ttl).await.token();
        assert!(
            token > highest,
            "{layout:?}: after DEL {counter} the next token was {token}, below the {highest} granted before"
        );
        highest = token;

        let _: i64 = aof(&["DEL", &counter]).await;
        issuer
            .raise_floor(&resource, FencingToken::new(2))
            .await
            .unwrap();
        let token = grant_once(&issuer, &resource, ttl).await.token();
        assert!(
            token > highest,
            "{layout:?}: a floor of 2 on a deleted counter brought the next token down to {token} (granted before: {highest})"
        );
    }
}
