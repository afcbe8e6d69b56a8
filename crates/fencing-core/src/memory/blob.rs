use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;

use super::MemoryStore;
use crate::adapter::blob::{BlobBackend, BlobVersion, BlobWrite, StoredObject, WriteOutcome};
use crate::{Limits, Result};

/// Objects in process memory with a version that changes on every write,
/// like a GCS generation. Wrap it in [`BlobStore`](crate::adapter::blob::BlobStore)
/// to test the shared compare-and-swap loop with no server.
#[derive(Debug, Default)]
pub struct MemoryBlobBackend {
    objects: Mutex<HashMap<String, Object>>,
    generation: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    precondition_failures: AtomicU64,
}

#[derive(Debug, Clone)]
struct Object {
    generation: u64,
    body: Bytes,
    /// By this process's wall clock, which is this in-memory server's.
    modified: SystemTime,
}

impl Object {
    fn stored(&self, len: usize) -> StoredObject {
        StoredObject::new(
            BlobVersion::new(self.generation.to_string()),
            self.body.slice(..len.min(self.body.len())),
        )
        .modified_at(Some(self.modified))
        .answered_at(Some(SystemTime::now()))
    }
}

impl MemoryBlobBackend {
    /// No objects.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads that reached the backend, of present objects or absent ones.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Deletes an object unconditionally, as a person or a lifecycle rule
    /// would; `true` if it was there.
    pub fn remove(&self, key: &str) -> bool {
        self.objects.lock().expect("poisoned").remove(key).is_some()
    }

    /// Conditional writes that reached the backend, won or lost.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Writes refused because their precondition no longer held.
    pub fn precondition_failures(&self) -> u64 {
        self.precondition_failures.load(Ordering::Relaxed)
    }

    /// Writes raw bytes unconditionally, with no fencing frame added, as a
    /// program that knows nothing of fencing would.
    pub fn put_unfenced(&self, key: &str, body: Bytes) {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        self.objects.lock().expect("poisoned").insert(
            key.to_owned(),
            Object {
                generation,
                body,
                modified: SystemTime::now(),
            },
        );
    }
}

#[async_trait]
impl BlobBackend for MemoryBlobBackend {
    fn name(&self) -> &'static str {
        "memory-blob"
    }

    fn limits(&self) -> Limits {
        MemoryStore::LIMITS
    }

    /// This process's wall clock: it is the in-memory server's own.
    fn server_now(&self) -> Option<SystemTime> {
        Some(SystemTime::now())
    }

    /// None: the in-memory server's clock is read, not estimated.
    fn server_now_lag(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    async fn read_range(&self, key: &str, len: Option<usize>) -> Result<Option<StoredObject>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        Ok(self
            .objects
            .lock()
            .expect("poisoned")
            .get(key)
            .map(|o| o.stored(len.unwrap_or(usize::MAX))))
    }

    fn deletes_conditionally(&self) -> bool {
        true
    }

    async fn delete_if(&self, key: &str, version: &BlobVersion) -> Result<bool> {
        tokio::task::yield_now().await;
        let mut objects = self.objects.lock().expect("poisoned");
        let matches = objects
            .get(key)
            .is_some_and(|o| o.generation.to_string() == version.as_str());
        if matches {
            objects.remove(key);
        }
        Ok(matches)
    }

    async fn write(&self, key: &str, write: BlobWrite) -> Result<WriteOutcome> {
        let BlobWrite {
            body, precondition, ..
        } = write;
        // Yield first so racing writers really interleave between their read
        // and their write, as they would over a network.
        tokio::task::yield_now().await;
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut objects = self.objects.lock().expect("poisoned");
        let version = objects
            .get(key)
            .map(|o| BlobVersion::new(o.generation.to_string()));
        if !precondition.holds_for(version.as_ref()) {
            self.precondition_failures.fetch_add(1, Ordering::Relaxed);
            return Ok(WriteOutcome::PreconditionFailed);
        }
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let modified = SystemTime::now();
        objects.insert(
            key.to_owned(),
            Object {
                generation,
                body,
                modified,
            },
        );
        Ok(WriteOutcome::Written(BlobVersion::new(
            generation.to_string(),
        )))
    }
}
