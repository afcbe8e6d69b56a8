//! The issuer suite of `fencing_testkit` (the zombie scenario, the history
//! checker and nested names included) and the etcd-only cases (etcd#11456,
//! the create revision as the token, keep-alive handles, floors while held)
//! on a real etcd (`FENCING_ETCD_ENDPOINTS`, default
//! `http://127.0.0.1:2379`; start it with `integration/services.sh up etcd`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing_core::{Error, LeaseRequest, TokenIssuer};
use fencing_etcd::EtcdIssuer;
use fencing_etcd::etcd_client::GetOptions;
use fencing_harness::env::ETCD;
use fencing_testkit::issuer::IssuerProfile;

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
    match EtcdIssuer::connect(&endpoints()).await {
        Ok(issuer) => Some(
            issuer
                .with_prefix(format!("{}/", fencing_testkit::unique_prefix()))
                .expect("valid prefix"),
        ),
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

/// The number of lock keys (holder and waiters) of a resource.
async fn keys_of(issuer: &EtcdIssuer, resource: &str) -> usize {
    let dir = format!(
        "{}{}/",
        issuer.prefix(),
        resource.replace('%', "%25").replace('/', "%2F")
    );
    let mut kv = issuer.client().kv_client();
    let response = kv
        .get(dir, Some(GetOptions::new().with_prefix().with_count_only()))
        .await
        .expect("count keys");
    usize::try_from(response.count()).expect("a count")
}

/// etcd#11456 (Jepsen, etcd 3.4.3): a client queued for a lock was paused,
/// its lease expired while it waited, and it was still told it held the
/// lock. Here the waiter's whole runtime (its client, its keep-alives) is
/// frozen past its TTL while it is queued; the holder then releases. The
/// waiter must not be granted, and nobody holds the resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_lease_expired_while_queued_is_never_granted() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("etcd-11456");
    let ttl = Duration::from_secs(2);
    let holder = issuer
        .acquire(
            &LeaseRequest::new(&resource, Duration::from_secs(60)),
            Duration::from_secs(5),
        )
        .await
        .expect("holder acquires");

    // The waiter runs on its own single-threaded runtime, so blocking that
    // thread freezes the waiter like a stopped process.
    let (pause_tx, pause_rx) = tokio::sync::oneshot::channel::<Duration>();
    let (result_tx, result_rx) = tokio::sync::oneshot::channel();
    let waiter_issuer = issuer.clone();
    let waiter_resource = resource.clone();
    let waiter = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            // A client of its own, on this runtime.
            let own = EtcdIssuer::connect(&endpoints())
                .await
                .expect("waiter connects");
            let own = own.with_prefix(waiter_issuer.prefix()).expect("prefix");
            tokio::spawn(async move {
                if let Ok(pause) = pause_rx.await {
                    std::thread::sleep(pause); // the whole waiter stops
                }
            });
            let result = own
                .acquire(
                    &LeaseRequest::new(&waiter_resource, ttl),
                    Duration::from_secs(60),
                )
                .await;
            let _ = result_tx.send(result);
        });
    });

    let queued_by = Instant::now() + Duration::from_secs(10);
    while keys_of(&issuer, &resource).await < 2 {
        assert!(Instant::now() < queued_by, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pause_tx.send(ttl * 3).expect("pause the waiter");
    // etcd expires the waiter's lease and deletes its key.
    let expired_by = Instant::now() + ttl * 3;
    while keys_of(&issuer, &resource).await > 1 {
        assert!(
            Instant::now() < expired_by,
            "the frozen waiter's lease did not expire"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    issuer
        .release(&holder)
        .await
        .expect("holder releases while the waiter is frozen");

    let result = result_rx.await.expect("the waiter answers");
    waiter.join().expect("waiter thread");
    match result {
        Err(Error::LeaseLost { .. }) => {}
        other => {
            panic!("a waiter whose lease expired while queued must not be granted, got {other:?}")
        }
    }
    assert_eq!(
        issuer.holder(&resource).await.expect("holder"),
        None,
        "someone holds the resource"
    );
    let next = issuer
        .try_acquire(&LeaseRequest::new(&resource, ttl))
        .await
        .expect("try")
        .expect("the resource is free");
    assert!(next.token() > holder.token());
    issuer.release(&next).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_the_lock_keys_create_revision() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("create-revision");
    let lease = issuer
        .acquire(
            &LeaseRequest::new(&resource, Duration::from_secs(30)),
            Duration::from_secs(5),
        )
        .await
        .expect("acquire");
    let mut kv = issuer.client().kv_client();
    let dir = format!("{}{}/", issuer.prefix(), resource.replace('/', "%2F"));
    let response = kv
        .get(dir, Some(GetOptions::new().with_prefix()))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_handle_holds_the_lease_until_dropped() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("keep-alive");
    let ttl = Duration::from_secs(2);
    let lease = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), Duration::from_secs(5))
        .await
        .expect("acquire");
    let keep_alive = issuer.keep_alive(&lease);
    tokio::time::sleep(ttl * 3).await;
    assert!(!keep_alive.is_lost());
    let current = keep_alive.lease();
    assert_eq!(current.token(), lease.token());
    assert!(
        current.deadline() > lease.deadline() + ttl,
        "the handle's lease was not renewed"
    );
    let other = issuer
        .try_acquire(&LeaseRequest::new(&resource, ttl))
        .await
        .expect("try");
    assert!(
        other.is_none(),
        "a kept-alive lease was granted to someone else"
    );

    // Stop it: the lease runs out like any unrenewed lease.
    drop(keep_alive);
    let next = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), ttl * 4)
        .await
        .expect("free after the TTL once the keep-alive stops");
    assert!(next.token() > lease.token());
    assert!(matches!(
        issuer.renew(&lease).await,
        Err(Error::LeaseLost { .. })
    ));
    issuer.release(&next).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_handle_reports_a_revoked_lease_lost() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("keep-alive-lost");
    let ttl = Duration::from_secs(3);
    let lease = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), Duration::from_secs(5))
        .await
        .expect("acquire");
    let keep_alive = issuer.keep_alive(&lease);
    // Someone (an operator, `etcdctl lease revoke`) ends the etcd lease.
    let mut kv = issuer.client().kv_client();
    let dir = format!("{}{}/", issuer.prefix(), resource.replace('/', "%2F"));
    let key = kv
        .get(dir, Some(GetOptions::new().with_prefix()))
        .await
        .unwrap()
        .kvs()[0]
        .clone();
    issuer
        .client()
        .lease_client()
        .revoke(key.lease())
        .await
        .expect("revoke");
    tokio::time::timeout(ttl * 2, keep_alive.lost())
        .await
        .expect("the handle notices within a TTL");
    assert!(keep_alive.is_lost());
    assert!(matches!(
        issuer.renew(&lease).await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(matches!(
        issuer.release(&lease).await,
        Err(Error::LeaseLost { .. })
    ));
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
    let started = Instant::now();
    let e = EtcdIssuer::connect(&["http://127.0.0.1:1"])
        .await
        .expect_err("nothing listens on port 1");
    assert!(
        matches!(
            e,
            Error::Backend {
                backend: "etcd",
                retryable: true,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    let e = EtcdIssuer::connect(&["not a url at all \u{0}"])
        .await
        .expect_err("malformed");
    assert!(
        matches!(e, Error::InvalidInput { .. } | Error::Backend { .. }),
        "{e:?}"
    );
    assert!(matches!(
        EtcdIssuer::connect::<&str>(&[]).await,
        Err(Error::InvalidInput { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_is_refused_while_held_and_survives_other_resources() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("floor-held");
    let long = Duration::from_secs(30);
    let held = issuer
        .acquire(&LeaseRequest::new(&resource, long), long)
        .await
        .expect("acquire");
    let floor = fencing_core::FencingToken::new(held.token().get() + 5_000);
    assert!(matches!(
        issuer.raise_floor(&resource, floor).await,
        Err(Error::Busy { .. })
    ));
    // The holder's lease is undisturbed: renew and release find it.
    let held = issuer.renew(&held).await.expect("renew");
    issuer.release(&held).await.expect("release");
    issuer
        .raise_floor(&resource, floor)
        .await
        .expect("free now");
    let next = issuer
        .acquire(&LeaseRequest::new(&resource, long), long)
        .await
        .expect("acquire");
    assert!(next.token() > floor);
    assert_eq!(
        issuer.holder(&resource).await.unwrap().unwrap().token,
        next.token()
    );
    let next = issuer.renew(&next).await.expect("renew above the floor");
    // Another resource keeps plain create revisions.
    let other = issuer
        .acquire(&LeaseRequest::new(format!("{resource}-other"), long), long)
        .await
        .expect("acquire");
    assert!(other.token() < floor);
    issuer.release(&other).await.expect("release");
    issuer.release(&next).await.expect("release");
}

/// The etcd lease behind a resource's first lock key.
async fn lock_key(issuer: &EtcdIssuer, resource: &str) -> fencing_etcd::etcd_client::KeyValue {
    let dir = format!(
        "{}{}/",
        issuer.prefix(),
        resource.replace('%', "%25").replace('/', "%2F")
    );
    let mut kv = issuer.client().kv_client();
    kv.get(dir, Some(GetOptions::new().with_prefix()))
        .await
        .expect("read the lock keys")
        .kvs()
        .first()
        .expect("a lock key")
        .clone()
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
    let wait = Duration::from_secs(5);
    let a = fencing_testkit::unique_name("abandoned-a");
    issuer
        .raise_floor(&a, fencing_core::FencingToken::new(1 << 40))
        .await
        .expect("floor a");
    let lease_a = issuer
        .acquire(&LeaseRequest::new(&a, ttl), wait)
        .await
        .expect("acquire a");
    // Give b the same token: the floor is written at the revision after
    // the one it was computed from, so a floor two below a's token makes
    // b's next token equal to it, unless another write slipped in (tests
    // run in parallel on one server): then try a fresh resource.
    let mut lease_b = None;
    for attempt in 0..20 {
        let b = fencing_testkit::unique_name(&format!("abandoned-b{attempt}"));
        let floor = fencing_core::FencingToken::new(lease_a.token().get() - 2);
        issuer.raise_floor(&b, floor).await.expect("floor b");
        let lease = issuer
            .acquire(&LeaseRequest::new(&b, ttl), wait)
            .await
            .expect("acquire b");
        if lease.token() == lease_a.token() {
            lease_b = Some(lease);
            break;
        }
        issuer.release(&lease).await.expect("release b");
    }
    let lease_b = lease_b.expect("a lease on b with a's token within 20 tries");
    // a's lease ends under its keep-alive: the handle gives up on it.
    let keep_alive = issuer.keep_alive(&lease_a);
    let key = lock_key(&issuer, &a).await;
    issuer
        .client()
        .lease_client()
        .revoke(key.lease())
        .await
        .expect("revoke a");
    tokio::time::timeout(ttl * 2, keep_alive.lost())
        .await
        .expect("the handle notices within a TTL");
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
    let lease = issuer
        .acquire(
            &LeaseRequest::new(&resource, Duration::from_millis(2500)),
            Duration::from_secs(5),
        )
        .await
        .expect("acquire");
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
    let resource = fencing_testkit::unique_name("floor-range");
    for floor in [u64::MAX, u64::MAX - 1_000, u64::MAX / 2 + (1 << 62)] {
        let raised = issuer
            .raise_floor(&resource, fencing_core::FencingToken::new(floor))
            .await;
        assert!(
            matches!(raised, Err(Error::TokenOutOfRange { .. })),
            "floor {floor}: {raised:?}"
        );
    }
    let lease = issuer
        .acquire(
            &LeaseRequest::new(&resource, Duration::from_secs(2)),
            Duration::from_secs(5),
        )
        .await
        .expect("the resource still grants");
    assert!(lease.token().get() < 1 << 62, "token {}", lease.token());
    issuer.release(&lease).await.expect("release");
    // A floor with room is taken: every later revision still fits.
    let floor = (1 << 63) - 1;
    issuer
        .raise_floor(&resource, fencing_core::FencingToken::new(floor))
        .await
        .expect("a floor of 2^63 - 1");
    let lease = issuer
        .acquire(
            &LeaseRequest::new(&resource, Duration::from_secs(2)),
            Duration::from_secs(5),
        )
        .await
        .expect("acquire above the floor");
    assert!(lease.token().get() > floor, "token {}", lease.token());
    issuer.release(&lease).await.expect("release");
}

/// `fence renew --token` in a new process: a lease rebuilt from the
/// resource, holder and token alone (no backend handle) still renews and
/// releases, through the lookup of its lock key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_rebuilt_from_its_token_renews_and_releases() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("rebuilt");
    let request = LeaseRequest::new(&resource, Duration::from_secs(5));
    let granted = issuer
        .try_acquire(&request)
        .await
        .expect("acquire")
        .expect("free");
    let rebuilt = fencing_core::Lease::new(&request, granted.token(), Instant::now());
    let renewed = issuer.renew(&rebuilt).await.expect("renew a rebuilt lease");
    assert_eq!(renewed.token(), granted.token());
    issuer
        .release(&renewed)
        .await
        .expect("release a rebuilt lease");
    assert_eq!(keys_of(&issuer, &resource).await, 0);
    assert!(issuer.holder(&resource).await.expect("holder").is_none());
    // The lease the issuer granted is gone with it.
    assert!(matches!(
        issuer.renew(&granted).await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(matches!(
        issuer.release(&granted).await,
        Err(Error::LeaseLost { .. })
    ));
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
    let issuer = match EtcdIssuer::connect(&[format!("http://{}", proxy.addr())]).await {
        Ok(issuer) => issuer
            .with_prefix(format!("{}/", fencing_testkit::unique_prefix()))
            .expect("valid prefix"),
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
        let lease = issuer
            .try_acquire(&request)
            .await
            .expect("acquire")
            .expect("free");
        let rebuilt = fencing_core::Lease::new(&request, lease.token(), Instant::now());
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
