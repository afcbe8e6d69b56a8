//! The in-memory store, and the shared blob loop on the in-memory blob
//! backend, against the whole store suite; plus the zombie scenario and the
//! history checker on both.

use std::sync::Arc;
use std::time::Duration;

use fencing::blob::BlobStore;
use fencing::memory::{MemoryBlobBackend, MemoryIssuer, MemoryStore};
use fencing::{FencedStore, TokenIssuer};
use fencing_testkit::history::{HistoryConfig, run_history};
use fencing_testkit::zombie::zombie_scenario;

const TTL: Duration = Duration::from_millis(150);

mod memory_store {
    use super::*;
    async fn store() -> Option<Arc<dyn FencedStore>> {
        Some(Arc::new(MemoryStore::new()))
    }
    fencing_testkit::store_conformance!(store);
}

mod blob_store {
    use super::*;
    async fn store() -> Option<Arc<dyn FencedStore>> {
        Some(Arc::new(BlobStore::new(MemoryBlobBackend::new())))
    }
    fencing_testkit::store_conformance!(store);
}

fn stores() -> Vec<Arc<dyn FencedStore>> {
    vec![
        Arc::new(MemoryStore::new()),
        Arc::new(BlobStore::new(MemoryBlobBackend::new())),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zombie_is_refused() {
    for store in stores() {
        for fence_on_acquire in [false, true] {
            let issuer = MemoryIssuer::new();
            let events = zombie_scenario(&issuer, &*store, TTL, fence_on_acquire, |_| {}).await;
            assert!(
                events
                    .iter()
                    .any(|e| matches!(e.step, fencing_testkit::zombie::Step::Refused { .. }))
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_checker_finds_no_stale_accept() {
    for store in stores() {
        let issuer: Arc<dyn TokenIssuer> = Arc::new(MemoryIssuer::new());
        let config = HistoryConfig::quick(HistoryConfig::seed_from_env(), TTL);
        let report = run_history(issuer, store, &config).await;
        println!("{report}");
        report.assert_clean();
        assert!(report.tally.refused > 0, "no zombie was refused: {report}");
    }
}
