//! The in-memory store, and the shared blob loop on the in-memory blob
//! backend, against the whole store suite (the zombie scenario and the
//! history checker included): the suite runs here first, with no server.

use std::sync::Arc;
use std::time::Duration;

use fencing_core::FencedStore;
use fencing_core::adapter::blob::BlobStore;
use fencing_core::memory::{MemoryBlobBackend, MemoryStore};

const TTL: Duration = Duration::from_millis(150);

mod memory_store {
    use super::*;
    async fn store() -> Option<Arc<dyn FencedStore>> {
        Some(Arc::new(MemoryStore::new()))
    }
    fencing_testkit::store_conformance!(store, TTL);

    #[tokio::test]
    async fn floor_refuses_on_every_key() {
        fencing_testkit::store::floor_refuses_on_every_key(&MemoryStore::new()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn floor_raised_and_marks_removed_under_zombie_writes() {
        fencing_testkit::store::floor_raised_and_marks_removed_under_zombie_writes(Arc::new(
            MemoryStore::new(),
        ))
        .await;
    }
}

mod blob_store {
    use super::*;
    async fn backend() -> Option<MemoryBlobBackend> {
        Some(MemoryBlobBackend::new())
    }
    fencing_testkit::blob_store_conformance!(backend, TTL);
}

/// In a quick history some client pauses past its TTL while others want
/// the lease; in process that all but always gets a zombie refused. None
/// refused would mean the checker's pauses stopped making zombies, and the
/// history check of every suite would prove less.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_checker_sees_zombies_refused() {
    let stores: [Arc<dyn FencedStore>; 2] = [
        Arc::new(MemoryStore::new()),
        Arc::new(BlobStore::new(MemoryBlobBackend::new())),
    ];
    for store in stores {
        let report =
            fencing_testkit::store::history_checker_finds_no_stale_accept(store, TTL).await;
        assert!(report.tally.refused > 0, "no zombie was refused: {report}");
    }
}
