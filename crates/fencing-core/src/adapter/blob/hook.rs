//! A backend that reads through another and sends its writes (and its
//! conditional deletes) through a hook: for tests and instruments that
//! change only what a write does (count it, lose its answer, ignore its
//! precondition).

use std::fmt::Debug;

use async_trait::async_trait;

use super::{BlobBackend, BlobVersion, BlobWrite, StoredObject, WriteOutcome};
use crate::{Limits, Result};

/// What a [`HookedWrites`] backend does with a write, given the backend it
/// wraps.
#[async_trait]
pub trait WriteHook<B: BlobBackend>: Send + Sync + Debug {
    /// The name the wrapper reports: the wrapped backend's unless
    /// overridden.
    fn name(&self, inner: &B) -> &'static str {
        inner.name()
    }

    /// The write, usually made around `inner.write(key, write)`:
    /// `inner`'s unless overridden.
    async fn write(&self, inner: &B, key: &str, write: BlobWrite) -> Result<WriteOutcome> {
        inner.write(key, write).await
    }

    /// The conditional delete: `inner`'s unless overridden.
    async fn delete_if(&self, inner: &B, key: &str, version: &BlobVersion) -> Result<bool> {
        inner.delete_if(key, version).await
    }
}

/// A [`BlobBackend`] that forwards everything to `inner` except writes
/// and conditional deletes, which go through `hook`.
#[derive(Debug, Default)]
pub struct HookedWrites<B, H> {
    inner: B,
    hook: H,
}

impl<B, H> HookedWrites<B, H> {
    /// `inner`, its writes sent through `hook`.
    pub fn new(inner: B, hook: H) -> Self {
        Self { inner, hook }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The hook.
    pub fn hook(&self) -> &H {
        &self.hook
    }
}

#[async_trait]
impl<B: BlobBackend, H: WriteHook<B>> BlobBackend for HookedWrites<B, H> {
    fn name(&self) -> &'static str {
        self.hook.name(&self.inner)
    }

    fn limits(&self) -> Limits {
        self.inner.limits()
    }

    async fn read_range(&self, key: &str, len: Option<usize>) -> Result<Option<StoredObject>> {
        self.inner.read_range(key, len).await
    }

    async fn write(&self, key: &str, write: BlobWrite) -> Result<WriteOutcome> {
        self.hook.write(&self.inner, key, write).await
    }

    fn deletes_conditionally(&self) -> bool {
        self.inner.deletes_conditionally()
    }

    async fn delete_if(&self, key: &str, version: &BlobVersion) -> Result<bool> {
        self.hook.delete_if(&self.inner, key, version).await
    }

    fn unmatchable_version(&self) -> BlobVersion {
        self.inner.unmatchable_version()
    }

    async fn bucket_checks(&self) -> Result<Vec<crate::safety::SafetyCheck>> {
        self.inner.bucket_checks().await
    }

    fn endpoint(&self) -> Option<String> {
        self.inner.endpoint()
    }

    fn server_now(&self) -> Option<std::time::SystemTime> {
        self.inner.server_now()
    }

    fn server_now_lag(&self) -> std::time::Duration {
        self.inner.server_now_lag()
    }
}
