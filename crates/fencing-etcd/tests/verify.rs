//! `TokenIssuer::verify` on a real etcd: the single server
//! (`FENCING_ETCD_ENDPOINTS`) and the 3-member cluster
//! (`FENCING_ETCD_CLUSTER_ENDPOINTS`; `integration/services.sh up
//! etcd-cluster`), one of whose followers is killed and restarted.

use std::time::Duration;

use fencing_core::TokenIssuer;
use fencing_core::safety::{self, SafetyCheck, Verdict};
use fencing_etcd::EtcdIssuer;
use fencing_harness::env::{ETCD, ETCD_CLUSTER, Server};
use fencing_harness::failover::Cluster;

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
    match EtcdIssuer::connect(endpoints).await {
        Ok(issuer) => Some(
            issuer
                .with_prefix(format!("{}/", fencing_testkit::unique_prefix()))
                .expect("prefix"),
        ),
        Err(e) => server.unavailable(&e),
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

fn member_checks(checks: &[SafetyCheck]) -> Vec<&SafetyCheck> {
    checks
        .iter()
        .filter(|c| c.name.starts_with("member "))
        .collect()
}

#[tokio::test]
async fn verify_warns_that_a_single_member_has_no_failover() {
    let Some(issuer) = connect(&endpoints(ETCD), ETCD).await else {
        return;
    };
    let checks = issuer.verify().await.expect("verify");
    assert!(safety::all_safe(&checks), "{checks:#?}");
    let members = check(&checks, "members");
    assert_eq!(members.verdict, Verdict::Warn, "{members:?}");
    assert!(members.detail.contains("no failover"), "{members:?}");
    let each = member_checks(&checks);
    assert_eq!(each.len(), 1, "{checks:#?}");
    assert_eq!(each[0].verdict, Verdict::Pass, "{checks:#?}");
    for name in ["leader", "endpoints", "alarms", "tokens rise"] {
        assert_eq!(check(&checks, name).verdict, Verdict::Pass, "{checks:#?}");
    }
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
    assert!(safety::all_safe(&checks), "{checks:#?}");
    let members = check(&checks, "members");
    assert_eq!(members.verdict, Verdict::Pass, "{members:?}");
    assert!(
        members.detail.starts_with("3 voting members"),
        "{members:?}"
    );
    let each = member_checks(&checks);
    assert_eq!(each.len(), 3, "{checks:#?}");
    assert!(
        each.iter().all(|c| c.verdict == Verdict::Pass),
        "{checks:#?}"
    );
    for name in ["leader", "endpoints", "alarms", "tokens rise"] {
        assert_eq!(check(&checks, name).verdict, Verdict::Pass, "{checks:#?}");
    }

    // A follower down: the cluster still grants (a quorum of 2), and the
    // member is a warning, not a failure of verify.
    let cluster = Cluster::new(ETCD_CLUSTER);
    let (pid, port) = cluster.a_follower();
    let _down = cluster.kill((pid, port), "TERM");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let checks = issuer.verify().await.expect("verify with a member down");
    assert!(safety::all_safe(&checks), "{checks:#?}");
    let each = member_checks(&checks);
    let down: Vec<_> = each.iter().filter(|c| c.verdict == Verdict::Warn).collect();
    assert_eq!(down.len(), 1, "{checks:#?}");
    assert!(down[0].detail.contains("unreachable"), "{down:?}");
    assert!(down[0].detail.contains(&port.to_string()), "{down:?}");
    assert_eq!(
        check(&checks, "leader").verdict,
        Verdict::Pass,
        "{checks:#?}"
    );
    assert_eq!(
        check(&checks, "endpoints").verdict,
        Verdict::Warn,
        "{checks:#?}"
    );
    assert_eq!(
        check(&checks, "tokens rise").verdict,
        Verdict::Pass,
        "{checks:#?}"
    );
}
