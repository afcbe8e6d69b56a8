//! `TokenIssuer::verify` on a real ZooKeeper: the standalone server
//! (`FENCING_ZK_ADDR`) and the 3-server ensemble (`FENCING_ZK_ENSEMBLE`;
//! `integration/services.sh up zk-ensemble`), one of whose followers is
//! killed and restarted.

use std::time::Duration;

use fencing_core::TokenIssuer;
use fencing_core::safety::{self, SafetyCheck, Verdict};
use fencing_harness::env::{Server, ZK_ENSEMBLE, ZOOKEEPER};
use fencing_harness::error_chain;
use fencing_harness::failover::Cluster;
use fencing_zookeeper::{TokenSource, ZkIssuer};

async fn connect(connect_string: &str, server: Server) -> Option<ZkIssuer> {
    if server.skipped() {
        return None;
    }
    let prefix = format!("/fencing-test/{}", fencing_testkit::unique_prefix());
    match ZkIssuer::connect_with(connect_string, &prefix, TokenSource::Czxid).await {
        Ok(issuer) => Some(issuer),
        Err(e) => server.unavailable(&error_chain(&e)),
    }
}

/// The one check named `name`.
fn check<'a>(checks: &'a [SafetyCheck], name: &str) -> &'a SafetyCheck {
    let mut found = checks.iter().filter(|c| c.name == name);
    let first = found
        .next()
        .unwrap_or_else(|| panic!("no {name:?} check in {checks:#?}"));
    assert!(found.next().is_none(), "two {name:?} checks in {checks:#?}");
    first
}

fn server_checks(checks: &[SafetyCheck]) -> Vec<&SafetyCheck> {
    checks
        .iter()
        .filter(|c| c.name.starts_with("server "))
        .collect()
}

#[tokio::test]
async fn verify_warns_that_a_standalone_server_has_no_failover() {
    let Some(issuer) = connect(&ZOOKEEPER.endpoint(), ZOOKEEPER).await else {
        return;
    };
    let checks = issuer.verify().await.expect("verify");
    assert!(safety::all_safe(&checks), "{checks:#?}");
    let ensemble = check(&checks, "ensemble");
    assert_eq!(ensemble.verdict, Verdict::Warn, "{checks:#?}");
    assert!(ensemble.detail.contains("no failover"), "{ensemble:?}");
    let servers = server_checks(&checks);
    assert_eq!(servers.len(), 1, "{checks:#?}");
    assert_eq!(servers[0].verdict, Verdict::Warn, "{checks:#?}");
    assert!(servers[0].detail.starts_with("standalone"), "{checks:#?}");
    assert_eq!(
        check(&checks, "tokens rise").verdict,
        Verdict::Pass,
        "{checks:#?}"
    );
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
    assert_eq!(
        check(&checks, "one ensemble").verdict,
        Verdict::Unsafe,
        "{checks:#?}"
    );
    assert!(!safety::all_safe(&checks));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_sees_the_ensemble_and_warns_of_a_server_down() {
    let Some(issuer) = connect(&ZK_ENSEMBLE.endpoint(), ZK_ENSEMBLE).await else {
        return;
    };
    let checks = issuer.verify().await.expect("verify");
    assert!(safety::all_safe(&checks), "{checks:#?}");
    let ensemble = check(&checks, "ensemble");
    assert_eq!(ensemble.verdict, Verdict::Pass, "{checks:#?}");
    assert!(
        ensemble.detail.starts_with("3 voting servers"),
        "{ensemble:?}"
    );
    let servers = server_checks(&checks);
    assert_eq!(servers.len(), 3, "{checks:#?}");
    assert!(
        servers.iter().all(|c| c.verdict == Verdict::Pass),
        "{checks:#?}"
    );
    let leader = check(&checks, "leader");
    assert_eq!(leader.verdict, Verdict::Pass, "{checks:#?}");
    assert!(leader.detail.contains("2 synced follower"), "{leader:?}");
    assert_eq!(
        check(&checks, "tokens rise").verdict,
        Verdict::Pass,
        "{checks:#?}"
    );

    // A follower down: the ensemble still grants (a quorum of 2), and the
    // server is a warning, not a failure of verify.
    let cluster = Cluster::new(ZK_ENSEMBLE);
    let (pid, port) = cluster.a_follower();
    let _down = cluster.kill((pid, port), "TERM");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let checks = issuer.verify().await.expect("verify with a server down");
    assert!(safety::all_safe(&checks), "{checks:#?}");
    let down: Vec<_> = server_checks(&checks)
        .into_iter()
        .filter(|c| c.verdict == Verdict::Warn)
        .collect();
    assert_eq!(down.len(), 1, "{checks:#?}");
    assert!(down[0].name.ends_with(&port.to_string()), "{down:?}");
    assert!(down[0].detail.contains("unreachable"), "{down:?}");
    assert_eq!(
        check(&checks, "leader").verdict,
        Verdict::Pass,
        "{checks:#?}"
    );
    assert_eq!(
        check(&checks, "tokens rise").verdict,
        Verdict::Pass,
        "{checks:#?}"
    );
}
