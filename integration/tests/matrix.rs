//! Figure 9-6 and the randomized history checker on every issuer × every
//! store. One row per issuer runs all stores at once, two rows at a time; a failure names the
//! pair and the seed (replay with `FENCING_SEED`).
//!
//! `FENCING_MATRIX_LONG=1` runs the long mode: 16 clients and at least
//! 10,000 operations per pair.

use std::time::Duration;

use fencing_integration::{for_each, issuer, issuers, store, stores};
use fencing_testkit::history::{HistoryConfig, HistoryReport, run_history};
use fencing_testkit::zombie::zombie_scenario;

fn config(ttl: Duration) -> HistoryConfig {
    let seed = HistoryConfig::seed_from_env();
    if std::env::var("FENCING_MATRIX_LONG").is_ok_and(|v| v == "1") {
        HistoryConfig::long(seed, ttl)
    } else {
        HistoryConfig::quick(seed, ttl)
    }
}

async fn row(issuer_name: &'static str) {
    let Some((_, ttl)) = issuer(issuer_name).await else {
        return;
    };
    let mut pairs = Vec::new();
    let store_names = stores();
    for &store_name in &store_names {
        pairs.push(tokio::spawn(async move {
            let (Some((issuer, ttl)), Some(store)) =
                (issuer(issuer_name).await, store(store_name).await)
            else {
                return Ok(None);
            };
            let pair = format!("{issuer_name} × {store_name}");
            zombie_scenario(&*issuer, &*store, ttl, false, |_| {}).await;
            let report = run_history(issuer, store, &config(ttl)).await;
            let report = HistoryReport { pair, ..report };
            if report.tally.violations.is_empty() && report.tally.accepted > 0 {
                Ok(Some(report))
            } else {
                Err(report)
            }
        }));
    }
    let mut failures = Vec::new();
    for (pair, &store_name) in pairs.into_iter().zip(&store_names) {
        match pair.await {
            Ok(Ok(Some(report))) => println!("{report}"),
            Ok(Ok(None)) => println!("{issuer_name} × {store_name}: skipped (FENCING_SKIP)"),
            Ok(Err(report)) => failures.push(format!("{report}: {:?}", report.tally.violations)),
            Err(panic) => failures.push(format!(
                "{issuer_name} × {store_name} (ttl {ttl:?}): {panic}"
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "matrix failures:\n{}",
        failures.join("\n")
    );
}

/// Every issuer's row, two at a time (as two test threads ran them): the
/// issuers are the registry's, so a new backend joins the matrix by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_issuer_against_every_store() {
    for_each(issuers(), 2, row).await;
}
