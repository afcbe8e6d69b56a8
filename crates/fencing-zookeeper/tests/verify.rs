//! `TokenIssuer::verify` on a real ZooKeeper: the standalone server
//! (`FENCING_ZK_ADDR`) and the 3-server ensemble (`FENCING_ZK_ENSEMBLE`;
//! `integration/services.sh up zk-ensemble`), one of whose followers is
//! killed and restarted.

use fencing_core::TokenIssuer;
use fencing_core::safety::{self, Verdict};
use fencing_harness::env::{Server, ZK_ENSEMBLE, ZOOKEEPER};
use fencing_harness::error_chain;
use fencing_harness::verify::{
    a_follower_down, assert_cluster_checks, assert_verdicts, check, checks_of,
};
use fencing_zookeeper::{TokenSource, ZkConfig, ZkIssuer};

async fn connect(connect_string: &str, server: Server) -> Option<ZkIssuer> {
    if server.skipped() {
        return None;
    }
    let prefix = format!("/fencing-test/{}", fencing_testkit::unique_prefix());
    match ZkConfig::new(connect_string)
        .with_prefix(&prefix)
        .with_token_source(TokenSource::Czxid)
        .connect_issuer()
        .await
    {
        Ok(issuer) => Some(issuer),
        Err(e) => server.unavailable(&error_chain(&e)),
    }
}

#[tokio::test]
async fn verify_warns_that_a_standalone_server_has_no_failover() {
    let Some(issuer) = connect(&ZOOKEEPER.endpoint(), ZOOKEEPER).await else {
        return;
    };
    let checks = issuer.verify().await.expect("verify");
    let summary = ("ensemble", Verdict::Warn, "no failover");
    let servers = assert_cluster_checks(&checks, summary, "server ", 1, Verdict::Warn);
    assert!(servers[0].detail.starts_with("standalone"), "{checks:#?}");
    assert_verdicts(&checks, &[("tokens rise", Verdict::Pass)]);
}

/// A connect string naming a standalone server and an ensemble's server:
/// sessions land on either, whose zxids are unrelated.
#[tokio::test]
async fn verify_finds_a_connect_string_of_two_ensembles_unsafe() {
    if ZK_ENSEMBLE.skipped() {
        return;
    }
    let ensemble = ZK_ENSEMBLE.endpoint();
    let one_of_the_ensemble = ensemble.split(',').next().expect("a server");
    let mixed = format!("{},{one_of_the_ensemble}", ZOOKEEPER.endpoint());
    let Some(issuer) = connect(&mixed, ZOOKEEPER).await else {
        return;
    };
    let checks = issuer.verify().await.expect("verify reports, not fails");
    assert_verdicts(&checks, &[("one ensemble", Verdict::Unsafe)]);
    assert!(!safety::all_safe(&checks));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_sees_the_ensemble_and_warns_of_a_server_down() {
    let Some(issuer) = connect(&ZK_ENSEMBLE.endpoint(), ZK_ENSEMBLE).await else {
        return;
    };
    let checks = issuer.verify().await.expect("verify");
    let summary = ("ensemble", Verdict::Pass, "3 voting servers");
    assert_cluster_checks(&checks, summary, "server ", 3, Verdict::Pass);
    assert!(check(&checks, "ensemble").detail.starts_with(summary.2));
    assert_verdicts(
        &checks,
        &[("leader", Verdict::Pass), ("tokens rise", Verdict::Pass)],
    );
    let leader = check(&checks, "leader");
    assert!(leader.detail.contains("2 synced follower"), "{leader:?}");

    // A follower down: the ensemble still grants (a quorum of 2), and the
    // server is a warning, not a failure of verify.
    let (port, _down) = a_follower_down(ZK_ENSEMBLE).await;
    let checks = issuer.verify().await.expect("verify with a server down");
    assert!(safety::all_safe(&checks), "{checks:#?}");
    let down: Vec<_> = checks_of(&checks, "server ")
        .into_iter()
        .filter(|c| c.verdict == Verdict::Warn)
        .collect();
    assert_eq!(down.len(), 1, "{checks:#?}");
    assert!(down[0].name.ends_with(&port.to_string()), "{down:?}");
    assert!(down[0].detail.contains("unreachable"), "{down:?}");
    assert_verdicts(
        &checks,
        &[("leader", Verdict::Pass), ("tokens rise", Verdict::Pass)],
    );
}
