//! The long mode of the history checker on a few pairs: 16 clients, at
//! least 10,000 fenced operations per pair, random pauses past the TTL.
//! (`FENCING_MATRIX_LONG=1` runs the same on every pair of the matrix.)

use fencing_integration::{issuer, store};
use fencing_testkit::history::{HistoryConfig, HistoryReport, run_history};

async fn long_run(issuer_name: &str, store_name: &str) {
    let (Some((issuer, ttl)), Some(store)) = (issuer(issuer_name).await, store(store_name).await)
    else {
        return;
    };
    let started = std::time::Instant::now();
    let report = run_history(
        issuer,
        store,
        &HistoryConfig::long(HistoryConfig::seed_from_env(), ttl),
    )
    .await;
    let report = HistoryReport {
        pair: format!("{issuer_name} × {store_name}"),
        ..report
    };
    println!("{report} in {:.1?}", started.elapsed());
    report.assert_clean();
    assert!(
        report.tally.operations >= 10_000,
        "long mode ran only {} operations",
        report.tally.operations
    );
    assert!(
        report.tally.refused > 0,
        "no zombie was refused in {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_x_postgres() {
    long_run("memory", "postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_x_mariadb() {
    long_run("memory", "mariadb").await;
}

/// The object stores' one read-check-conditional-write loop, on the GCS
/// emulator: the same loop on single-threaded moto (S3) took 190 s of CI
/// for these 10,000 operations, against about 20 s here. S3's own
/// precondition keeps its short history in the matrix and its nemesis run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_x_gcs() {
    long_run("memory", "gcs").await;
}
