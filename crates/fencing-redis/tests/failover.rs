//! A failover of a replicated pair (redis-replica's spec): the primary is
//! killed and its replica promoted with `REPLICAOF NO ONE`, as Sentinel or
//! an operator would. With `Durability::Replicated`, every token handed out
//! had reached the replica, so tokens keep rising on the promoted node.
//! The pair is the test's own, on free ports (`fencing_servers::Private`),
//! not the shared one: test binaries run side by side (nextest), and
//! tearing the shared pair apart would fail the other binaries' tests of
//! it.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::raw;
use fencing_core::{Error, FencingToken, LeaseRequest, TokenIssuer};
use fencing_harness::env::{REDIS_PRIMARY, REDIS_REPLICA};
use fencing_redis::{Durability, RedisConfig};
use fencing_servers::Private;

const TTL: Duration = Duration::from_secs(30);

async fn info(url: &str, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(&mut raw(url).await)
        .await
        .unwrap()
}

async fn pid_of(url: &str) -> String {
    info(url, "server")
        .await
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .expect("process_id in INFO")
        .trim()
        .to_owned()
}

fn signal(signal: &str, pid: &str) {
    assert!(
        Command::new("kill")
            .args([signal, pid])
            .status()
            .unwrap()
            .success(),
        "kill {signal} {pid}"
    );
}

/// A replicated pair of the test's own (redis-replica's spec: an
/// append-only primary, its replica following it), linked up. Stopped
/// when dropped, the replica continued first if the test left it
/// SIGSTOPped. Blocking calls (they probe with redis-cli): on their own
/// thread.
async fn private_pair() -> Private {
    tokio::task::spawn_blocking(|| {
        let pair = fencing_servers::service("redis-replica").expect("redis-replica's spec");
        let pair = Private::start(pair, &[])?;
        pair.setup()?;
        Ok::<_, String>(pair)
    })
    .await
    .expect("the thread starting a private replicated pair")
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn with_wait_tokens_keep_rising_across_a_promotion() {
    if REDIS_PRIMARY.skipped() || REDIS_REPLICA.skipped() {
        return;
    }
    let pair = private_pair().await;
    let primary = pair.endpoint(&REDIS_PRIMARY);
    let replica = REDIS_REPLICA.endpoint_at(pair.member(1).port);
    let prefix = format!("{}:", fencing_testkit::unique_prefix());
    let durability = Durability::Replicated {
        replicas: 1,
        // Room for a loaded two-core machine: the test is about tokens
        // across a promotion, not about how fast a replica acknowledges
        // (a 500 ms WAIT timed out here once while a build ran).
        timeout: Duration::from_secs(3),
    };
    let issuer = match RedisConfig::new(&primary)
        .with_durability(durability)
        .with_prefix(prefix.clone())
        .connect_issuer()
        .await
    {
        Ok(i) => i,
        Err(e) => panic!("the private primary at {primary}: {e}"),
    };
    let replica_pid = pid_of(&replica).await;
    let mut last = FencingToken::ZERO;
    for _ in 0..5 {
        let lease = issuer
            .acquire(&LeaseRequest::new("r", TTL), Duration::from_secs(5))
            .await
            .unwrap();
        assert!(lease.token() > last);
        issuer.release(&lease).await.unwrap();
        last = lease.token();
    }

    // The replica stops reading (a stall, a partition): still connected,
    // it acknowledges nothing. A grant it has not acknowledged is not
    // handed out, and the lock is given back.
    signal("-STOP", &replica_pid);
    let started = Instant::now();
    match issuer.try_acquire(&LeaseRequest::new("r", TTL)).await {
        Err(e @ Error::Backend { .. }) => {
            let chain = fencing_harness::error_chain(&e);
            assert!(chain.contains("acknowledged"), "{chain}");
        }
        other => panic!("a grant no replica acknowledged must fail, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(450));
    assert_eq!(
        issuer.holder("r").await.unwrap(),
        None,
        "the lease was not released"
    );
    signal("-CONT", &replica_pid);

    // One more acknowledged grant, then the primary dies at once, its
    // lease still held (short, so the promoted node frees it soon).
    let lease = issuer
        .acquire(
            &LeaseRequest::new("r", Duration::from_secs(1)),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert!(lease.token() > last);
    last = lease.token();
    signal("-9", &pid_of(&primary).await);

    // Promote the replica, as Sentinel or an operator would.
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut raw(&replica).await)
        .await
        .unwrap();
    assert!(info(&replica, "replication").await.contains("role:master"));

    // The promoted node is a lone append-only primary: safe to grant on.
    let promoted = RedisConfig::new(&replica)
        .with_prefix(prefix)
        .connect_issuer()
        .await
        .unwrap();
    let next = promoted
        .acquire(&LeaseRequest::new("r", TTL), Duration::from_secs(10))
        .await
        .unwrap();
    assert!(
        next.token() > last,
        "the promoted replica granted {} after {last} was handed out",
        next.token()
    );
}
