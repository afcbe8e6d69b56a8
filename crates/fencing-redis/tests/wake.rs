//! Waiters woken at release (the release script's `PUBLISH`), and the
//! fallback that needs no wake-up: expiry. Tokens come from the counter
//! whatever wakes a waiter. On the append-only server
//! (`FENCING_REDIS_AOF_URL`) and the TLS, ACL-login one
//! (`FENCING_REDIS_TLS_URL`).
//!
//! `handover_gap` (ignored) prints the release-to-grant gap of the old
//! polling acquire next to the woken one:
//! `cargo test -p fencing-redis --test wake -- --ignored --nocapture`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fencing_core::adapter::poll_acquire;
use fencing_core::{Error, FencingToken, LeaseRequest, TokenIssuer};
use fencing_harness::env::{REDIS_AOF, REDIS_TLS, Server, tls_file, with_option};
use fencing_redis::{Durability, RedisConfig, RedisIssuer};
use tokio::sync::Mutex;

async fn connect(server: &Server, url: &str) -> Option<Arc<RedisIssuer>> {
    if server.skipped() {
        return None;
    }
    match RedisConfig::from_url(url)
        .expect("a Redis URL")
        .with_durability(Durability::Required)
        .with_prefix(format!("{}:", fencing_testkit::unique_prefix()))
        .connect()
        .await
    {
        Ok(issuer) => Some(Arc::new(issuer)),
        Err(e @ Error::Backend { .. }) => server.unavailable(&e.chain()),
        Err(e) => panic!("{}: {}", server.name, e.chain()),
    }
}

async fn aof() -> Option<Arc<RedisIssuer>> {
    connect(&REDIS_AOF, &REDIS_AOF.endpoint()).await
}

/// The TLS server, its certificate checked against the test CA, with the
/// ACL login of its URL.
async fn tls() -> Option<Arc<RedisIssuer>> {
    let url = with_option(
        &REDIS_TLS.endpoint(),
        &format!("sslrootcert={}", tls_file("ca.pem").display()),
    );
    connect(&REDIS_TLS, &url).await
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
    issuer: &Arc<RedisIssuer>,
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
/// 300 ms of waiting, lands near 50 ms). On both servers: the subscription
/// logs in and speaks TLS as the issuer does.
#[tokio::test]
async fn a_waiter_is_granted_at_release_not_at_its_next_poll() {
    for issuer in [aof().await, tls().await].into_iter().flatten() {
        let mut gaps = handovers(
            &issuer,
            "wake-release",
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
    }
}

/// A holder that never releases publishes nothing: the waiter's re-check
/// (a quarter of its TTL) still finds the expired lock, with a higher
/// token.
#[tokio::test]
async fn a_waiter_gets_the_lease_after_the_holders_expiry_without_release() {
    let Some(issuer) = aof().await else {
        return;
    };
    let crashed = issuer
        .try_acquire(&LeaseRequest::new("wake-expiry", Duration::from_secs(1)))
        .await
        .unwrap()
        .expect("free");
    let started = Instant::now();
    let next = issuer
        .acquire(
            &LeaseRequest::new("wake-expiry", Duration::from_secs(2)),
            Duration::from_secs(15),
        )
        .await
        .expect("granted after the expiry");
    let waited = started.elapsed();
    assert!(next.token() > crashed.token());
    // Not before the expiry; within it plus one re-check (500 ms) and a
    // loaded machine's slack.
    assert!(waited > Duration::from_millis(500), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    issuer.release(&next).await.unwrap();
}

/// Six waiters taking the lease five times each: one holder at a time
/// (each checks no other is inside), and the tokens, in the order they
/// were held, strictly rise.
#[tokio::test]
async fn concurrent_waiters_hold_one_at_a_time_with_rising_tokens() {
    let Some(issuer) = aof().await else {
        return;
    };
    let inside = Arc::new(AtomicBool::new(false));
    let tokens: Arc<Mutex<Vec<FencingToken>>> = Arc::default();
    let mut tasks = vec![];
    for _ in 0..6 {
        let (issuer, inside, tokens) = (issuer.clone(), inside.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let request = LeaseRequest::new("wake-crowd", Duration::from_secs(30));
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
    assert_eq!(tokens.len(), 30);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

/// An ACL user without channel rights (Redis 7's default for new users):
/// the release's `PUBLISH` is refused inside the script, the release still
/// happens, and a waiter, which cannot subscribe, polls and is granted.
#[tokio::test]
async fn a_login_without_channel_rights_still_releases_and_waiters_poll() {
    if REDIS_AOF.skipped() {
        return;
    }
    let mut admin = common::raw(&REDIS_AOF.endpoint()).await;
    let prefix = format!("{}:", fencing_testkit::unique_prefix());
    let user = format!("wake-{}", prefix.trim_end_matches(':'));
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&user)
        .arg("on")
        .arg(">wake-secret")
        .arg("resetchannels")
        .arg(format!("~{prefix}*"))
        .arg("+@all")
        .query_async(&mut admin)
        .await
        .expect("ACL SETUSER");
    let url = REDIS_AOF
        .endpoint()
        .replacen("://", &format!("://{user}:wake-secret@"), 1);
    let run = tokio::spawn(async move {
        let issuer = Arc::new(
            RedisConfig::from_url(&url)
                .unwrap()
                .with_durability(Durability::Required)
                .with_prefix(prefix)
                .connect()
                .await
                .expect("login"),
        );
        handovers(
            &issuer,
            "wake-acl",
            3,
            Duration::from_millis(300),
            Waiter::Issuer,
        )
        .await
    })
    .await;
    // Deleting the user drops its connections: only after the run.
    let _: () = redis::cmd("ACL")
        .arg("DELUSER")
        .arg(&user)
        .query_async(&mut admin)
        .await
        .expect("ACL DELUSER");
    let gaps = run.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    assert!(gaps.iter().all(|g| *g < Duration::from_secs(1)), "{gaps:?}");
}

/// The release-to-grant gap, median of 50 handovers, old polling acquire
/// and woken acquire in one run. Ignored: it takes about 30 s and only
/// prints (and checks the woken one is the faster).
#[tokio::test]
#[ignore = "a measurement; run with --ignored --nocapture"]
async fn handover_gap() {
    let Some(issuer) = aof().await else {
        return;
    };
    let mut medians = vec![];
    for how in [Waiter::OldPoll, Waiter::Issuer] {
        let mut gaps = handovers(&issuer, "wake-gap", 50, Duration::from_millis(300), how).await;
        let median = median(&mut gaps);
        println!(
            "redis {how:?}: median {median:?}, max {:?} over {} handovers",
            gaps[gaps.len() - 1],
            gaps.len()
        );
        medians.push(median);
    }
    assert!(medians[1] < medians[0], "{medians:?}");
}
