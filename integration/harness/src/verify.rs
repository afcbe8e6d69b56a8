//! Reading what `TokenIssuer::verify` reports, for the tests of the
//! clustered issuers (etcd, ZooKeeper): one check by name, the per-member
//! checks, expected verdicts, and a follower taken down.

use std::time::Duration;

use fencing_core::safety::{SafetyCheck, Verdict};

use crate::env::Server;
use crate::failover::{Cluster, MemberDown};
use crate::process::Signal;

/// The one check named `name`.
///
/// # Panics
/// If there is none, or more than one.
pub fn check<'a>(checks: &'a [SafetyCheck], name: &str) -> &'a SafetyCheck {
    let mut found = checks.iter().filter(|c| c.name == name);
    let first = found
        .next()
        .unwrap_or_else(|| panic!("no {name:?} check in {checks:#?}"));
    assert!(found.next().is_none(), "two {name:?} checks in {checks:#?}");
    first
}

/// The checks whose name starts with `prefix` (`"member "`, `"server "`):
/// one per member of the cluster.
pub fn checks_of<'a>(checks: &'a [SafetyCheck], prefix: &str) -> Vec<&'a SafetyCheck> {
    checks
        .iter()
        .filter(|c| c.name.starts_with(prefix))
        .collect()
}

/// Asserts each named check has its verdict.
///
/// # Panics
/// Naming the first that does not, with every check.
pub fn assert_verdicts(checks: &[SafetyCheck], expected: &[(&str, Verdict)]) {
    for (name, verdict) in expected {
        assert_eq!(check(checks, name).verdict, *verdict, "{name}: {checks:#?}");
    }
}

/// What `verify` reports on a healthy cluster of `count` members: every
/// check safe; the cluster's own check (`"members"`, `"ensemble"`) with
/// `verdict` and a detail containing `detail`; `count` member checks
/// (named `member`…), each with `each`. Returns the member checks.
///
/// # Panics
/// Naming what differs, with every check.
pub fn assert_cluster_checks<'a>(
    checks: &'a [SafetyCheck],
    (cluster, verdict, detail): (&str, Verdict, &str),
    member: &str,
    count: usize,
    each: Verdict,
) -> Vec<&'a SafetyCheck> {
    assert!(fencing_core::safety::all_safe(checks), "{checks:#?}");
    let summary = check(checks, cluster);
    assert_eq!(summary.verdict, verdict, "{checks:#?}");
    assert!(summary.detail.contains(detail), "{summary:?}");
    let members = checks_of(checks, member);
    assert_eq!(members.len(), count, "{checks:#?}");
    assert!(members.iter().all(|c| c.verdict == each), "{checks:#?}");
    members
}

/// Takes one follower of `cluster` down (SIGTERM) and gives the others a
/// second to notice; returns its port and the guard that restarts it.
pub async fn a_follower_down(cluster: Server) -> (u16, MemberDown) {
    let cluster = Cluster::new(cluster);
    let (pid, port) = cluster.a_follower();
    let down = cluster.kill((pid, port), Signal::SIGTERM);
    tokio::time::sleep(Duration::from_secs(1)).await;
    (port, down)
}
