//! Leader change on the 3-server ZooKeeper ensemble (`FENCING_ZK_ENSEMBLE`,
//! default ports 11181/12181/13181; start it with
//! `integration/services.sh up zk-ensemble`), through the testkit's harness
//! ([`fencing_harness::failover`]): tokens strictly increasing in grant
//! order and no stale write accepted while the leader is killed and
//! restarted; and, ZooKeeper's own, a new epoch in the czxid tokens.

use std::time::Duration;

use fencing_core::FencingToken;
use fencing_harness::env::ZK_ENSEMBLE;
use fencing_harness::failover::{Cluster, FailoverConfig, leader_kill};
use fencing_zookeeper::{TokenSource, ZkConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_kill_keeps_tokens_increasing_and_refuses_stale_writes() {
    let prefix = format!("/fencing-test/{}", fencing_testkit::unique_prefix());
    let config = FailoverConfig::with_ttl(Duration::from_secs(6));
    let Some(report) = leader_kill(
        &Cluster::new(ZK_ENSEMBLE),
        &config,
        |endpoints| async move {
            ZkConfig::new(&endpoints)
                .with_prefix(&prefix)
                .with_token_source(TokenSource::Czxid)
                .connect_issuer()
                .await
        },
    )
    .await
    else {
        return;
    };

    // The czxid's high 32 bits are the epoch: a new leader starts a higher one.
    let epoch = |t: &FencingToken| t.get() >> 32;
    let (first, last) = (
        report.grants.first().expect("grants"),
        report.grants.last().expect("grants"),
    );
    println!(
        "czxid epochs: {} before the kill, {} at the end",
        epoch(first),
        epoch(last)
    );
    assert!(
        epoch(last) > epoch(first),
        "no new epoch after the leader change: {first} .. {last}"
    );
}
