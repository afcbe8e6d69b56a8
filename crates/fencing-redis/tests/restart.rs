//! Kills an append-only Redis (as a crash would) and starts it again on
//! its data: tokens keep rising. The Redis is the test's own (redis-aof's
//! spec, on a free port: `fencing_servers::Private`), not the shared one:
//! test binaries run side by side (nextest), and a crash of the shared
//! server broke the connections of the others' tests.

use std::time::Duration;

use fencing_core::{LeaseRequest, TokenIssuer};
use fencing_harness::env::REDIS_AOF;
use fencing_redis::RedisConfig;
use fencing_servers::Private;

#[tokio::test]
async fn tokens_keep_rising_across_a_crash_and_restart() {
    if REDIS_AOF.skipped() {
        return;
    }
    // Blocking calls (they probe with redis-cli): on their own thread.
    let mut redis = tokio::task::spawn_blocking(|| {
        let aof = fencing_servers::service("redis-aof").expect("redis-aof's spec");
        Private::start(aof, &[])
    })
    .await
    .expect("the thread starting a private redis-server")
    .unwrap_or_else(|e| panic!("{e}"));
    let url = redis.endpoint(&REDIS_AOF);
    let issuer = RedisConfig::new(&url)
        .with_prefix(format!("{}:", fencing_testkit::unique_prefix()))
        .connect_issuer()
        .await
        .unwrap_or_else(|e| panic!("the private redis-aof at {url}: {e}"));
    let ttl = Duration::from_secs(30);
    let mut last = None;
    for _ in 0..20 {
        let lease = issuer
            .acquire(&LeaseRequest::new("crash", ttl), Duration::from_secs(5))
            .await
            .unwrap();
        issuer.release(&lease).await.unwrap();
        last = Some(lease.token());
    }
    let before = last.unwrap();

    // Crash: SIGKILL, no chance to save anything beyond what AOF fsynced.
    redis.kill(0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Started again on the same port and data directory.
    let _redis = tokio::task::spawn_blocking(move || redis.restart(0).map(|()| redis))
        .await
        .expect("the thread restarting the private redis-server")
        .unwrap_or_else(|e| panic!("{e}"));

    // The same issuer reconnects by itself; calls fail with typed errors
    // until it has.
    let started = std::time::Instant::now();
    let after = loop {
        match issuer
            .acquire(&LeaseRequest::new("crash", ttl), Duration::from_secs(5))
            .await
        {
            Ok(lease) => break lease,
            Err(
                e @ (fencing_core::Error::Backend { .. }
                | fencing_core::Error::OutcomeUnknown { .. }),
            ) => {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "no reconnect after 20 s: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("unexpected error while Redis restarts: {e:?}"),
        }
    };
    assert!(
        after.token() > before,
        "token went from {before} to {} across the restart",
        after.token()
    );
}
