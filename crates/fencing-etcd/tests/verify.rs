//! `TokenIssuer::verify` on a real etcd: the single server
//! (`FENCING_ETCD_ENDPOINTS`) and the 3-member cluster
//! (`FENCING_ETCD_CLUSTER_ENDPOINTS`; `integration/services.sh up
//! etcd-cluster`), one of whose followers is killed and restarted.

use fencing_core::TokenIssuer;
use fencing_core::safety::{self, Verdict};
use fencing_etcd::{EtcdConfig, EtcdIssuer};
use fencing_harness::env::{ETCD, ETCD_CLUSTER, Server};
use fencing_harness::verify::{
    a_follower_down, assert_cluster_checks, assert_verdicts, check, checks_of,
};

fn endpoints(server: Server) -> Vec<String> {
    server
        .endpoint()
        .split(',')
        .map(|e| e.trim().to_owned())
        .collect()
}

async fn connect(endpoints: &[String], server: Server) -> Option<EtcdIssuer> {
    if server.skipped() {
        return None;
    }
    let config =
        EtcdConfig::new(endpoints).with_prefix(format!("{}/", fencing_testkit::unique_prefix()));
    match config.connect_issuer().await {
        Ok(issuer) => Some(issuer),
        Err(e) => server.unavailable(&e),
    }
}

/// What `verify` must pass on any healthy etcd.
const HEALTHY: &[(&str, Verdict)] = &[
    ("leader", Verdict::Pass),
    ("endpoints", Verdict::Pass),
    ("alarms", Verdict::Pass),
    ("tokens rise", Verdict::Pass),
];

#[tokio::test]
async fn verify_warns_that_a_single_member_has_no_failover() {
    let Some(issuer) = connect(&endpoints(ETCD), ETCD).await else {
        return;
    };
    let checks = issuer.verify().await.expect("verify");
    let summary = ("members", Verdict::Warn, "no failover");
    assert_cluster_checks(&checks, summary, "member ", 1, Verdict::Pass);
    assert_verdicts(&checks, HEALTHY);
}

/// Endpoints of two clusters: the client spreads calls over both, whose
/// revisions are unrelated.
#[tokio::test]
async fn verify_finds_endpoints_of_two_clusters_unsafe() {
    if ETCD_CLUSTER.skipped() {
        return;
    }
    let mut mixed = endpoints(ETCD);
    mixed.extend(endpoints(ETCD_CLUSTER));
    let Some(issuer) = connect(&mixed, ETCD).await else {
        return;
    };
    let checks = issuer.verify().await.expect("verify reports, not fails");
    let endpoints = check(&checks, "endpoints");
    assert_eq!(endpoints.verdict, Verdict::Unsafe, "{checks:#?}");
    assert!(!safety::all_safe(&checks));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_sees_the_cluster_and_warns_of_a_member_down() {
    let Some(issuer) = connect(&endpoints(ETCD_CLUSTER), ETCD_CLUSTER).await else {
        return;
    };
    let checks = issuer.verify().await.expect("verify");
    let summary = ("members", Verdict::Pass, "3 voting members");
    assert_cluster_checks(&checks, summary, "member ", 3, Verdict::Pass);
    assert!(check(&checks, "members").detail.starts_with(summary.2));
    assert_verdicts(&checks, HEALTHY);

    // A follower down: the cluster still grants (a quorum of 2), and the
    // member is a warning, not a failure of verify.
    let (port, _down) = a_follower_down(ETCD_CLUSTER).await;
    let checks = issuer.verify().await.expect("verify with a member down");
    assert!(safety::all_safe(&checks), "{checks:#?}");
    let each = checks_of(&checks, "member ");
    let down: Vec<_> = each.iter().filter(|c| c.verdict == Verdict::Warn).collect();
    assert_eq!(down.len(), 1, "{checks:#?}");
    assert!(down[0].detail.contains("unreachable"), "{down:?}");
    assert!(down[0].detail.contains(&port.to_string()), "{down:?}");
    assert_verdicts(
        &checks,
        &[
            ("leader", Verdict::Pass),
            ("endpoints", Verdict::Warn),
            ("tokens rise", Verdict::Pass),
        ],
    );
}
