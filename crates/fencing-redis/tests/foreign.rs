//! A lock key that another client holds is held by a foreign holder: no
//! grant, `holder` says so, and nothing of it is overwritten or deleted.
//! The foreign records: redis-py's `Lock` (the real client, from PyPI:
//! `FENCING_PYTHON`, default the venv of `integration/services.sh`),
//! node-redlock's (the real client, from npm, run by Node.js), a
//! hand-written `SET NX` value, and a hash as Redisson's lock keeps, on the
//! append-only Redis (`FENCING_REDIS_AOF_URL`).

mod common;

use std::time::Duration;

use common::{aof, on_aof};
use fencing_core::{Error, FencingToken, LeaseRequest, TokenIssuer};
use fencing_harness::env::REDIS_AOF;
use fencing_harness::foreign;
use fencing_redis::{Layout, RedisIssuer};

const TTL: Duration = Duration::from_secs(10);

async fn connect() -> Option<RedisIssuer> {
    on_aof(Layout::Fencing).await
}

/// The lock and counter keys of `resource` (the lock at the name itself
/// with `layout=set-nx`).
fn keys(issuer: &RedisIssuer, resource: &str) -> (String, String) {
    let at = |what| format!("{}{resource}{what}", issuer.prefix());
    let lock = match issuer.layout() {
        Layout::SetNx => at(""),
        _ => at(":lock"),
    };
    (lock, at(":fence"))
}

/// What a foreign holder must look like: no grant (once, and waiting),
/// `holder` names a foreign holder without showing `secret`, and no token
/// was minted (the counter is still at `ours`, the last of our own).
async fn assert_foreign(
    issuer: &RedisIssuer,
    resource: &str,
    secret: &str,
    what: &str,
    ours: FencingToken,
) {
    let request = LeaseRequest::new(resource, TTL);
    let tried = issuer.try_acquire(&request).await;
    assert!(
        matches!(tried, Ok(None)),
        "{what}: try_acquire must find it held, got {tried:?}"
    );
    let waited = issuer.acquire(&request, Duration::from_millis(300)).await;
    assert!(
        matches!(waited, Err(Error::Timeout { .. })),
        "{what}: acquire must wait for it, got {waited:?}"
    );
    let holding = issuer.holder(resource).await;
    let holding = holding
        .unwrap_or_else(|e| panic!("{what}: holder: {e}"))
        .unwrap_or_else(|| panic!("{what}: holder says free"));
    let id = holding.holder.as_str();
    assert!(id.starts_with("foreign:"), "{what}: {id}");
    assert!(
        !id.contains(secret),
        "{what}: the holder shows the value: {id}"
    );
    assert_eq!(holding.token, FencingToken::ZERO, "{what}");
    let (_, fence) = keys(issuer, resource);
    let counter: Option<u64> = aof(&["GET", &fence]).await;
    let counter = counter.map_or(FencingToken::ZERO, FencingToken::new);
    assert_eq!(counter, ours, "{what}: a token was minted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_py_lock_is_a_foreign_holder_until_redis_py_releases_it() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("redis-py");
    let (lock, _) = keys(&issuer, &resource);
    let mut py = foreign::Client::redis_py(&REDIS_AOF.endpoint(), &lock).await;
    py.send("take").await;
    let token = py.line().await;

    assert_foreign(
        &issuer,
        &resource,
        &token,
        "redis-py's Lock",
        FencingToken::ZERO,
    )
    .await;
    let value: Option<String> = aof(&["GET", &lock]).await;
    assert_eq!(value.as_deref(), Some(token.as_str()), "its value changed");

    let waiter = issuer.clone();
    let request = LeaseRequest::new(&resource, TTL);
    let waiting =
        tokio::spawn(async move { waiter.acquire(&request, Duration::from_secs(20)).await });
    py.send("release").await;
    assert_eq!(py.line().await, "released");
    let lease = waiting
        .await
        .unwrap()
        .expect("granted once redis-py released");
    assert_eq!(
        issuer.holder(&resource).await.unwrap().unwrap().holder,
        *lease.holder()
    );
    issuer.release(&lease).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_written_set_nx_value_is_a_foreign_holder() {
    let Some(issuer) = connect().await else {
        return;
    };
    // node-redlock's and redis-py's random values; a `pid:name` value,
    // which has our separator but no token of ours; a zero token, which
    // we never grant.
    for value in ["9f3c2b1a7e6d4c5b8a9f0e1d2c3b4a59", "12345:worker-3", "0:x"] {
        let resource = fencing_testkit::unique_name("set-nx");
        let (lock, _) = keys(&issuer, &resource);
        let set: Option<String> = aof(&["SET", &lock, value, "NX", "PX", "60000"]).await;
        assert_eq!(set.as_deref(), Some("OK"));
        assert_foreign(&issuer, &resource, value, value, FencingToken::ZERO).await;
        let after: Option<String> = aof(&["GET", &lock]).await;
        assert_eq!(after.as_deref(), Some(value), "overwritten");
        let ttl: i64 = aof(&["PTTL", &lock]).await;
        assert!(ttl > 50_000, "{value}: its expiry was changed to {ttl} ms");
    }

    // One that expires: acquire waits until Redis removes it.
    let resource = fencing_testkit::unique_name("set-nx-expiring");
    let (lock, _) = keys(&issuer, &resource);
    let _: Option<String> = aof(&["SET", &lock, "redlock-value", "NX", "PX", "700"]).await;
    let lease = issuer
        .acquire(&LeaseRequest::new(&resource, TTL), Duration::from_secs(10))
        .await
        .expect("granted once the foreign value expired");
    // A counter made by this grant starts at Redis's clock in microseconds.
    assert!(lease.token().get() > 1_000_000_000_000_000, "{lease:?}");
    issuer.release(&lease).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_hash_is_a_foreign_holder() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("redisson");
    let (lock, _) = keys(&issuer, &resource);
    // Redisson's lock: a hash of `<client uuid>:<thread id>` to its hold
    // count, with the lease time as the key's TTL.
    let field = "8743c9c0-0795-4907-87fd-6c719a6b4586:1";
    let _: i64 = aof(&["HINCRBY", &lock, field, "1"]).await;
    let _: i64 = aof(&["PEXPIRE", &lock, "60000"]).await;

    assert_foreign(
        &issuer,
        &resource,
        field,
        "Redisson's hash",
        FencingToken::ZERO,
    )
    .await;
    let hash: Vec<String> = aof(&["HGETALL", &lock]).await;
    assert_eq!(hash, [field, "1"], "the hash changed");
}

/// node-redlock itself (npm: redlock 4 with ioredis, run by Node.js) and
/// our issuer take 20 turns on one key: each finds the other's lock held
/// and leaves it as it is; redlock's grants mint no token (it has none to
/// give, so `holder` shows token 0) and ours rise one by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_redlock_and_our_issuer_take_turns_excluding_each_other() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("redlock");
    let (lock, _) = keys(&issuer, &resource);
    let redlock = foreign::Client::redlock(&REDIS_AOF.endpoint(), &lock).await;
    take_turns(&issuer, &resource, "redlock", redlock).await;
}

/// redis-py's `Lock` (the real client) and our issuer: as redlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_and_our_issuer_take_turns_excluding_each_other() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("redis-py-turns");
    let (lock, _) = keys(&issuer, &resource);
    let redis_py = foreign::Client::redis_py(&REDIS_AOF.endpoint(), &lock).await;
    take_turns(&issuer, &resource, "redis-py", redis_py).await;
}

/// With `layout=set-nx` our record is at the lock name itself, where
/// redis-py's `Lock(NAME)` keeps its own: the two take turns on a name that
/// is not ours to choose (no `:lock` suffix), and our tokens still rise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_and_our_issuer_share_its_lock_name_with_layout_set_nx() {
    let Some(issuer) = on_aof(Layout::SetNx).await else {
        return;
    };
    let resource = fencing_testkit::unique_name("orders");
    let name = format!("{}{resource}", issuer.prefix());
    assert_eq!(keys(&issuer, &resource).0, name);
    let redis_py = foreign::Client::redis_py(&REDIS_AOF.endpoint(), &name).await;
    take_turns(&issuer, &resource, "redis-py", redis_py).await;
}

/// A resource named as another's counter is refused on that layout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_layout_set_nx_a_resource_named_as_a_counter_is_refused() {
    let Some(issuer) = on_aof(Layout::SetNx).await else {
        return;
    };
    let tried = issuer
        .try_acquire(&LeaseRequest::new("orders:fence", TTL))
        .await;
    assert!(
        matches!(&tried, Err(Error::InvalidInput { .. })),
        "{tried:?}"
    );
    let floor = issuer
        .raise_floor("orders:fence", FencingToken::new(5))
        .await;
    assert!(
        matches!(&floor, Err(Error::InvalidInput { .. })),
        "{floor:?}"
    );
}

/// The issuer suite of `fencing_testkit` on `layout=set-nx`.
mod set_nx {
    use std::sync::Arc;

    use fencing_core::TokenIssuer;
    use fencing_testkit::issuer::IssuerProfile;

    async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
        Some(Arc::new(super::on_aof(super::Layout::SetNx).await?))
    }

    fencing_testkit::issuer_conformance!(
        issuer,
        IssuerProfile::with_ttl(std::time::Duration::from_millis(300))
    );
}

/// 20 turns on `resource`, `who` (a foreign client in lines: `try`,
/// `take` printing its random value, `release`) and ours alternating.
async fn take_turns(issuer: &RedisIssuer, resource: &str, who: &str, mut client: foreign::Client) {
    let (lock, _) = keys(issuer, resource);
    let request = LeaseRequest::new(resource, TTL);
    let mut ours = FencingToken::ZERO;
    for turn in 0..20 {
        if turn % 2 == 1 {
            let lease = issuer.try_acquire(&request).await.unwrap();
            let lease = lease.unwrap_or_else(|| panic!("turn {turn}: {who} released it"));
            // The first grant starts the counter at Redis's clock.
            if ours != FencingToken::ZERO {
                assert_eq!(lease.token(), ours.checked_next().unwrap(), "turn {turn}");
            }
            ours = lease.token();
            client.send("try").await;
            assert_eq!(client.line().await, "busy", "{who} took a lock we hold");
            issuer.release(&lease).await.unwrap();
            continue;
        }
        client.send("take").await;
        let value = client.line().await;
        let what = format!("turn {turn}: {who}'s lock");
        assert_foreign(issuer, resource, &value, &what, ours).await;
        let kept: Option<String> = aof(&["GET", &lock]).await;
        assert_eq!(
            kept.as_deref(),
            Some(value.as_str()),
            "{who}'s value changed"
        );
        client.send("release").await;
        assert_eq!(client.line().await, "released");
    }
    client.send("done").await;
}

/// Our lease ended, and another client's lock took the key: renew and
/// release say the lease is lost, and leave the other's record alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_key_another_client_took_is_lost_not_an_error() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("taken");
    let (lock, _) = keys(&issuer, &resource);
    for (kind, write) in [
        ("hash", vec!["HSET", &lock, "uuid:1", "1"]),
        ("string", vec!["SET", &lock, "someone-else"]),
    ] {
        let lease = issuer
            .try_acquire(&LeaseRequest::new(&resource, TTL))
            .await
            .unwrap()
            .expect("free");
        let _: i64 = aof(&["DEL", &lock]).await; // as if it had expired
        let _: redis::Value = aof(&write).await;
        let renewed = issuer.renew(&lease).await;
        assert!(
            matches!(renewed, Err(Error::LeaseLost { .. })),
            "{kind}: renew: {renewed:?}"
        );
        let released = issuer.release(&lease).await;
        assert!(
            matches!(released, Err(Error::LeaseLost { .. })),
            "{kind}: release: {released:?}"
        );
        let kept: String = aof(&["TYPE", &lock]).await;
        assert_eq!(kept, kind, "the other client's record is gone");
        let _: i64 = aof(&["DEL", &lock]).await;
    }
}
