//! Checks for issuers built on a lock service's server-side queue (etcd
//! keys, ZooKeeper znodes), beyond the [`TokenIssuer`] contract: a waiter
//! frozen while queued, floors while held and at the top of the range,
//! leases rebuilt from a token, an unreachable server.
//!
//! Each check panics with a message on a breach. `label` names the variant
//! under test (e.g. a token source) in those messages.

use std::fmt::Debug;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing_core::{Error, FencingToken, Lease, LeaseRequest, TokenIssuer};
use tokio::sync::oneshot;

use crate::issuer::{IssuerProfile, assert_lease_lost};
use crate::unique_name;

/// A future to run on a [`frozen_client`]'s runtime.
pub type ClientWork<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Runs `work` on a runtime of its own, on its own thread, which a message
/// on the returned sender freezes (every task on it, the client's session
/// and keep-alives included) for the given time: a stopped process.
pub fn frozen_client<T: Send + 'static>(
    work: impl FnOnce(oneshot::Receiver<Duration>) -> ClientWork<T> + Send + 'static,
) -> (oneshot::Sender<Duration>, std::thread::JoinHandle<T>) {
    let (pause_tx, pause_rx) = oneshot::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(work(pause_rx))
    });
    (pause_tx, thread)
}

/// Blocks the calling runtime's thread for the pause it is sent, if any.
pub async fn freeze_on(pause: oneshot::Receiver<Duration>) {
    if let Ok(pause) = pause.await {
        std::thread::sleep(pause); // the whole client stops
    }
}

/// Polls the count of `resource`'s queue entries until `done` holds of it,
/// failing with `what` after `within`.
async fn wait_for(
    queued: &impl AsyncFn(&str) -> usize,
    resource: &str,
    done: impl Fn(usize) -> bool,
    (within, poll): (Duration, Duration),
    what: &str,
) {
    let by = Instant::now() + within;
    while !done(queued(resource).await) {
        assert!(Instant::now() < by, "{what}");
        tokio::time::sleep(poll).await;
    }
}

/// etcd#11456 (Jepsen, etcd 3.4.3): a client queued for a lock was paused,
/// its lease expired while it waited, and it was still told it held the
/// lock. A waiter with the short TTL, on a client of its own that
/// `connect` opens on a [`frozen_client`], queues behind a holder and is
/// frozen past its TTL; once the server has dropped its queue entry
/// (`queued` counts a resource's entries, holder included) the holder
/// releases. The waiter must get `LeaseLost`, and the resource is free.
pub async fn a_waiter_whose_lease_expired_while_queued_is_never_granted(
    issuer: &dyn TokenIssuer,
    p: &IssuerProfile,
    queued: impl AsyncFn(&str) -> usize,
    connect: impl FnOnce() -> ClientWork<Arc<dyn TokenIssuer>> + Send + 'static,
) {
    let resource = unique_name("expired-waiter");
    let holder = issuer
        .acquire(
            &LeaseRequest::new(&resource, p.long_ttl),
            Duration::from_secs(5),
        )
        .await
        .expect("holder acquires");
    let (ttl, waiter_resource) = (p.ttl, resource.clone());
    let (pause, waiter) = frozen_client(move |pause_rx| {
        Box::pin(async move {
            let own = connect().await;
            tokio::spawn(freeze_on(pause_rx));
            let request = LeaseRequest::new(&waiter_resource, ttl);
            own.acquire(&request, Duration::from_secs(60)).await
        })
    });
    let polls = (Duration::from_secs(10), Duration::from_millis(20));
    let msg = "the waiter never queued";
    wait_for(&queued, &resource, |n| n >= 2, polls, msg).await;
    pause.send(ttl * 4).expect("freeze the waiter");
    // The server expires the waiter's lease (session) and drops its entry.
    let polls = (ttl * 3, Duration::from_millis(50));
    let msg = "the frozen waiter's lease did not expire";
    wait_for(&queued, &resource, |n| n <= 1, polls, msg).await;
    issuer
        .release(&holder)
        .await
        .expect("the holder releases while the waiter is frozen");
    let granted = waiter.join().expect("waiter thread");
    assert_lease_lost(granted, "a waiter whose lease expired while queued");
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

/// Acquires `resource` for `ttl`, waiting up to `ttl` as well.
async fn take(issuer: &dyn TokenIssuer, resource: &str, ttl: Duration, what: &str) -> Lease {
    let request = LeaseRequest::new(resource, ttl);
    let wait = ttl.max(Duration::from_secs(5));
    let lease = issuer.acquire(&request, wait).await;
    lease.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// A floor on a held resource is refused with `Busy` and leaves the holder
/// undisturbed; once free, the floor is taken and later grants are above
/// it, while another resource keeps its own, lower tokens.
pub async fn a_floor_is_refused_while_held(
    issuer: &dyn TokenIssuer,
    p: &IssuerProfile,
    label: &str,
) {
    let resource = unique_name("floor-held");
    let held = take(issuer, &resource, p.long_ttl, "acquire").await;
    let floor = FencingToken::new(held.token().get() + 5_000);
    let raised = issuer.raise_floor(&resource, floor).await;
    assert!(
        matches!(raised, Err(Error::Busy { .. })),
        "{label}: {raised:?}"
    );
    let held = issuer
        .renew(&held)
        .await
        .expect("the holder is undisturbed");
    issuer.release(&held).await.expect("release");
    issuer
        .raise_floor(&resource, floor)
        .await
        .expect("free now");
    let next = take(issuer, &resource, p.long_ttl, "acquire").await;
    let token = next.token();
    assert!(token > floor, "{label}: {token} after a floor of {floor}");
    let holding = issuer.holder(&resource).await.expect("holder");
    assert_eq!(holding.map(|h| h.token), Some(token));
    let next = issuer.renew(&next).await.expect("renew above the floor");
    let other = format!("{resource}-other");
    let other = take(issuer, &other, p.long_ttl, "acquire").await;
    let jumped = other.token();
    assert!(
        jumped < floor,
        "{label}: another resource's token {jumped} jumped"
    );
    issuer.release(&other).await.expect("release");
    issuer.release(&next).await.expect("release");
}

/// A floor with no room above it (a revision counts up to `i64::MAX`) is
/// refused at once with `TokenOutOfRange` and the resource keeps granting
/// plain tokens; a floor of `2^63 - 1` is taken and grants are above it.
pub async fn a_floor_without_room_above_it_is_refused(
    issuer: &dyn TokenIssuer,
    p: &IssuerProfile,
    label: &str,
) {
    let resource = unique_name("floor-range");
    for floor in [u64::MAX, u64::MAX - 1_000, u64::MAX / 2 + (1 << 62)] {
        let raised = issuer
            .raise_floor(&resource, FencingToken::new(floor))
            .await;
        assert!(
            matches!(raised, Err(Error::TokenOutOfRange { .. })),
            "{label}, floor {floor}: {raised:?}"
        );
    }
    let lease = take(issuer, &resource, p.ttl, "the resource still grants").await;
    let token = lease.token();
    assert!(token.get() < 1 << 62, "{label}: token {token}");
    issuer.release(&lease).await.expect("release");
    let floor = (1 << 63) - 1;
    let raised = issuer
        .raise_floor(&resource, FencingToken::new(floor))
        .await;
    raised.expect("a floor of 2^63 - 1");
    let lease = take(issuer, &resource, p.ttl, "acquire above the floor").await;
    let token = lease.token();
    assert!(token.get() > floor, "{label}: token {token}");
    issuer.release(&lease).await.expect("release");
}

/// A lease granted on a free resource, and the same lease rebuilt from its
/// resource, holder and token alone, as `fence renew --token` does.
pub async fn grant_and_rebuild(issuer: &dyn TokenIssuer, request: &LeaseRequest) -> (Lease, Lease) {
    let granted = issuer.try_acquire(request).await.expect("acquire");
    let granted = granted.expect("free");
    let rebuilt = Lease::new(request, granted.token(), Instant::now());
    (granted, rebuilt)
}

/// `fence renew --token` in a new process: a lease rebuilt from resource,
/// holder and token alone (no backend handle) still renews and releases
/// through the issuer that granted it, and the granted lease is gone with
/// it. Returns the resource, for the caller's own checks.
pub async fn a_lease_rebuilt_from_its_token_renews_and_releases(
    issuer: &dyn TokenIssuer,
) -> String {
    let resource = unique_name("rebuilt");
    let request = LeaseRequest::new(&resource, Duration::from_secs(5));
    let (granted, rebuilt) = grant_and_rebuild(issuer, &request).await;
    assert!(granted.has_handle());
    assert!(!rebuilt.has_handle());
    let renewed = issuer.renew(&rebuilt).await.expect("renew a rebuilt lease");
    assert_eq!(renewed.token(), granted.token());
    let released = issuer.release(&renewed).await;
    released.expect("release a rebuilt lease");
    assert!(issuer.holder(&resource).await.expect("holder").is_none());
    assert_lease_lost(issuer.renew(&granted).await, "renewing the granted lease");
    assert_lease_lost(
        issuer.release(&granted).await,
        "releasing the granted lease",
    );
    resource
}

/// Connecting to a server that is not there fails, within 15 s, with a
/// retryable `Backend` error of `backend`.
pub async fn an_unreachable_server_is_a_retryable_backend_error<T: Debug>(
    backend: &str,
    connect: impl Future<Output = Result<T, Error>>,
) {
    let started = Instant::now();
    let e = connect.await.expect_err("nothing listens there");
    assert!(
        matches!(&e, Error::Backend { backend: b, retryable: true, .. } if *b == backend),
        "{e:?}"
    );
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "took {took:?}");
}
