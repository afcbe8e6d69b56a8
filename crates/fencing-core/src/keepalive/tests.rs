//! The keep-alive on the memory issuer, with real time and bounded waits.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use async_trait::async_trait;

use super::*;
use crate::memory::MemoryIssuer;
use crate::{Holding, LeaseRequest, Result};

const TTL: Duration = Duration::from_millis(300);
/// Slack for a loaded machine (the tests run with real time).
const SLACK: Duration = Duration::from_millis(400);

const HEALTHY: u8 = 0;
const FAILING: u8 = 1;
const HANGING: u8 = 2;

/// The memory issuer, with renewals counted and made to fail or hang.
#[derive(Debug, Default)]
struct Flaky {
    inner: MemoryIssuer,
    renewals: AtomicUsize,
    mode: AtomicU8,
}

impl Flaky {
    fn renewals(&self) -> usize {
        self.renewals.load(Ordering::SeqCst)
    }
    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }
}

#[async_trait]
impl TokenIssuer for Flaky {
    fn name(&self) -> &'static str {
        "flaky"
    }
    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
        self.inner.try_acquire(request).await
    }
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        match self.mode.load(Ordering::SeqCst) {
            FAILING => Err(Error::backend("flaky", true, "connection refused")),
            HANGING => std::future::pending().await,
            _ => self.inner.renew(lease).await,
        }
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        self.inner.release(lease).await
    }
    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        self.inner.holder(resource).await
    }
}

async fn setup(resource: &str) -> (Arc<Flaky>, Lease) {
    setup_with(resource, TTL).await
}

async fn setup_with(resource: &str, ttl: Duration) -> (Arc<Flaky>, Lease) {
    let issuer = Arc::new(Flaky::default());
    let lease = issuer
        .try_acquire(&LeaseRequest::new(resource, ttl))
        .await
        .unwrap()
        .expect("free");
    (issuer, lease)
}

/// Waits for the lost signal, at most `within`.
async fn lost_within(keep_alive: &KeepAlive, within: Duration) -> Lost {
    tokio::time::timeout(within, keep_alive.lost())
        .await
        .expect("the lease was not reported lost in time")
}

#[tokio::test]
async fn keeps_renewing_while_healthy() {
    let (issuer, lease) = setup("healthy").await;
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease.clone());
    tokio::time::sleep(TTL * 4).await;
    assert!(!keep_alive.is_lost());
    assert!(keep_alive.lost_now().is_none());
    assert!(
        issuer.renewals() >= 6,
        "{} renewals in four TTLs",
        issuer.renewals()
    );
    let current = keep_alive.lease();
    assert_eq!(current.token(), lease.token());
    assert_eq!(keep_alive.token(), lease.token());
    assert!(current.deadline() > lease.deadline() + TTL * 2);
    // Nobody else gets it while it is kept alive.
    let other = issuer
        .try_acquire(&LeaseRequest::new("healthy", TTL))
        .await
        .unwrap();
    assert!(other.is_none(), "granted to another holder: {other:?}");
    // The signal did not fire.
    assert!(
        tokio::time::timeout(Duration::from_millis(50), keep_alive.lost())
            .await
            .is_err()
    );
    let last = keep_alive.stop().await.expect("held when stopped");
    assert_eq!(last.token(), lease.token());
}

#[tokio::test]
async fn lost_when_the_holder_is_taken_over() {
    let (issuer, lease) = setup("taken").await;
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease.clone());
    // An operator frees it; another holder takes it.
    issuer.inner.release(&lease).await.unwrap();
    let next = issuer
        .try_acquire(&LeaseRequest::new("taken", TTL * 10))
        .await
        .unwrap()
        .expect("free after release");
    assert!(next.token() > lease.token());
    let lost = lost_within(&keep_alive, TTL / 3 + SLACK).await;
    assert!(matches!(lost.reason(), LostReason::Refused), "{lost:?}");
    assert_eq!(lost.lease().token(), lease.token());
    assert!(keep_alive.is_lost());
    assert!(lost.to_string().contains("no longer held"), "{lost}");
    let err = Error::from(lost);
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    // Lost means lost: no more renewals, and the new holder is undisturbed.
    let renewals = issuer.renewals();
    tokio::time::sleep(TTL).await;
    assert_eq!(issuer.renewals(), renewals);
    let holding = issuer.holder("taken").await.unwrap().expect("held");
    assert_eq!(holding.token, next.token());
    assert!(matches!(keep_alive.stop().await, Err(Lost { .. })));
}

#[tokio::test]
async fn survives_failures_that_end_before_the_deadline() {
    // A longer TTL: the failures end well before the deadline even on a
    // loaded machine.
    let ttl = TTL * 3;
    let (issuer, lease) = setup_with("flapping", ttl).await;
    issuer.set(FAILING);
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease.clone());
    tokio::time::sleep(ttl / 2).await;
    assert!(issuer.renewals() >= 1, "no renewal was tried");
    issuer.set(HEALTHY);
    tokio::time::sleep(ttl).await;
    assert!(!keep_alive.is_lost(), "{:?}", keep_alive.lost_now());
    assert!(keep_alive.lease().deadline() > lease.deadline() + ttl / 2);
    keep_alive.release().await.expect("release");
}

#[tokio::test]
async fn lost_at_the_deadline_when_renewals_keep_failing() {
    let (issuer, lease) = setup("failing").await;
    issuer.set(FAILING);
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease.clone());
    let lost = lost_within(&keep_alive, TTL + SLACK).await;
    assert!(
        Instant::now() >= lease.deadline(),
        "reported lost before the deadline"
    );
    match lost.reason() {
        LostReason::Expired {
            last_error: Some(e),
        } => assert!(e.to_string().contains("flaky"), "{e}"),
        other => panic!("expected Expired with the last failure, got {other:?}"),
    }
    assert!(issuer.renewals() >= 2, "retried: {}", issuer.renewals());
    assert!(lost.to_string().contains("renewals failed"), "{lost}");
    let renewals = issuer.renewals();
    tokio::time::sleep(TTL).await;
    assert_eq!(issuer.renewals(), renewals, "renewed after it was lost");
    // A second signal resolves at once.
    lost_within(&keep_alive, Duration::from_millis(50)).await;
}

#[tokio::test]
async fn lost_at_the_deadline_when_a_renewal_hangs() {
    let (issuer, lease) = setup("hanging").await;
    issuer.set(HANGING);
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease.clone());
    let lost = lost_within(&keep_alive, TTL + SLACK).await;
    assert!(Instant::now() >= lease.deadline());
    assert!(
        matches!(lost.reason(), LostReason::Expired { last_error: None }),
        "{lost:?}"
    );
    assert_eq!(issuer.renewals(), 1);
}

#[tokio::test]
async fn lost_at_once_when_spawned_past_the_deadline() {
    let (issuer, lease) = setup("late").await;
    tokio::time::sleep(TTL + Duration::from_millis(20)).await;
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease);
    let lost = lost_within(&keep_alive, Duration::from_millis(200)).await;
    assert!(matches!(lost.reason(), LostReason::Expired { .. }));
    assert_eq!(issuer.renewals(), 0, "renewed a lease past its deadline");
}

/// A process paused past the deadline (here: the runtime's only thread
/// blocked, so the renewing task cannot run) sees the lease lost on waking,
/// before the task's timer fires: `is_lost`, and `current()` refusing the
/// token to a store bound to the lease. Then the task agrees.
#[tokio::test]
async fn a_paused_process_sees_the_lease_lost_before_the_task_runs() {
    let (issuer, lease) = setup("paused").await;
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease);
    let watch = keep_alive.watch();
    assert!(!keep_alive.is_lost());
    assert!(watch.current().is_ok());
    // The pause: no await, so the task never runs meanwhile.
    std::thread::sleep(TTL + Duration::from_millis(50));
    assert!(keep_alive.is_lost());
    assert!(matches!(watch.current(), Err(Error::LeaseLost { .. })));
    let lost = lost_within(&keep_alive, SLACK).await;
    assert!(matches!(lost.reason(), LostReason::Expired { .. }));
    assert!(keep_alive.is_lost());
}

#[tokio::test]
async fn no_renewal_after_stop() {
    let (issuer, lease) = setup("stopped").await;
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease.clone());
    tokio::time::sleep(TTL / 2).await;
    let last = keep_alive.stop().await.expect("held");
    let renewals = issuer.renewals();
    assert!(renewals >= 1);
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(issuer.renewals(), renewals, "renewed after stop");
    // Not released: it ran out, and the next holder gets a new token.
    assert!(last.is_expired());
    let next = issuer
        .try_acquire(&LeaseRequest::new("stopped", TTL))
        .await
        .unwrap()
        .expect("free after its TTL");
    assert!(next.token() > lease.token());
}

#[tokio::test]
async fn no_renewal_after_drop_and_release_on_drop_frees_it() {
    let (issuer, lease) = setup("dropped").await;
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease.clone());
    tokio::time::sleep(TTL / 2).await;
    drop(keep_alive);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let renewals = issuer.renewals();
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(issuer.renewals(), renewals, "renewed after drop");

    let (issuer, lease) = setup("released-on-drop").await;
    let keep_alive = KeepAlive::with_options(
        issuer.clone(),
        lease,
        KeepAliveOptions::default().release_on_drop(true),
    );
    drop(keep_alive);
    tokio::time::timeout(SLACK, async {
        while issuer.holder("released-on-drop").await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("released after drop");
}

#[tokio::test]
async fn release_frees_it_at_once() {
    let (issuer, lease) = setup("released").await;
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease.clone());
    keep_alive.release().await.expect("release");
    assert!(issuer.holder("released").await.unwrap().is_none());
    let renewals = issuer.renewals();
    tokio::time::sleep(TTL).await;
    assert_eq!(issuer.renewals(), renewals);
}

#[tokio::test]
async fn a_lost_lease_is_released_once_the_issuer_answers() {
    let (issuer, lease) = setup("revoked").await;
    // Renewals fail but the issuer still holds it with a longer TTL
    // than our deadline: releasing frees it for the next holder.
    issuer.set(FAILING);
    issuer
        .inner
        .try_acquire(&LeaseRequest::new("revoked", TTL * 20).with_holder(lease.holder().clone()))
        .await
        .unwrap()
        .expect("re-entrant");
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease);
    lost_within(&keep_alive, TTL + SLACK).await;
    assert!(keep_alive.stop().await.is_err());
    assert!(
        issuer.holder("revoked").await.unwrap().is_none(),
        "a lost lease the issuer still had was not released"
    );
}

/// Once its keep-alive is released, stopped or dropped, a watch (what a
/// store bound to the guard reads) answers "lost" at once: before the
/// release is sent, so never while the next holder holds the lease. Seen
/// failing: the watch kept answering `Ok(token)` until the old deadline.
#[tokio::test]
async fn a_watch_is_lost_once_its_keep_alive_is_released_stopped_or_dropped() {
    let ended = |watch: &LeaseWatch, how: &str| {
        assert!(watch.is_lost(), "{how}: the watch still reads held");
        assert!(
            matches!(watch.current(), Err(Error::LeaseLost { .. })),
            "{how}: the watch still hands out its token: {:?}",
            watch.current()
        );
        let lost = watch.lost_now().expect("lost");
        assert!(
            matches!(lost.reason(), LostReason::Stopped),
            "{how}: {lost:?}"
        );
        assert!(lost.to_string().contains("released or dropped"), "{lost}");
    };

    let (issuer, lease) = setup_with("watch-released", TTL * 10).await;
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease);
    let watch = keep_alive.watch();
    let waiting = tokio::spawn(watch.lost());
    assert!(watch.current().is_ok());
    keep_alive.release().await.expect("release");
    ended(&watch, "released");
    let lost = tokio::time::timeout(SLACK, waiting)
        .await
        .expect("lost() resolves once released")
        .unwrap();
    assert!(matches!(lost.reason(), LostReason::Stopped), "{lost:?}");
    let next = issuer
        .try_acquire(&LeaseRequest::new("watch-released", TTL))
        .await
        .unwrap()
        .expect("free at once");
    ended(&watch, "released, next holder in");
    assert!(next.token() > watch.token());

    let (issuer, lease) = setup_with("watch-stopped", TTL * 10).await;
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease.clone());
    let watch = keep_alive.watch();
    let stopped = keep_alive.stop().await.expect("held when stopped");
    assert_eq!(stopped.token(), lease.token());
    ended(&watch, "stopped");

    let (issuer, lease) = setup_with("watch-dropped", TTL * 10).await;
    let keep_alive = KeepAlive::with_options(
        issuer.clone(),
        lease,
        KeepAliveOptions::default().release_on_drop(true),
    );
    let watch = keep_alive.watch();
    drop(keep_alive);
    // At once, with no await: the task has not run yet.
    ended(&watch, "dropped");
    tokio::time::timeout(Duration::from_millis(100), watch.lost())
        .await
        .expect("lost() resolves at once once dropped");
}

/// A process paused past the deadline: `lost()` resolves on its first poll,
/// before the task's timer fires, so work selected beside it (`run`) is
/// not started.
#[tokio::test]
async fn lost_resolves_at_once_past_the_deadline() {
    let (issuer, lease) = setup("lost-at-once").await;
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease);
    assert!(poll_once(keep_alive.lost()).is_none());
    std::thread::sleep(TTL + Duration::from_millis(50));
    let lost = poll_once(keep_alive.lost()).expect("resolved on its first poll");
    assert!(
        matches!(lost.reason(), LostReason::Expired { .. }),
        "{lost:?}"
    );
}

/// Polls `future` once, with no waker to wake.
fn poll_once<F: Future>(future: F) -> Option<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(future).poll(&mut cx) {
        std::task::Poll::Ready(out) => Some(out),
        std::task::Poll::Pending => None,
    }
}

/// A `lost()` already waiting when the process pauses past the deadline
/// resolves by its own timer, whether or not the task has run since.
#[tokio::test]
async fn a_waiting_lost_resolves_at_the_deadline_by_its_own_timer() {
    let (issuer, lease) = setup("lost-waiting").await;
    issuer.set(HANGING);
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease);
    let mut lost = std::pin::pin!(keep_alive.lost());
    assert!(poll_once(lost.as_mut()).is_none());
    let lost = tokio::time::timeout(TTL + SLACK, lost)
        .await
        .expect("resolved by the deadline");
    assert!(
        matches!(lost.reason(), LostReason::Expired { .. }),
        "{lost:?}"
    );
}
