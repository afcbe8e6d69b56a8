//! `Layout::Redisson`: our issuer on Redisson's own lock, through the
//! issuer suite of `fencing_testkit` and beside Redisson. The Redisson side
//! is node-redisson (npm: Redisson's `RLock` ported to Node.js, its lock
//! scripts unchanged, run by `EVAL`; `integration/harness/foreign/redisson.js`),
//! on the append-only Redis of `integration/services.sh`
//! (`FENCING_REDIS_AOF_URL`).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{aof, on_aof};
use fencing_core::{Error, FencingToken, LeaseRequest, TokenIssuer};
use fencing_harness::env::REDIS_AOF;
use fencing_harness::foreign;
use fencing_redis::{Layout, RedisIssuer};
use fencing_testkit::issuer::IssuerProfile;

const TTL: Duration = Duration::from_secs(30);

async fn connect() -> Option<RedisIssuer> {
    on_aof(Layout::Redisson).await
}

async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
    Some(Arc::new(connect().await?))
}

fencing_testkit::issuer_conformance!(issuer, IssuerProfile::with_ttl(Duration::from_millis(300)));

/// Redisson's lock name for `resource`, and its token counter.
fn names(issuer: &RedisIssuer, resource: &str) -> (String, String) {
    let name = format!("{}{resource}", issuer.prefix());
    let counter = format!("redisson_lock_token:{{{name}}}");
    (name, counter)
}

async fn redisson(name: &str, fenced: bool) -> foreign::Client {
    foreign::Client::redisson(&REDIS_AOF.endpoint(), name, fenced, TTL).await
}

/// Redisson's plain `RLock`, unchanged, and our issuer take 20 turns on one
/// lock: each finds the other's lock held and leaves it as it is; our
/// tokens are the counter's, which `RLock` does not count in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redissons_rlock_and_our_issuer_take_turns_excluding_each_other() {
    let Some(issuer) = connect().await else {
        return;
    };
    assert_eq!(issuer.layout(), Layout::Redisson);
    let resource = fencing_testkit::unique_name("rlock");
    let (name, counter) = names(&issuer, &resource);
    let mut client = redisson(&name, false).await;
    let request = LeaseRequest::new(&resource, TTL);
    let mut ours = FencingToken::ZERO;
    for turn in 0..20 {
        if turn % 2 == 1 {
            let lease = issuer.try_acquire(&request).await.unwrap();
            let lease = lease.unwrap_or_else(|| panic!("turn {turn}: Redisson released it"));
            // The first grant starts the counter at Redis's clock.
            if ours != FencingToken::ZERO {
                assert_eq!(lease.token(), ours.checked_next().unwrap(), "turn {turn}");
            }
            ours = lease.token();
            // Our holder is one field of Redisson's hash, its token the value.
            let field = format!("fencing:{}", lease.holder());
            let hash: Vec<String> = aof(&["HGETALL", &name]).await;
            assert_eq!(hash, [field.as_str(), &ours.to_string()], "turn {turn}");
            let holding = issuer.holder(&resource).await.unwrap().unwrap();
            assert_eq!((&holding.holder, holding.token), (lease.holder(), ours));
            client.send("try").await;
            assert_eq!(client.line().await, "busy", "Redisson took a lock we hold");
            issuer.release(&lease).await.unwrap();
            continue;
        }
        client.send("take").await;
        assert_eq!(client.line().await, "took");
        let hash: Vec<String> = aof(&["HGETALL", &name]).await;
        assert!(
            matches!(issuer.try_acquire(&request).await, Ok(None)),
            "turn {turn}"
        );
        let holding = issuer.holder(&resource).await.unwrap().unwrap();
        assert!(
            holding
                .holder
                .as_str()
                .starts_with("foreign:a Redisson lock"),
            "{}",
            holding.holder
        );
        assert!(
            !holding.holder.as_str().contains(&hash[0]),
            "the holder shows Redisson's field: {}",
            holding.holder
        );
        assert_eq!(holding.token, FencingToken::ZERO);
        let after: Vec<String> = aof(&["HGETALL", &name]).await;
        assert_eq!(after, hash, "turn {turn}: Redisson's hash changed");
        let count: Option<u64> = aof(&["GET", &counter]).await;
        assert_eq!(count.unwrap_or(0), ours.get(), "a token was minted");
        client.send("release").await;
        assert_eq!(client.line().await, "released");
    }
    client.send("done").await;
}

/// Each side's waiter wakes at the other's release, well before the
/// holder's 30 s lease would have expired: Redisson's at our release's
/// unlock message on its channel, ours by polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sides_waiter_is_granted_soon_after_the_other_releases() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("wake");
    let (name, _) = names(&issuer, &resource);
    let mut client = redisson(&name, true).await;
    let request = LeaseRequest::new(&resource, TTL);

    // Redisson waits for ours.
    let lease = issuer.try_acquire(&request).await.unwrap().expect("free");
    client.send("take").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    issuer.release(&lease).await.unwrap();
    let token: u64 = client.line().await.parse().expect("Redisson's token");
    let waited = released.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "Redisson was granted {waited:?} after our release: it missed the unlock message"
    );
    assert_eq!(token, lease.token().get() + 1, "one counter for both");

    // Ours waits for Redisson.
    let waiter = issuer.clone();
    let waiting = tokio::spawn(async move { waiter.acquire(&request, TTL).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    client.send("release").await;
    assert_eq!(client.line().await, "released");
    let lease = waiting
        .await
        .unwrap()
        .expect("granted after Redisson released");
    assert!(released.elapsed() < Duration::from_secs(15));
    assert_eq!(lease.token().get(), token + 1);
    issuer.release(&lease).await.unwrap();
    client.send("done").await;
}

/// A floor raises Redisson's own counter, so its next token is above it
/// too; a counter with a TTL (`RFencedLock.expire`) is refused before a
/// grant, as ours is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_floor_and_the_counters_checks_are_redissons_counters() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("floor");
    let (name, counter) = names(&issuer, &resource);
    // Above Redis's clock, where a missing counter would start.
    let floor = 1u64 << 60;
    issuer
        .raise_floor(&resource, FencingToken::new(floor))
        .await
        .unwrap();
    let mut client = redisson(&name, true).await;
    client.send("take").await;
    assert_eq!(client.line().await, (floor + 1).to_string());
    client.send("release").await;
    assert_eq!(client.line().await, "released");
    client.send("done").await;

    let _: i64 = aof(&["PEXPIRE", &counter, "600000"]).await;
    let refused = issuer.try_acquire(&LeaseRequest::new(&resource, TTL)).await;
    assert!(
        matches!(&refused, Err(Error::UnsafeConfiguration { .. })),
        "{refused:?}"
    );
    let _: i64 = aof(&["PERSIST", &counter]).await;
    let lease = issuer
        .try_acquire(&LeaseRequest::new(&resource, TTL))
        .await
        .unwrap()
        .expect("free");
    assert_eq!(lease.token(), FencingToken::new(floor + 2));
    issuer.release(&lease).await.unwrap();
}

/// Our lease ended and a Redisson holder took the lock: renew and release
/// say the lease is lost and leave Redisson's hash alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_lock_redisson_took_is_lost() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("taken");
    let (name, _) = names(&issuer, &resource);
    let lease = issuer
        .try_acquire(&LeaseRequest::new(&resource, TTL))
        .await
        .unwrap()
        .expect("free");
    let _: i64 = aof(&["DEL", &name]).await; // as if it had expired
    let mut client = redisson(&name, false).await;
    client.send("take").await;
    assert_eq!(client.line().await, "took");
    let hash: Vec<String> = aof(&["HGETALL", &name]).await;
    let renewed = issuer.renew(&lease).await;
    assert!(
        matches!(renewed, Err(Error::LeaseLost { .. })),
        "{renewed:?}"
    );
    let released = issuer.release(&lease).await;
    assert!(
        matches!(released, Err(Error::LeaseLost { .. })),
        "{released:?}"
    );
    let after: Vec<String> = aof(&["HGETALL", &name]).await;
    assert_eq!(after, hash, "Redisson's hash changed");
    client.send("release").await;
    assert_eq!(client.line().await, "released");
    client.send("done").await;
}

/// With Redisson's default empty prefix, resource `redisson_lock_token:{X}`
/// would be X's counter as a lock hash, and `{X}` would share X's counter:
/// both are refused as invalid input naming the resource, before any key
/// is touched. (Ours: `X:fence` with `layout=set-nx`, the other layout
/// whose keys can meet.)
#[tokio::test]
async fn names_that_alias_another_resources_keys_are_refused() {
    if REDIS_AOF.skipped() {
        return;
    }
    let issuer = fencing_redis::RedisConfig::new(REDIS_AOF.endpoint())
        .with_layout(Layout::Redisson)
        .connect_issuer()
        .await
        .expect("the append-only Redis");
    let x = fencing_testkit::unique_name("aliased");
    for resource in [format!("redisson_lock_token:{{{x}}}"), format!("{{{x}}}")] {
        let refused = |what: &str, e: Error| match e {
            Error::InvalidInput { message } => assert!(
                message.contains(&resource),
                "{what}: the refusal does not name {resource:?}: {message}"
            ),
            other => panic!("{what} {resource:?}: expected InvalidInput, got {other:?}"),
        };
        let request = LeaseRequest::new(&resource, TTL);
        match issuer.try_acquire(&request).await {
            Err(e) => refused("try_acquire", e),
            Ok(lease) => panic!("{resource:?} aliases {x:?}'s records, and was granted {lease:?}"),
        }
        refused(
            "raise_floor",
            issuer
                .raise_floor(&resource, FencingToken::new(5))
                .await
                .expect_err("refused"),
        );
        refused(
            "holder",
            issuer.holder(&resource).await.expect_err("refused"),
        );
        let touched: i64 = aof(&[
            "EXISTS",
            &resource,
            &format!("redisson_lock_token:{resource}"),
            &format!("redisson_lock_token:{{{resource}}}"),
        ])
        .await;
        assert_eq!(touched, 0, "{resource:?}: a key was written");
    }
}
