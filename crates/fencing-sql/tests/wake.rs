//! Waiters woken at release (PostgreSQL's `LISTEN`/`NOTIFY`), and the
//! fallback that needs no wake-up: expiry, on every dialect. Tokens come
//! from the counter whatever wakes a waiter.
//!
//! `handover_gap` (ignored) prints the release-to-grant gap of the old
//! polling acquire next to the woken one:
//! `cargo test -p fencing-sql --test wake -- --ignored --nocapture`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fencing_core::adapter::poll_acquire;
use fencing_core::{FencingToken, LeaseRequest, TokenIssuer};
use fencing_harness::env::{MYSQL, POSTGRES};
use fencing_sql::{Db, SqlIssuer};
use tokio::sync::Mutex;

mod common;
use common::{connect, sqlite_url};

async fn issuer(db: Option<Db>) -> Option<Arc<SqlIssuer>> {
    Some(Arc::new(SqlIssuer::new(db?).await.expect("issuer")))
}

async fn postgres() -> Option<Arc<SqlIssuer>> {
    issuer(connect(Some(&POSTGRES), &POSTGRES.endpoint()).await).await
}

/// Every dialect this run has: PostgreSQL notifies, the others poll.
async fn all() -> Vec<Arc<SqlIssuer>> {
    let mut all = vec![];
    all.extend(postgres().await);
    all.extend(issuer(connect(Some(&MYSQL), &MYSQL.endpoint()).await).await);
    all.extend(issuer(connect(None, &sqlite_url()).await).await);
    all
}

fn resource(what: &str) -> String {
    format!("wake-{what}-{}", fencing_testkit::unique_prefix())
}

/// How a waiter waits: the issuer's `acquire`, or the polling it replaced.
#[derive(Clone, Copy, Debug)]
enum Waiter {
    Issuer,
    OldPoll,
}

/// `n` handovers on `resource`, each on a 30 s TTL (expiry plays no part,
/// and a fallback re-check would come seconds late): a waiter blocks in
/// acquire for `blocked`, the holder releases, and the gap from the
/// release call to the grant is measured. Returns the gaps, and checks
/// that each grant's token is above the last.
async fn handovers(
    issuer: &Arc<SqlIssuer>,
    resource: &str,
    n: usize,
    blocked: Duration,
    how: Waiter,
) -> Vec<Duration> {
    const TTL: Duration = Duration::from_secs(30);
    let mut held = issuer
        .try_acquire(&LeaseRequest::new(resource, TTL))
        .await
        .unwrap()
        .expect("free");
    let mut gaps = Vec::with_capacity(n);
    for _ in 0..n {
        let (issuer2, request) = (issuer.clone(), LeaseRequest::new(resource, TTL));
        let waiter = tokio::spawn(async move {
            let wait = Duration::from_secs(20);
            let lease = match how {
                Waiter::Issuer => issuer2.acquire(&request, wait).await,
                Waiter::OldPoll => {
                    poll_acquire(
                        &*issuer2,
                        &request,
                        wait,
                        Duration::from_millis(5),
                        Duration::from_millis(100),
                    )
                    .await
                }
            };
            (lease.expect("granted"), Instant::now())
        });
        tokio::time::sleep(blocked).await;
        assert!(!waiter.is_finished(), "granted while held");
        let released = Instant::now();
        issuer.release(&held).await.unwrap();
        let (next, granted) = waiter.await.unwrap();
        assert!(next.token() > held.token(), "{next:?} after {held:?}");
        gaps.push(granted - released);
        held = next;
    }
    issuer.release(&held).await.unwrap();
    gaps
}

fn median(gaps: &mut [Duration]) -> Duration {
    gaps.sort();
    gaps[gaps.len() / 2]
}

/// The grant follows the release, not the waiter's next poll: every gap
/// under 1 s (a fallback re-check on a 30 s TTL comes 5 s late), and the
/// median under 25 ms (the old 5..100 ms polling, at its 100 ms cap after
/// 300 ms of waiting, lands near 50 ms).
#[tokio::test]
async fn a_waiter_is_granted_at_release_not_at_its_next_poll() {
    let Some(issuer) = postgres().await else {
        return;
    };
    let mut gaps = handovers(
        &issuer,
        &resource("release"),
        11,
        Duration::from_millis(300),
        Waiter::Issuer,
    )
    .await;
    assert!(gaps.iter().all(|g| *g < Duration::from_secs(1)), "{gaps:?}");
    let median = median(&mut gaps);
    assert!(
        median < Duration::from_millis(25),
        "median {median:?}: {gaps:?}"
    );
    issuer.db().close().await;
}

/// A holder that never releases notifies nothing: the waiter's re-check
/// (a quarter of its TTL) still finds the expired lease, with a higher
/// token, on every dialect.
#[tokio::test]
async fn a_waiter_gets_the_lease_after_the_holders_expiry_without_release() {
    for issuer in all().await {
        let resource = resource("expiry");
        let crashed = issuer
            .try_acquire(&LeaseRequest::new(&resource, Duration::from_secs(1)))
            .await
            .unwrap()
            .expect("free");
        let started = Instant::now();
        let next = issuer
            .acquire(
                &LeaseRequest::new(&resource, Duration::from_secs(2)),
                Duration::from_secs(15),
            )
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", issuer.name()));
        let waited = started.elapsed();
        assert!(next.token() > crashed.token(), "{}", issuer.name());
        // Not before the expiry; within it plus one re-check (500 ms) and
        // a loaded machine's slack.
        assert!(
            waited > Duration::from_millis(500),
            "{}: {waited:?}",
            issuer.name()
        );
        assert!(
            waited < Duration::from_secs(5),
            "{}: {waited:?}",
            issuer.name()
        );
        issuer.release(&next).await.unwrap();
        issuer.db().close().await;
    }
}

/// Six waiters taking the lease five times each: one holder at a time
/// (each checks no other is inside), and the tokens, in the order they
/// were held, strictly rise. On every dialect.
#[tokio::test]
async fn concurrent_waiters_hold_one_at_a_time_with_rising_tokens() {
    for issuer in all().await {
        let resource = resource("crowd");
        let inside = Arc::new(AtomicBool::new(false));
        let tokens: Arc<Mutex<Vec<FencingToken>>> = Arc::default();
        let mut tasks = vec![];
        for _ in 0..6 {
            let (issuer, resource) = (issuer.clone(), resource.clone());
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
            task.await.unwrap();
        }
        let tokens = tokens.lock().await;
        assert_eq!(tokens.len(), 30, "{}", issuer.name());
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{}: {tokens:?}",
            issuer.name()
        );
        issuer.db().close().await;
    }
}

/// A pool of one connection cannot spare one to `LISTEN`: its waiters
/// poll, and are still granted at release.
#[tokio::test]
async fn a_pool_of_one_connection_polls() {
    if POSTGRES.skipped() {
        return;
    }
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&POSTGRES.endpoint())
        .await
        .expect("postgres");
    let db = Db::postgres(pool).with_tables(common::tables());
    let issuer = Arc::new(SqlIssuer::new(db).await.expect("issuer"));
    let gaps = handovers(
        &issuer,
        &resource("one"),
        2,
        Duration::from_millis(200),
        Waiter::Issuer,
    )
    .await;
    assert!(gaps.iter().all(|g| *g < Duration::from_secs(1)), "{gaps:?}");
    issuer.db().close().await;
}

/// The release-to-grant gap, median of 50 handovers, old polling acquire
/// and woken acquire in one run. Ignored: it takes about 30 s and only
/// prints (and checks the woken one is the faster).
#[tokio::test]
#[ignore = "a measurement; run with --ignored --nocapture"]
async fn handover_gap() {
    let Some(issuer) = postgres().await else {
        return;
    };
    let mut medians = vec![];
    for how in [Waiter::OldPoll, Waiter::Issuer] {
        let mut gaps = handovers(
            &issuer,
            &resource("gap"),
            50,
            Duration::from_millis(300),
            how,
        )
        .await;
        let median = median(&mut gaps);
        println!(
            "postgres {how:?}: median {median:?}, max {:?} over {} handovers",
            gaps[gaps.len() - 1],
            gaps.len()
        );
        medians.push(median);
    }
    assert!(medians[1] < medians[0], "{medians:?}");
    issuer.db().close().await;
}
