//! Checks for object-store adapters built on [`fencing::blob::BlobStore`].
//!
//! The three object stores share one compare-and-swap loop, so the way to
//! test an adapter is the same everywhere: the store suite on
//! `BlobStore::new(backend)`, plus a race big enough that writes lose their
//! precondition (HTTP 412, Azure's 409) and take the retry path.
//! [`CountingBackend`] wraps any [`BlobBackend`] to prove the race did take
//! it. Run them all with
//! [`blob_store_conformance!`](crate::blob_store_conformance).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use fencing::blob::{
    BlobBackend, BlobMeta, BlobStore, BlobVersion, Precondition, StoredObject, WriteOutcome,
};
use fencing::{FencedStore, Limits, Result};

/// A [`BlobBackend`] that forwards to `B` and counts conditional writes and
/// the ones whose precondition failed.
#[derive(Debug)]
pub struct CountingBackend<B> {
    inner: B,
    writes: AtomicU64,
    lost: AtomicU64,
}

impl<B> CountingBackend<B> {
    /// Wraps `inner` with both counts at zero.
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            writes: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Conditional writes that got an answer, won or lost.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Writes answered [`WriteOutcome::PreconditionFailed`].
    pub fn precondition_failures(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl<B: BlobBackend> BlobBackend for CountingBackend<B> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn limits(&self) -> Limits {
        self.inner.limits()
    }

    async fn read_prefix(&self, key: &str, len: usize) -> Result<Option<StoredObject>> {
        self.inner.read_prefix(key, len).await
    }

    async fn read(&self, key: &str) -> Result<Option<StoredObject>> {
        self.inner.read(key).await
    }

    fn unmatchable_version(&self) -> BlobVersion {
        self.inner.unmatchable_version()
    }

    async fn write(
        &self,
        key: &str,
        body: Bytes,
        meta: BlobMeta,
        precondition: &Precondition,
    ) -> Result<WriteOutcome> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let outcome = self.inner.write(key, body, meta, precondition).await?;
        if outcome == WriteOutcome::PreconditionFailed {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
        Ok(outcome)
    }
}

/// `BlobStore::new(backend)` as the store suite takes it.
pub fn fenced<B: BlobBackend + 'static>(backend: B) -> Arc<dyn FencedStore> {
    Arc::new(BlobStore::new(backend))
}

/// [`racing_writers_with`](crate::store::racing_writers_with) on
/// `BlobStore::new(backend)`, counting the backend's answers: besides the
/// race's own checks, at least one write must have lost its precondition,
/// or the retry path was never exercised. Returns `(writes, lost)`.
pub async fn racing_writers_take_the_precondition_path<B: BlobBackend + 'static>(
    backend: B,
    writers: usize,
    writes: usize,
) -> (u64, u64) {
    let store = Arc::new(BlobStore::new(CountingBackend::new(backend)));
    crate::store::racing_writers_with(store.clone(), writers, writes).await;
    let counting = store.backend();
    let (writes, lost) = (counting.writes(), counting.precondition_failures());
    println!(
        "{} race: {writes} conditional writes, {lost} lost their precondition (412/409) and re-read",
        counting.name()
    );
    assert!(
        lost > 0,
        "no write lost its precondition in {writes} writes: the 412/409 path was not exercised"
    );
    (writes, lost)
}
