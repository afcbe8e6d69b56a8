//! Object stores (S3, GCS, Azure Blob): the fenced put of `BlobStore`, warm
//! (the holder's cached version: one conditional put) and cold (a fresh
//! store: read, then conditional put), against a plain unconditional put
//! of the same bytes through the same SDK client; and the bucket lease of
//! `BlobIssuer` against the two bare conditional writes a lease needs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use fencing_core::adapter::blob::{
    BlobBackend, BlobIssuer, BlobMeta, BlobStore, BlobVersion, BlobWrite, Precondition,
    WriteOutcome,
};
use fencing_integration::backends::plain::blob::PlainBlob;
use fencing_tokens::{FencedStore, FencingToken, LeaseRequest, TokenIssuer};

use crate::BoxResult;
use crate::contention::{Outcome, Writer};

/// An object store's backend with its plain put (its module's
/// [`PlainBlob`]).
type Plain = Arc<dyn PlainBlob>;

/// A backend whose every request (read or write) is counted.
#[derive(Debug)]
struct Counted<B> {
    inner: B,
    requests: Arc<AtomicU64>,
}

#[async_trait::async_trait]
impl<B: BlobBackend> BlobBackend for Counted<B> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn limits(&self) -> fencing_tokens::Limits {
        self.inner.limits()
    }
    async fn read_range(
        &self,
        key: &str,
        len: Option<usize>,
    ) -> fencing_tokens::Result<Option<fencing_core::adapter::blob::StoredObject>> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.inner.read_range(key, len).await
    }
    async fn write(&self, key: &str, write: BlobWrite) -> fencing_tokens::Result<WriteOutcome> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.inner.write(key, write).await
    }
}

/// One acquire and its release.
async fn lease(issuer: &BlobIssuer<Plain>, resource: &str) -> BoxResult<()> {
    let lease = issuer
        .try_acquire(&LeaseRequest::new(resource, LEASE_TTL))
        .await?
        .ok_or("the bench's resource was held")?;
    Ok(issuer.release(&lease).await?)
}

/// The fenced and plain sides on one backend (one client).
#[derive(Debug)]
pub(crate) struct Sides {
    backend: Plain,
    /// The warm store: it keeps the version of its last write.
    warm: BlobStore<Plain>,
    /// The warm issuer: it keeps the version of the record it released.
    issuer: BlobIssuer<Plain>,
    /// Names the raw side's lock objects, each created once: this side's
    /// own prefix (the direct and the counted sides share the bucket) and
    /// a number.
    raw_locks: (String, AtomicU64),
    /// The scale rows' raw locks, one object per resource: the version of
    /// each free one, as its last holder left it. Taking a version out is
    /// what lets only one holder try the conditional take on it; a holder
    /// that finds none tries a create-only put, which fails once the
    /// object exists.
    raw_free: Mutex<HashMap<String, BlobVersion>>,
}

/// The TTL of the bench's leases (long enough never to expire in a round).
const LEASE_TTL: Duration = Duration::from_secs(30);

impl Sides {
    /// The sides on `backend`: the warm store and issuer, and the plain
    /// and raw calls, all on its one client.
    pub(crate) fn new(backend: Plain) -> Self {
        Self {
            issuer: BlobIssuer::new(backend.clone()),
            warm: BlobStore::new(backend.clone()),
            backend,
            raw_locks: (fencing_testkit::unique_prefix(), AtomicU64::new(0)),
            raw_free: Mutex::new(HashMap::new()),
        }
    }

    /// Acquire + release of `resource` by the issuer that released it last:
    /// it knows the record's version, so two conditional puts.
    pub(crate) async fn warm_lease(&self, resource: &str) -> BoxResult<()> {
        lease(&self.issuer, resource).await
    }

    /// Acquire + release by a fresh issuer (a new process): a read, then
    /// the two conditional puts.
    pub(crate) async fn cold_lease(&self, resource: &str) -> BoxResult<()> {
        lease(&BlobIssuer::new(self.backend.clone()), resource).await
    }

    /// The two bare conditional writes a lease needs at the least: a
    /// create-only put (take) and a put on the version it made (give
    /// back), of a body as small as a record, on a new object each time.
    pub(crate) async fn raw_lease(&self, prefix: &str) -> BoxResult<()> {
        let (own, next) = &self.raw_locks;
        let key = format!("{prefix}-{own}-{}", next.fetch_add(1, Ordering::Relaxed));
        match self.take_and_give_back(&key, Precondition::Absent).await? {
            Some(_) => Ok(()),
            None => Err("the raw lock object existed".into()),
        }
    }

    /// The same two conditional writes on the lock object of `resource`
    /// (one of a bounded set, so a long run leaves the emulator no more
    /// objects than resources): a put on the free version its last holder
    /// left (or create-only, the first time), then a put on the version it
    /// made. `false` if another holder has it.
    pub(crate) async fn raw_lock_on(&self, resource: &str) -> BoxResult<bool> {
        let key = format!("raw-lock-{}-{resource}", self.raw_locks.0);
        let free = self.raw_free.lock().map_err(|_| "poisoned")?.remove(&key);
        let precondition = free.map_or(Precondition::Absent, Precondition::Matches);
        let Some(free) = self.take_and_give_back(&key, precondition).await? else {
            return Ok(false);
        };
        self.raw_free
            .lock()
            .map_err(|_| "poisoned")?
            .insert(key, free);
        Ok(true)
    }

    /// A raw lock's two writes on `key`: a put under `precondition`
    /// (take), then a put on the version it made (give back). The version
    /// the give-back left, or `None` if the take's precondition failed.
    async fn take_and_give_back(
        &self,
        key: &str,
        precondition: Precondition,
    ) -> BoxResult<Option<BlobVersion>> {
        let hint = BlobMeta {
            token: FencingToken::new(1),
            has_value: true,
        };
        let take = BlobWrite::new(Bytes::from_static(&[b'h'; 96]), hint, precondition);
        let WriteOutcome::Written(held) = self.backend.write(key, take).await? else {
            return Ok(None);
        };
        let give_back = BlobWrite::new(
            Bytes::from_static(&[b'f'; 96]),
            hint,
            Precondition::Matches(held),
        );
        match self.backend.write(key, give_back).await? {
            WriteOutcome::Written(free) => Ok(Some(free)),
            WriteOutcome::PreconditionFailed => Err("the raw lock object changed".into()),
        }
    }

    /// A put through the store that wrote `key` last: its cached version
    /// makes it one conditional request.
    pub(crate) async fn warm_put(&self, key: &str, value: Bytes, token: u64) -> BoxResult<()> {
        Ok(self.warm.put(key, value, FencingToken::new(token)).await?)
    }

    /// A put through a fresh store on the same client (a new holder, or a
    /// holder in a new process): it reads the object's version first.
    pub(crate) async fn cold_put(&self, key: &str, value: Bytes, token: u64) -> BoxResult<()> {
        let fresh = BlobStore::new(self.backend.clone());
        Ok(fresh.put(key, value, FencingToken::new(token)).await?)
    }

    /// The request a cold put makes first: the object's version and frame
    /// header (one ranged read).
    pub(crate) async fn read_version(&self, key: &str) -> BoxResult<()> {
        self.backend
            .read_prefix(key, fencing_core::adapter::blob::FRAME_HEADER_LEN)
            .await?
            .ok_or("the object to read was missing")?;
        Ok(())
    }

    /// The plain unconditional put.
    pub(crate) async fn plain_put(&self, key: &str, value: Bytes) -> BoxResult<()> {
        self.backend.plain_put(key, value).await
    }

    /// `writers` fenced writers on `key`, each with a store of its own (as
    /// separate processes would have) on the same client; every request
    /// they make (reads and conditional writes) is counted in `requests`.
    pub(crate) fn fenced_writers(
        &self,
        writers: usize,
        key: &str,
        value: &Bytes,
        requests: &Arc<AtomicU64>,
    ) -> Vec<Writer> {
        (0..writers)
            .map(|_| {
                let counted = Counted {
                    inner: self.backend.clone(),
                    requests: requests.clone(),
                };
                let store = Arc::new(BlobStore::new(counted));
                let (key, value) = (key.to_owned(), value.clone());
                let writer: Writer = Arc::new(move |token| {
                    let (store, key, value) = (store.clone(), key.clone(), value.clone());
                    Box::pin(async move {
                        crate::contention::outcome(
                            store.put(&key, value, FencingToken::new(token)).await,
                        )
                    })
                });
                writer
            })
            .collect()
    }

    /// `writers` plain writers on `key`.
    pub(crate) fn plain_writers(&self, writers: usize, key: &str, value: &Bytes) -> Vec<Writer> {
        (0..writers)
            .map(|_| {
                let backend = self.backend.clone();
                let (key, value) = (key.to_owned(), value.clone());
                let writer: Writer = Arc::new(move |_| {
                    let (backend, key, value) = (backend.clone(), key.clone(), value.clone());
                    Box::pin(async move {
                        backend.plain_put(&key, value).await?;
                        Ok(Outcome::Written)
                    })
                });
                writer
            })
            .collect()
    }
}
