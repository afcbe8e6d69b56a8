//! Kills the append-only Redis (as a crash would) and restarts it with
//! `integration/services.sh`: tokens keep rising. Its own test binary, so
//! no other test of this crate runs while the server is down.

use std::process::Command;
use std::time::Duration;

use fencing_core::{LeaseRequest, TokenIssuer};
use fencing_harness::env::REDIS_AOF;
use fencing_redis::RedisConfig;

const SERVICES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../integration/services.sh");

#[tokio::test]
async fn tokens_keep_rising_across_a_crash_and_restart() {
    if REDIS_AOF.skipped() {
        return;
    }
    let url = REDIS_AOF.endpoint();
    let issuer = match RedisConfig::new(&url)
        .with_prefix(format!("{}:", fencing_testkit::unique_prefix()))
        .connect_issuer()
        .await
    {
        Ok(i) => i,
        Err(e) => REDIS_AOF.unavailable(&e),
    };
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
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .unwrap();
    let pid = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
        .expect("process_id in INFO");
    fencing_harness::process::signal(pid, fencing_harness::process::Signal::SIGKILL);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let up = Command::new("bash")
        .args([SERVICES, "up", "redis-aof"])
        .status()
        .expect("run services.sh");
    assert!(up.success(), "integration/services.sh up redis-aof failed");

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
