//! The nemesis in CI mode (`integration/nemesis.sh` runs the long mode):
//! real partitions, lossy links, kills and pauses on the etcd cluster and
//! the ZooKeeper ensemble in network namespaces, × PostgreSQL and S3 in
//! theirs; clients cut off from the one server that is their issuer and
//! store (the bucket issuer on S3, DynamoDB, on moto); and every issuer with
//! clients whose clocks are skewed by hours or jump during a lease. Each run
//! must accept writes, grant more than once and break no clause of the
//! contract (no stale accept, no refusal without a higher accepted token, a
//! final state some write made).
//!
//! Needs root (network namespaces), iptables and libfaketime:
//! `integration/services.sh up all` installs them. `FENCING_SEED` replays
//! a schedule; a failing run's timeline is written to `target/nemesis/`.

use fencing_integration::nemesis::servers::ClusterKind;
use fencing_integration::nemesis::suite::{self, Mode};
use fencing_testkit::history::HistoryConfig;

const CLIENT: &str = env!("CARGO_BIN_EXE_nemesis-client");

/// One nemesis at a time: two clusters and their clients at once would
/// starve each other on a small machine and prove less.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One cluster's partition runs × every store, each clean.
async fn partitions(kind: ClusterKind) {
    let _one = ONE_AT_A_TIME.lock().await;
    let seed = HistoryConfig::seed_from_env();
    let runs = suite::partition_runs(kind, suite::STORES, Mode::Ci, seed, CLIENT.as_ref()).await;
    let runs = runs.unwrap_or_else(|e| panic!("the nemesis could not run: {e}"));
    assert_eq!(runs.len(), suite::STORES.len());
    for pair in &runs {
        pair.assert_clean();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_of_the_etcd_cluster_let_no_stale_write_in() {
    partitions(ClusterKind::Etcd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_of_the_zookeeper_ensemble_let_no_stale_write_in() {
    partitions(ClusterKind::ZooKeeper).await;
}

/// The single-server pairs (one moto as issuer and store), each clean and
/// under faults: a run none reached proves nothing of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_clients_of_one_server_as_issuer_and_store_get_no_stale_write_in() {
    let _one = ONE_AT_A_TIME.lock().await;
    let seed = HistoryConfig::seed_from_env();
    let runs = suite::single_server_runs(suite::SINGLE_SERVERS, Mode::Ci, seed, CLIENT.as_ref())
        .await
        .unwrap_or_else(|e| panic!("the nemesis could not run: {e}"));
    assert_eq!(runs.len(), suite::SINGLE_SERVERS.len());
    for pair in &runs {
        pair.assert_clean();
        for run in &pair.runs {
            assert!(
                run.faults.values().sum::<usize>() > 0,
                "{run}\nno fault was injected"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_and_jumping_clocks_change_no_verdict_on_any_issuer() {
    let _one = ONE_AT_A_TIME.lock().await;
    let seed = HistoryConfig::seed_from_env();
    let runs = suite::clock_runs(&suite::clock_issuers(), Mode::Ci, seed, CLIENT.as_ref()).await;
    let runs = runs.unwrap_or_else(|e| panic!("the clock runs could not run: {e}"));
    for pair in &runs {
        pair.assert_clean();
        // The skew must have happened, or the run proves nothing about it.
        for run in &pair.runs {
            let skewed: Vec<usize> = run.clock_skew.keys().copied().collect();
            assert!(
                [1, 2].iter().all(|c| skewed.contains(c)),
                "{run}\nclients 2 and 3 run 5 h slow and 7 h fast, but their clocks were seen off only for clients {skewed:?}: is libfaketime working?"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fencing_the_same_checker_sees_stale_accepts() {
    let _one = ONE_AT_A_TIME.lock().await;
    let seed = HistoryConfig::seed_from_env();
    let report = suite::unfenced_control("redis", seed, CLIENT.as_ref())
        .await
        .unwrap_or_else(|e| panic!("the control could not run: {e}"));
    println!("{report}");
    assert!(
        report.stale_accepts > 0 && report.refused == 0,
        "clients that present a constant token were never caught writing under a superseded lease: \
         the checker could not catch a broken store\n{report}"
    );
}

#[test]
fn a_topology_leaves_no_namespace_behind_even_when_its_owner_panics() {
    if let Err(e) = fencing_integration::nemesis::net::preflight() {
        panic!("{e}");
    }
    let built = std::thread::spawn(|| {
        let mut net = fencing_integration::nemesis::net::Net::new().expect("a bridge");
        let host = net.add_host("probe").expect("a host");
        assert!(namespaces().contains(&host.ns));
        panic!("{}", host.ns);
    })
    .join()
    .expect_err("the thread panics");
    let ns = built
        .downcast_ref::<String>()
        .expect("the namespace's name")
        .clone();
    assert!(
        !namespaces().contains(&ns),
        "{ns} outlived the topology that made it"
    );
}

fn namespaces() -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
