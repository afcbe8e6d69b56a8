//! The issuer suite of `fencing_testkit` (the zombie scenario, the history
//! checker and nested names included) and the etcd-only cases (etcd#11456,
//! the create revision as the token, keep-alive handles, floors while held)
//! on a real etcd (`FENCING_ETCD_ENDPOINTS`, default
//! `http://127.0.0.1:2379`; start it with `integration/services.sh up etcd`).

use std::sync::Arc;
use std::time::Duration;

use fencing_core::safety::Verdict;
use fencing_core::{Error, IssuerExt, Lease, LeaseGuard, LeaseRequest, TokenIssuer};
use fencing_etcd::etcd_client::GetOptions;
use fencing_etcd::{EtcdConfig, EtcdIssuer, KeepAlive};
use fencing_harness::env::ETCD;
use fencing_testkit::issuer::{IssuerProfile, assert_held, assert_lease_lost, grant};
use fencing_testkit::lock_service;

fn endpoints() -> Vec<String> {
    ETCD.endpoint()
        .split(',')
        .map(str::trim)
        .map(str::to_owned)
        .collect()
}

/// An issuer under a fresh prefix, or `None` if this run skips etcd.
async fn connect() -> Option<EtcdIssuer> {
    if ETCD.skipped() {
        return None;
    }
    let config =
        EtcdConfig::new(endpoints()).with_prefix(format!("{}/", fencing_testkit::unique_prefix()));
    match config.connect_issuer().await {
        Ok(issuer) => Some(issuer),
        Err(e) => ETCD.unavailable(&e),
    }
}

async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
    Some(Arc::new(connect().await?))
}

fn profile() -> IssuerProfile {
    // etcd's shortest lease is 2 s; the leader expires leases on a 500 ms
    // loop, and a lease's clock restarts if the leader changes.
    IssuerProfile {
        expiry_slack: Duration::from_secs(3),
        ..IssuerProfile::with_ttl(Duration::from_secs(2))
    }
}

fencing_testkit::issuer_conformance!(issuer, profile());

/// The key prefix of a resource's lock keys.
fn dir_of(issuer: &EtcdIssuer, resource: &str) -> String {
    // As `etcdctl lock {prefix}{resource}` keeps its keys: the name as it is.
    format!("{}{resource}/", issuer.prefix())
}

/// The number of lock keys (holder and waiters) of a resource.
async fn keys_of(issuer: &EtcdIssuer, resource: &str) -> usize {
    let mut kv = issuer.client().kv_client();
    let response = kv
        .get(
            dir_of(issuer, resource),
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .expect("count keys");
    usize::try_from(response.count()).expect("a count")
}

/// etcd#11456: a waiter whose lease expired while it was queued (its
/// client frozen) is never granted. See the testkit's check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_lease_expired_while_queued_is_never_granted() {
    let Some(issuer) = connect().await else {
        return;
    };
    let prefix = issuer.prefix().to_owned();
    lock_service::a_waiter_whose_lease_expired_while_queued_is_never_granted(
        &issuer,
        &profile(),
        async |resource| keys_of(&issuer, resource).await,
        move || {
            Box::pin(async move {
                // A client of its own, on the frozen runtime.
                let own = EtcdConfig::new(endpoints()).with_prefix(prefix);
                Arc::new(own.connect_issuer().await.expect("waiter connects"))
                    as Arc<dyn TokenIssuer>
            })
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_the_lock_keys_create_revision() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("create-revision");
    let lease = grant(&issuer, &resource, Duration::from_secs(30)).await;
    let mut kv = issuer.client().kv_client();
    let response = kv
        .get(
            dir_of(&issuer, &resource),
            Some(GetOptions::new().with_prefix()),
        )
        .await
        .expect("get");
    let keys = response.kvs();
    assert_eq!(keys.len(), 1);
    assert_eq!(
        u64::try_from(keys[0].create_revision()).unwrap(),
        lease.token().get()
    );
    assert_eq!(keys[0].value_str().unwrap(), lease.holder().as_str());
    // Writes elsewhere move the cluster revision; renewing keeps the token.
    kv.put(format!("{}unrelated", issuer.prefix()), "x", None)
        .await
        .expect("put");
    let renewed = issuer.renew(&lease).await.expect("renew");
    assert_eq!(renewed.token(), lease.token());
    issuer.release(&lease).await.expect("release");
}

/// A fresh resource's lease for `ttl`, held by the guard (renewed on one
/// etcd keep-alive stream).
async fn kept_alive(issuer: &EtcdIssuer, name: &str, ttl: Duration) -> (String, Lease, LeaseGuard) {
    let resource = fencing_testkit::unique_name(name);
    let held = issuer
        .lock(&resource)
        .ttl(ttl)
        .wait(Duration::from_secs(10))
        .await
        .expect("lock");
    (resource, held.lease(), held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_handle_holds_the_lease_until_dropped() {
    let Some(issuer) = connect().await else {
        return;
    };
    let ttl = Duration::from_secs(2);
    let (resource, lease, keep_alive) = kept_alive(&issuer, "keep-alive", ttl).await;
    tokio::time::sleep(ttl * 3).await;
    assert!(!keep_alive.is_lost());
    let current = keep_alive.lease();
    assert_eq!(current.token(), lease.token());
    assert!(
        current.deadline() > lease.deadline() + ttl,
        "the handle's lease was not renewed"
    );
    let what = "a kept-alive lease was granted to someone else";
    assert_held(&issuer, &resource, ttl, what).await;

    // Drop it: the lease is released in the background, well before
    // its TTL.
    drop(keep_alive);
    let next = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), ttl / 2)
        .await
        .expect("free at once once the guard is dropped");
    assert!(next.token() > lease.token());
    assert_lease_lost(issuer.renew(&lease).await, "renewing lease");
    issuer.release(&next).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_handle_reports_a_revoked_lease_lost() {
    let Some(issuer) = connect().await else {
        return;
    };
    let ttl = Duration::from_secs(3);
    let (resource, lease, keep_alive) = kept_alive(&issuer, "keep-alive-lost", ttl).await;
    // Someone (an operator, `etcdctl lease revoke`) ends the etcd lease.
    revoke_and_notice(&issuer, &resource, keep_alive.keep_alive(), ttl).await;
    assert!(keep_alive.is_lost());
    assert_lease_lost(issuer.renew(&lease).await, "renewing lease");
    assert_lease_lost(issuer.release(&lease).await, "releasing lease");
}

#[tokio::test]
async fn ttls_below_the_server_minimum_are_refused() {
    let Some(issuer) = connect().await else {
        return;
    };
    assert_eq!(issuer.min_ttl(), Duration::from_secs(2));
    let request = LeaseRequest::new(
        fencing_testkit::unique_name("short"),
        Duration::from_millis(1500),
    );
    assert!(matches!(
        issuer.try_acquire(&request).await,
        Err(Error::InvalidInput { .. })
    ));
}

#[tokio::test]
async fn an_unreachable_etcd_is_a_retryable_backend_error() {
    let nothing_listening = EtcdConfig::new(["http://127.0.0.1:1"]);
    let unreachable = nothing_listening.connect_issuer();
    lock_service::an_unreachable_server_is_a_retryable_backend_error("etcd", unreachable).await;
    let e = EtcdConfig::new(["not a url at all \u{0}"])
        .connect_issuer()
        .await
        .expect_err("malformed");
    assert!(
        matches!(e, Error::InvalidInput { .. } | Error::Backend { .. }),
        "{e:?}"
    );
    assert!(matches!(
        EtcdConfig::new(Vec::<String>::new()).connect_issuer().await,
        Err(Error::InvalidInput { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_is_refused_while_held_and_survives_other_resources() {
    let Some(issuer) = connect().await else {
        return;
    };
    lock_service::a_floor_is_refused_while_held(&issuer, &profile(), "etcd").await;
}

/// The etcd lease behind a resource's first lock key.
async fn lock_key(issuer: &EtcdIssuer, resource: &str) -> fencing_etcd::etcd_client::KeyValue {
    let mut kv = issuer.client().kv_client();
    kv.get(
        dir_of(issuer, resource),
        Some(GetOptions::new().with_prefix()),
    )
    .await
    .expect("read the lock keys")
    .kvs()
    .first()
    .expect("a lock key")
    .clone()
}

/// Revokes the etcd lease behind `resource`'s lock key; the keep-alive
/// handle must notice within two TTLs.
async fn revoke_and_notice(
    issuer: &EtcdIssuer,
    resource: &str,
    keep_alive: &KeepAlive,
    ttl: Duration,
) {
    let key = lock_key(issuer, resource).await;
    let mut leases = issuer.client().lease_client();
    leases.revoke(key.lease()).await.expect("revoke");
    let lost = tokio::time::timeout(ttl * 2, keep_alive.lost()).await;
    lost.expect("the handle notices within a TTL");
}

/// An operator clears a "stuck" lock with `etcdctl del` of its key: the
/// next in line is granted, while the holder's etcd lease lives on. The
/// holder must learn it lost the lock (renew, and so its keep-alive
/// handle), not go on believing it holds it beside the new holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_lock_key_is_a_lost_lease_though_its_etcd_lease_lives() {
    let Some(issuer) = connect().await else {
        return;
    };
    let ttl = Duration::from_secs(4);
    let (resource, lease, keep_alive) = kept_alive(&issuer, "deleted-key", ttl).await;
    let key = lock_key(&issuer, &resource).await;
    issuer
        .client()
        .kv_client()
        .delete(key.key().to_vec(), None)
        .await
        .expect("delete the lock key");
    let next = issuer
        .try_acquire(&LeaseRequest::new(&resource, ttl))
        .await
        .expect("acquire")
        .expect("granted: the key ahead of it is gone");
    assert!(next.token() > lease.token());
    assert_lease_lost(
        issuer.renew(&lease).await,
        "renewing the deleted key's lease",
    );
    let lost = tokio::time::timeout(ttl * 2, keep_alive.lost()).await;
    lost.expect("the keep-alive handle notices within two TTLs");
    // `fence renew --token` in another process: no handle, found by token.
    let request = LeaseRequest::new(&resource, ttl).with_holder(lease.holder().clone());
    let rebuilt = Lease::new(&request, lease.token(), std::time::Instant::now());
    assert_lease_lost(issuer.renew(&rebuilt).await, "renewing a rebuilt lease");
    issuer.release(&next).await.expect("release");
}

/// Tokens of two resources can be equal (a floor offsets one of them). A
/// lease of one resource whose keep-alive gave up must not make the other
/// resource's lease with the same token unrenewable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_lease_does_not_touch_another_resource_with_the_same_token() {
    let Some(issuer) = connect().await else {
        return;
    };
    let ttl = Duration::from_secs(3);
    let a = fencing_testkit::unique_name("abandoned-a");
    issuer
        .raise_floor(&a, fencing_core::FencingToken::new(1 << 40))
        .await
        .expect("floor a");
    let lease_a = grant(&issuer, &a, ttl).await;
    // Give b the same token: the floor is written at the revision after
    // the one it was computed from, so a floor two below a's token makes
    // b's next token equal to it, unless another write slipped in (tests
    // run in parallel on one server): then try a fresh resource.
    let mut lease_b = None;
    for attempt in 0..20 {
        let b = fencing_testkit::unique_name(&format!("abandoned-b{attempt}"));
        let floor = fencing_core::FencingToken::new(lease_a.token().get() - 2);
        issuer.raise_floor(&b, floor).await.expect("floor b");
        let lease = grant(&issuer, &b, ttl).await;
        if lease.token() == lease_a.token() {
            lease_b = Some(lease);
            break;
        }
        issuer.release(&lease).await.expect("release b");
    }
    let lease_b = lease_b.expect("a lease on b with a's token within 20 tries");
    // a's lease ends under its keep-alive: the handle gives up on it.
    let keep_alive = KeepAlive::spawn(Arc::new(issuer.clone()), lease_a);
    revoke_and_notice(&issuer, &a, &keep_alive, ttl).await;
    let renewed = issuer.renew(&lease_b).await;
    assert!(
        renewed.is_ok(),
        "b's lease (same token as a's abandoned one) must renew: {renewed:?}"
    );
    issuer.release(&lease_b).await.expect("release b");
}

/// etcd leases count whole seconds: 2.5 s must be granted as 3 s, so the
/// server never ends the lease before the holder's local deadline.
#[tokio::test]
async fn a_fractional_ttl_is_granted_rounded_up() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("ttl-ceil");
    let lease = grant(&issuer, &resource, Duration::from_millis(2500)).await;
    let key = lock_key(&issuer, &resource).await;
    let ttl = issuer
        .client()
        .lease_client()
        .time_to_live(key.lease(), None)
        .await
        .expect("lease time to live");
    assert_eq!(
        ttl.granted_ttl(),
        3,
        "2.5 s granted as {} s",
        ttl.granted_ttl()
    );
    issuer.release(&lease).await.expect("release");
}

/// A floor with no room above it is refused at once, and the resource
/// stays usable (it is not left with a floor that breaks every acquire).
#[tokio::test]
async fn a_floor_without_room_above_it_is_refused() {
    let Some(issuer) = connect().await else {
        return;
    };
    lock_service::a_floor_without_room_above_it_is_refused(&issuer, &profile(), "etcd").await;
}

/// `fence renew --token` in a new process still renews and releases,
/// through the lookup of its lock key, which is gone afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_rebuilt_from_its_token_renews_and_releases() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = lock_service::a_lease_rebuilt_from_its_token_renews_and_releases(&issuer).await;
    assert_eq!(keys_of(&issuer, &resource).await, 0);
}

/// Acquire + release of a granted lease is three calls (lease grant, the
/// transaction creating the key, lease revoke): release revokes the etcd
/// lease the `Lease` carries, with no lookup. A lease rebuilt from its
/// token pays one more round trip, to find its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_and_release_are_three_round_trips() {
    if ETCD.skipped() {
        return;
    }
    let endpoint = endpoints()[0].clone();
    let target: std::net::SocketAddr = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap_or_else(|_| panic!("{endpoint}: expected http://IP:PORT"));
    let proxy = fencing_harness::proxy::CountingProxy::start(target).await;
    let config = EtcdConfig::new([format!("http://{}", proxy.addr())])
        .with_prefix(format!("{}/", fencing_testkit::unique_prefix()));
    let issuer = match config.connect_issuer().await {
        Ok(issuer) => issuer,
        Err(e) => ETCD.unavailable(&e),
    };
    let ttl = Duration::from_secs(5);
    let rounds: u64 = 10;
    let before = proxy.exchanges();
    for i in 0..rounds {
        let lease = issuer
            .try_acquire(&LeaseRequest::new(format!("r{i}"), ttl))
            .await
            .expect("acquire")
            .expect("free");
        issuer.release(&lease).await.expect("release");
    }
    let granted = proxy.exchanges() - before;
    let before = proxy.exchanges();
    for i in 0..rounds {
        let request = LeaseRequest::new(format!("s{i}"), ttl);
        let (_, rebuilt) = lock_service::grant_and_rebuild(&issuer, &request).await;
        issuer.release(&rebuilt).await.expect("release");
    }
    let rebuilt = proxy.exchanges() - before;
    eprintln!(
        "{rounds} × acquire + release: {} round trips for granted leases, {} for rebuilt ones",
        granted.round_trips, rebuilt.round_trips,
    );
    assert_eq!(granted.round_trips, 3 * rounds, "{granted:?}");
    assert_eq!(rebuilt.round_trips, 4 * rounds, "{rebuilt:?}");
}

/// `verify`'s history check: with more revisions behind the current one
/// than it allows, and the oldest of them not compacted (the test server
/// runs without auto-compaction, as etcd does by default), it warns and
/// says how to compact; allowing more revisions than the server has ever
/// had, it passes.
#[tokio::test]
async fn an_uncompacted_history_is_a_warning_naming_auto_compaction() {
    let Some(issuer) = connect().await else {
        return;
    };
    // At least ten revisions exist: these grants make them.
    for _ in 0..5 {
        let lease = grant(
            &issuer,
            &fencing_testkit::unique_name("history"),
            Duration::from_secs(5),
        )
        .await;
        issuer.release(&lease).await.expect("release");
    }
    let kept = issuer.history_check(10).await.expect("history check");
    assert_eq!(kept.verdict, Verdict::Warn, "{kept:?}");
    assert!(
        kept.detail.contains("auto-compaction-retention")
            && kept.detail.contains("more than 10 revisions"),
        "{kept:?}"
    );
    let all = issuer
        .history_check(u64::MAX / 2)
        .await
        .expect("history check");
    assert_eq!(all.verdict, Verdict::Pass, "{all:?}");
    assert!(all.detail.contains("revisions in all"), "{all:?}");
}

/// The compacted side of the history check, and grants across a
/// compaction: with the history behind the current revision compacted,
/// the check passes naming it; a waiter queued (and watching) across the
/// compaction still gets its turn when the holder releases, with a token
/// above the holder's. Compacts the shared server to 50 revisions back
/// only, so no other test's watch, started from a fresh read, is cut.
#[tokio::test]
async fn a_compacted_history_passes_and_a_waiter_across_it_gets_its_turn() {
    let Some(issuer) = connect().await else {
        return;
    };
    let name = fencing_testkit::unique_name("compacted");
    // More than 100 revisions behind the current one: 60 grants and
    // releases make 120.
    for _ in 0..60 {
        let lease = grant(&issuer, &name, Duration::from_secs(5)).await;
        issuer.release(&lease).await.expect("release");
    }
    let holder = grant(&issuer, &name, Duration::from_secs(30)).await;
    let waiter = tokio::spawn({
        let (issuer, name) = (issuer.clone(), name.clone());
        async move {
            let request = LeaseRequest::new(&name, Duration::from_secs(30));
            issuer.acquire(&request, Duration::from_secs(20)).await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut client = issuer.client().clone();
    let now = client
        .get("compacted", Some(GetOptions::new().with_count_only()))
        .await
        .expect("read the revision")
        .header()
        .expect("a header")
        .revision();
    client.compact(now - 50, None).await.expect("compact");
    let check = issuer.history_check(100).await.expect("history check");
    assert_eq!(check.verdict, Verdict::Pass, "{check:?}");
    assert!(check.detail.contains("is compacted"), "{check:?}");
    assert!(!waiter.is_finished(), "the waiter waits for the holder");
    issuer.release(&holder).await.expect("release");
    let next = waiter
        .await
        .expect("waiter task")
        .expect("the waiter's turn");
    assert!(next.token() > holder.token(), "{next:?} after {holder:?}");
    issuer.release(&next).await.expect("release");
}
