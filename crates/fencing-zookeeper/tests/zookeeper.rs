//! The issuer suite of `fencing_testkit` with both token sources (the zombie
//! scenario, the history checker and nested names included), and real
//! pauses, on a real ZooKeeper (`FENCING_ZK_ADDR`, default `127.0.0.1:2181`;
//! start it with `integration/services.sh up zookeeper`).
//!
//! The short TTL is 2 s: the smallest session `integration/services.sh`'s
//! ZooKeeper grants (2 × tickTime, tickTime = 1000 ms).

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing_core::{Error, LeaseRequest, TokenIssuer};
use fencing_harness::env::ZOOKEEPER;
use fencing_harness::error_chain;
use fencing_testkit::issuer::IssuerProfile;
use fencing_zookeeper::{TokenSource, ZkIssuer};

/// An issuer under a fresh prefix znode, or `None` if this run skips ZooKeeper.
async fn connect(source: TokenSource) -> Option<ZkIssuer> {
    if ZOOKEEPER.skipped() {
        return None;
    }
    let prefix = format!("/fencing-test/{}", fencing_testkit::unique_prefix());
    match ZkIssuer::connect_with(&ZOOKEEPER.endpoint(), &prefix, source).await {
        Ok(issuer) => Some(issuer),
        Err(e) => ZOOKEEPER.unavailable(&error_chain(&e)),
    }
}

fn profile() -> IssuerProfile {
    IssuerProfile {
        // A session closed at the deadline goes at once; allow for a slow machine.
        expiry_slack: Duration::from_secs(2),
        // Longer than the server's maxSessionTimeout (20 s) would be shortened.
        long_ttl: Duration::from_secs(20),
        ..IssuerProfile::with_ttl(Duration::from_secs(2))
    }
}

mod czxid {
    use super::*;

    async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
        Some(Arc::new(connect(TokenSource::Czxid).await?))
    }

    fencing_testkit::issuer_conformance!(issuer, profile());
}

mod parent_cversion {
    use super::*;

    async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
        Some(Arc::new(connect(TokenSource::ParentCversion).await?))
    }

    fencing_testkit::issuer_conformance!(issuer, profile());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_the_czxid_or_the_parent_cversion() {
    let Some(by_czxid) = connect(TokenSource::Czxid).await else {
        return;
    };
    let resource = fencing_testkit::unique_name("czxid");
    let long = Duration::from_secs(10);
    let lease = by_czxid
        .acquire(&LeaseRequest::new(&resource, long), long)
        .await
        .expect("acquire");
    let dir = by_czxid.resource_path(&resource);
    let children = by_czxid
        .client()
        .list_children(&dir)
        .await
        .expect("children");
    assert_eq!(children.len(), 1, "{children:?}");
    let stat = by_czxid
        .client()
        .check_stat(&format!("{dir}/{}", children[0]))
        .await
        .unwrap()
        .expect("the lock node");
    assert_eq!(u64::try_from(stat.czxid).unwrap(), lease.token().get());
    by_czxid.release(&lease).await.expect("release");

    let by_cversion = ZkIssuer::connect_with(
        &ZOOKEEPER.endpoint(),
        by_czxid.prefix(),
        TokenSource::ParentCversion,
    )
    .await
    .expect("connect");
    let resource = fencing_testkit::unique_name("cversion");
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let lease = by_cversion
            .acquire(&LeaseRequest::new(&resource, long), long)
            .await
            .expect("acquire");
        tokens.push(lease.token().get());
        by_cversion.release(&lease).await.expect("release");
    }
    let (_, stat) = by_cversion
        .client()
        .get_data(&by_cversion.resource_path(&resource))
        .await
        .expect("parent");
    println!(
        "cversion tokens {tokens:?}; the resource znode's cversion is now {}",
        stat.cversion
    );
    // One create and one delete per grant on a fresh resource znode.
    assert_eq!(tokens, [1, 3, 5]);
    assert_eq!(stat.cversion, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_bounds_come_from_the_server() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let (min, max) = issuer.session_timeouts();
    assert_eq!(issuer.min_ttl(), min);
    assert!(
        min >= Duration::from_millis(200) && min < max,
        "{min:?}..{max:?}"
    );
    println!("ZooKeeper negotiates sessions within {min:?}..={max:?}");
    // A TTL the server cannot keep through a pause is shortened, so the
    // local deadline stays conservative.
    let resource = fencing_testkit::unique_name("long");
    let lease = issuer
        .acquire(
            &LeaseRequest::new(&resource, max * 3),
            Duration::from_secs(5),
        )
        .await
        .expect("acquire");
    assert_eq!(lease.ttl(), max);
    issuer.release(&lease).await.expect("release");
    let short = LeaseRequest::new(&resource, min / 2);
    assert!(matches!(
        issuer.try_acquire(&short).await,
        Err(Error::InvalidInput { .. })
    ));
}

/// Runs `work` on a runtime of its own, on its own thread, which a message
/// on the returned sender freezes (every task on it, the ZooKeeper session
/// included) for the given time: a stopped process.
fn frozen_client<T: Send + 'static>(
    work: impl FnOnce(
        tokio::sync::oneshot::Receiver<Duration>,
    ) -> std::pin::Pin<Box<dyn Future<Output = T> + Send>>
    + Send
    + 'static,
) -> (
    tokio::sync::oneshot::Sender<Duration>,
    std::thread::JoinHandle<T>,
) {
    let (pause_tx, pause_rx) = tokio::sync::oneshot::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(work(pause_rx))
    });
    (pause_tx, thread)
}

async fn freeze_on(pause: tokio::sync::oneshot::Receiver<Duration>) {
    if let Ok(pause) = pause.await {
        std::thread::sleep(pause); // the whole client stops
    }
}

/// A holder whose process stops for longer than its session timeout loses
/// the lease *while stopped* (ZooKeeper expires the session: the issuer's
/// own deadline watchdog is stopped too); another client gets it, and the
/// woken holder's renew fails with `LeaseLost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_loses_its_session() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let resource = fencing_testkit::unique_name("paused-holder");
    let ttl = Duration::from_secs(4);
    let freeze = Duration::from_secs(12);
    let (granted_tx, granted_rx) = tokio::sync::oneshot::channel();
    let (prefix, holder_resource) = (issuer.prefix().to_owned(), resource.clone());
    let (pause, holder) = frozen_client(move |pause_rx| {
        Box::pin(async move {
            let own = ZkIssuer::connect_with(&ZOOKEEPER.endpoint(), &prefix, TokenSource::Czxid)
                .await
                .expect("connect");
            let lease = own
                .acquire(
                    &LeaseRequest::new(&holder_resource, ttl),
                    Duration::from_secs(5),
                )
                .await
                .expect("acquire");
            let renewed = own.renew(&lease).await.expect("renew before the pause");
            granted_tx.send(renewed.token()).expect("report the grant");
            freeze_on(pause_rx).await;
            own.renew(&renewed).await.map(|l| l.token())
        })
    });
    let zombie_token = granted_rx.await.expect("the holder was granted");
    pause.send(freeze).expect("freeze the holder");
    let frozen_at = Instant::now();

    let next = issuer
        .acquire(
            &LeaseRequest::new(&resource, Duration::from_secs(20)),
            freeze - Duration::from_secs(2),
        )
        .await
        .expect("granted while the holder is still stopped");
    let took = frozen_at.elapsed();
    assert!(
        took < freeze,
        "granted only after the holder woke ({took:?})"
    );
    assert!(next.token() > zombie_token);
    println!("granted {took:?} into a {freeze:?} pause of a holder with a {ttl:?} session");

    match holder.join().expect("holder thread") {
        Err(Error::LeaseLost { token, .. }) => assert_eq!(token, zombie_token),
        other => panic!("the woken holder's renew must fail with LeaseLost, got {other:?}"),
    }
    assert_eq!(
        issuer.holder(&resource).await.unwrap().unwrap().token,
        next.token()
    );
    issuer.release(&next).await.expect("release");
}

/// The ZooKeeper side of etcd#11456: a waiter whose session expires while
/// it is queued (its process stopped) is never granted when it wakes, even
/// though the holder released meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_session_expired_while_queued_is_never_granted() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let resource = fencing_testkit::unique_name("expired-waiter");
    let ttl = Duration::from_secs(2);
    let holder = issuer
        .acquire(
            &LeaseRequest::new(&resource, Duration::from_secs(20)),
            Duration::from_secs(5),
        )
        .await
        .expect("holder");
    let (prefix, waiter_resource) = (issuer.prefix().to_owned(), resource.clone());
    let (pause, waiter) = frozen_client(move |pause_rx| {
        Box::pin(async move {
            let own = ZkIssuer::connect_with(&ZOOKEEPER.endpoint(), &prefix, TokenSource::Czxid)
                .await
                .expect("connect");
            tokio::spawn(freeze_on(pause_rx));
            own.acquire(
                &LeaseRequest::new(&waiter_resource, ttl),
                Duration::from_secs(60),
            )
            .await
        })
    });
    let dir = issuer.resource_path(&resource);
    let queued_by = Instant::now() + Duration::from_secs(10);
    while issuer
        .client()
        .list_children(&dir)
        .await
        .expect("children")
        .len()
        < 2
    {
        assert!(Instant::now() < queued_by, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pause.send(ttl * 4).expect("freeze the waiter");
    let expired_by = Instant::now() + ttl * 3;
    while issuer
        .client()
        .list_children(&dir)
        .await
        .expect("children")
        .len()
        > 1
    {
        assert!(
            Instant::now() < expired_by,
            "the stopped waiter's session did not expire"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    issuer
        .release(&holder)
        .await
        .expect("the holder releases while the waiter is stopped");
    match waiter.join().expect("waiter thread") {
        Err(Error::LeaseLost { .. }) => {}
        other => panic!("a waiter whose session expired must not be granted, got {other:?}"),
    }
    assert_eq!(
        issuer.holder(&resource).await.unwrap(),
        None,
        "someone holds the resource"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_retryable_backend_error() {
    let started = Instant::now();
    let e = ZkIssuer::connect("127.0.0.1:1")
        .await
        .expect_err("nothing listens on port 1");
    assert!(
        matches!(
            e,
            Error::Backend {
                backend: "zookeeper",
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
    assert!(matches!(
        ZkIssuer::connect_with(&ZOOKEEPER.endpoint(), "/zookeeper", TokenSource::Czxid).await,
        Err(Error::InvalidInput { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_is_refused_while_held_and_keeps_other_resources_alone() {
    for source in [TokenSource::Czxid, TokenSource::ParentCversion] {
        let Some(issuer) = connect(source).await else {
            return;
        };
        let resource = fencing_testkit::unique_name("floor-held");
        let long = Duration::from_secs(10);
        let held = issuer
            .acquire(&LeaseRequest::new(&resource, long), long)
            .await
            .expect("acquire");
        let floor = fencing_core::FencingToken::new(held.token().get() + 5_000);
        assert!(matches!(
            issuer.raise_floor(&resource, floor).await,
            Err(Error::Busy { .. })
        ));
        let held = issuer
            .renew(&held)
            .await
            .expect("the holder is undisturbed");
        issuer.release(&held).await.expect("release");
        issuer
            .raise_floor(&resource, floor)
            .await
            .expect("free now");
        let next = issuer
            .acquire(&LeaseRequest::new(&resource, long), long)
            .await
            .expect("acquire");
        assert!(
            next.token() > floor,
            "{source:?}: {} after a floor of {floor}",
            next.token()
        );
        assert_eq!(
            issuer.holder(&resource).await.unwrap().unwrap().token,
            next.token()
        );
        let other = issuer
            .acquire(&LeaseRequest::new(format!("{resource}-other"), long), long)
            .await
            .expect("acquire");
        assert!(
            other.token() < floor,
            "{source:?}: another resource's token {} jumped",
            other.token()
        );
        issuer.release(&other).await.expect("release");
        issuer.release(&next).await.expect("release");
    }
}

/// A session timeout is an `i32` of milliseconds: a TTL beyond it cannot
/// be asked for, and is refused before any session is opened.
#[tokio::test]
async fn a_ttl_beyond_an_i32_of_milliseconds_is_invalid_input() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let resource = fencing_testkit::unique_name("ttl-i32");
    let ttl = Duration::from_millis(u64::try_from(i32::MAX).unwrap() + 1);
    let acquired = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), Duration::from_secs(5))
        .await;
    assert!(
        matches!(acquired, Err(Error::InvalidInput { .. })),
        "ttl {ttl:?}: {acquired:?}"
    );
    assert!(issuer.holder(&resource).await.expect("holder").is_none());
}

/// A TTL with a fraction of a millisecond asks for the next whole
/// millisecond, so the session is never shorter than the lease.
#[tokio::test]
async fn a_fractional_millisecond_ttl_is_asked_for_rounded_up() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let (min, max) = issuer.session_timeouts();
    let ttl = Duration::from_micros(4_000_500);
    assert!(
        min <= ttl && ttl < max,
        "the server grants {min:?}..={max:?}"
    );
    let resource = fencing_testkit::unique_name("ttl-ceil");
    let lease = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), Duration::from_secs(5))
        .await
        .expect("acquire");
    assert_eq!(
        lease.ttl(),
        ttl,
        "the session was granted shorter than the TTL"
    );
    issuer.release(&lease).await.expect("release");
}

/// A floor with no room above it is refused at once with both token
/// sources, and the resource keeps granting.
#[tokio::test]
async fn a_floor_without_room_above_it_is_refused() {
    for source in [TokenSource::Czxid, TokenSource::ParentCversion] {
        let Some(issuer) = connect(source).await else {
            return;
        };
        let resource = fencing_testkit::unique_name("floor-range");
        for floor in [u64::MAX, u64::MAX - 1_000, u64::MAX / 2 + (1 << 62)] {
            let raised = issuer
                .raise_floor(&resource, fencing_core::FencingToken::new(floor))
                .await;
            assert!(
                matches!(raised, Err(Error::TokenOutOfRange { .. })),
                "{source:?}, floor {floor}: {raised:?}"
            );
        }
        let lease = issuer
            .acquire(
                &LeaseRequest::new(&resource, Duration::from_secs(2)),
                Duration::from_secs(5),
            )
            .await
            .expect("the resource still grants");
        issuer.release(&lease).await.expect("release");
        // A floor with room is taken: every later token still fits.
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
        assert!(
            lease.token().get() > floor,
            "{source:?}: token {}",
            lease.token()
        );
        issuer.release(&lease).await.expect("release");
    }
}

/// A lease rebuilt from resource, holder and token alone (no backend
/// handle) still renews and releases through the issuer that granted it,
/// which finds its session by token and holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_rebuilt_from_its_token_renews_and_releases() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let resource = fencing_testkit::unique_name("rebuilt");
    let request = LeaseRequest::new(&resource, Duration::from_secs(5));
    let granted = issuer
        .try_acquire(&request)
        .await
        .expect("acquire")
        .expect("free");
    assert!(granted.has_handle());
    let rebuilt = fencing_core::Lease::new(&request, granted.token(), Instant::now());
    assert!(!rebuilt.has_handle());
    let renewed = issuer.renew(&rebuilt).await.expect("renew a rebuilt lease");
    assert_eq!(renewed.token(), granted.token());
    issuer
        .release(&renewed)
        .await
        .expect("release a rebuilt lease");
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

/// A granted lease carries its session: another issuer on the same
/// ensemble renews and releases it with no lookup, while a rebuilt lease
/// (no handle) is unknown there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_lease_carries_its_session() {
    let (Some(issuer), Some(other)) = (
        connect(TokenSource::Czxid).await,
        connect(TokenSource::Czxid).await,
    ) else {
        return;
    };
    let resource = fencing_testkit::unique_name("handle");
    let request = LeaseRequest::new(&resource, Duration::from_secs(5));
    let lease = issuer
        .try_acquire(&request)
        .await
        .expect("acquire")
        .expect("free");
    let rebuilt = fencing_core::Lease::new(&request, lease.token(), Instant::now());
    assert!(matches!(
        other.renew(&rebuilt).await,
        Err(Error::LeaseLost { .. })
    ));
    let renewed = other.renew(&lease).await.expect("renew through the handle");
    assert!(renewed.has_handle());
    other
        .release(&renewed)
        .await
        .expect("release through the handle");
    assert!(issuer.holder(&resource).await.expect("holder").is_none());
    assert!(matches!(
        issuer.renew(&rebuilt).await,
        Err(Error::LeaseLost { .. })
    ));
}
