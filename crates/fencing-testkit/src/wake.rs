//! Waiters woken at release: the cases every issuer with a notification
//! channel runs (PostgreSQL's `NOTIFY`, Redis's `PUBLISH`), and the
//! handover gap they are measured by.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fencing_core::adapter::poll_acquire;
use fencing_core::{FencingToken, LeaseRequest, TokenIssuer};
use tokio::sync::Mutex;

/// How a waiter waits: the issuer's `acquire`, or the polling it replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiter {
    /// The issuer's own `acquire`.
    Issuer,
    /// `poll_acquire` with the old default bounds (5 ms doubling to 100 ms).
    OldPoll,
}

/// `n` handovers on `resource`, each on a 30 s TTL (expiry plays no part,
/// and a fallback re-check would come seconds late): a waiter blocks in
/// acquire for `blocked`, the holder releases, and the gap from the
/// release call to the grant is measured. Returns the gaps, sorted, and
/// checks that the waiter was not granted while the lease was held and
/// that each grant's token is above the last.
pub async fn handovers(
    issuer: &Arc<dyn TokenIssuer>,
    resource: &str,
    n: usize,
    blocked: Duration,
    how: Waiter,
) -> Vec<Duration> {
    const TTL: Duration = Duration::from_secs(30);
    let mut held = issuer
        .try_acquire(&LeaseRequest::new(resource, TTL))
        .await
        .expect("try_acquire")
        .expect("free");
    let mut gaps = Vec::with_capacity(n);
    for _ in 0..n {
        let (waiting, request) = (issuer.clone(), LeaseRequest::new(resource, TTL));
        let waiter = tokio::spawn(async move {
            let wait = Duration::from_secs(20);
            let lease = match how {
                Waiter::Issuer => waiting.acquire(&request, wait).await,
                Waiter::OldPoll => {
                    let (first, cap) = (Duration::from_millis(5), Duration::from_millis(100));
                    poll_acquire(&*waiting, &request, wait, first, cap).await
                }
            };
            (lease.expect("granted"), Instant::now())
        });
        tokio::time::sleep(blocked).await;
        assert!(!waiter.is_finished(), "granted while held");
        let released = Instant::now();
        issuer.release(&held).await.expect("release");
        let (next, granted) = waiter.await.expect("the waiter");
        assert!(next.token() > held.token(), "{next:?} after {held:?}");
        gaps.push(granted - released);
        held = next;
    }
    issuer.release(&held).await.expect("release");
    gaps.sort();
    gaps
}

/// The middle of sorted `gaps`.
pub fn median(gaps: &[Duration]) -> Duration {
    gaps[gaps.len() / 2]
}

/// The grant follows the release, not the waiter's next poll: every gap of
/// 11 handovers under 1 s (a fallback re-check on a 30 s TTL comes 5 s
/// late), and the median under 25 ms (the old 5..100 ms polling, at its
/// 100 ms cap after 300 ms of waiting, lands near 50 ms).
pub async fn granted_at_release(issuer: &Arc<dyn TokenIssuer>, resource: &str) {
    let gaps = handovers(
        issuer,
        resource,
        11,
        Duration::from_millis(300),
        Waiter::Issuer,
    )
    .await;
    let name = issuer.name();
    assert!(
        gaps.iter().all(|g| *g < Duration::from_secs(1)),
        "{name}: {gaps:?}"
    );
    let median = median(&gaps);
    assert!(
        median < Duration::from_millis(25),
        "{name}: median {median:?}: {gaps:?}"
    );
}

/// A holder that never releases sends nothing: the waiter's re-check (a
/// quarter of its TTL) still finds the expired lease, with a higher token,
/// not before the expiry and within it plus a re-check and a loaded
/// machine's slack.
pub async fn granted_after_expiry_without_release(issuer: &Arc<dyn TokenIssuer>, resource: &str) {
    let name = issuer.name();
    let crashed = issuer
        .try_acquire(&LeaseRequest::new(resource, Duration::from_secs(1)))
        .await
        .expect("try_acquire")
        .expect("free");
    let started = Instant::now();
    let next = issuer
        .acquire(
            &LeaseRequest::new(resource, Duration::from_secs(2)),
            Duration::from_secs(15),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let waited = started.elapsed();
    assert!(next.token() > crashed.token(), "{name}");
    assert!(waited > Duration::from_millis(500), "{name}: {waited:?}");
    assert!(waited < Duration::from_secs(5), "{name}: {waited:?}");
    issuer.release(&next).await.expect("release");
}

/// Six waiters taking the lease five times each: one holder at a time
/// (each checks no other is inside), and the tokens, in the order they
/// were held, strictly rise.
pub async fn concurrent_waiters_hold_one_at_a_time(issuer: &Arc<dyn TokenIssuer>, resource: &str) {
    let inside = Arc::new(AtomicBool::new(false));
    let tokens: Arc<Mutex<Vec<FencingToken>>> = Arc::default();
    let mut tasks = vec![];
    for _ in 0..6 {
        let (issuer, resource) = (issuer.clone(), resource.to_owned());
        let (inside, tokens) = (inside.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let request = LeaseRequest::new(&resource, Duration::from_secs(30));
                let lease = issuer
                    .acquire(&request, Duration::from_secs(60))
                    .await
                    .expect("granted");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders");
                tokens.lock().await.push(lease.token());
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.store(false, Ordering::SeqCst);
                issuer.release(&lease).await.expect("still held");
            }
        }));
    }
    for task in tasks {
        task.await.expect("a waiter");
    }
    let tokens = tokens.lock().await;
    let name = issuer.name();
    assert_eq!(tokens.len(), 30, "{name}");
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{name}: {tokens:?}");
}

/// The release-to-grant gap, median of 50 handovers, the old polling
/// acquire and the issuer's in one run: prints both, and checks the
/// issuer's is the shorter.
pub async fn handover_gap(issuer: &Arc<dyn TokenIssuer>, resource: &str) {
    let mut medians = vec![];
    for how in [Waiter::OldPoll, Waiter::Issuer] {
        let gaps = handovers(issuer, resource, 50, Duration::from_millis(300), how).await;
        let median = median(&gaps);
        println!(
            "{} {how:?}: median {median:?}, max {:?} over {} handovers",
            issuer.name(),
            gaps[gaps.len() - 1],
            gaps.len()
        );
        medians.push(median);
    }
    assert!(medians[1] < medians[0], "{medians:?}");
}
