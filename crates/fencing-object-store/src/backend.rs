//! [`ObjectStoreBackend`]: the fencing blob backend over any
//! [`ObjectStore`], so that [`BlobStore`](fencing_core::adapter::blob::BlobStore)
//! and the bucket lease ([`BlobIssuer`](fencing_core::adapter::blob::BlobIssuer))
//! run on a store the user already configured.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;
use fencing_core::adapter::blob::{
    BlobBackend, BlobVersion, BlobWrite, Precondition, StoredObject, WriteOutcome,
};
use fencing_core::{Error, Limits, Result};
use object_store::path::Path;
use object_store::{
    GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
};

use crate::error::{NAME, into_fencing, may_be_range, was_retried};
use crate::version;

/// S3's limits, the tightest of the stores object_store speaks to: keys of
/// 1,024 bytes, one `PUT` of 5 GiB.
pub const DEFAULT_LIMITS: Limits = fencing_core::adapter::blob::S3_LIMITS;

/// A [`BlobBackend`] on any [`ObjectStore`]: reads are ranged `get_opts`,
/// writes are `put_opts` with [`PutMode::Create`] or [`PutMode::Update`].
///
/// The store must honour both modes. `InMemory`, S3 with
/// `S3ConditionalPut::ETagMatch` (`aws_conditional_put=etag`), GCS and
/// Azure do; `LocalFileSystem` has no `Update`, and an S3 store without
/// conditional puts has neither: the first write that needs one fails
/// (typed, nothing written), and
/// [`verify`](fencing_core::FencedStore::verify) fails at once. A server
/// that ignores the conditions (answers 200 to a write whose
/// precondition cannot hold) is what `verify`'s probe catches.
///
/// The bucket lease on it judges expiry on the waiter's monotonic clock
/// (object_store tells no `Date`). Since it has no estimate of the server's
/// clock, a new lease record is written unseeded, read back, and seeded
/// from its own `last_modified` plus that timestamp's grain (a second for
/// HTTP's `Last-Modified`), granted once the grain has passed: a record
/// deleted by hand and made again, in the same second too, starts above
/// every token of the deleted one instead of at 1.
///
/// object_store retries a write itself after a 5xx (and S3's 409); if the
/// first attempt was applied, the retry fails its precondition. Such a
/// failure is reported as [`Error::OutcomeUnknown`], never as a lost race.
///
/// ```
/// use std::sync::Arc;
/// use fencing_core::FencedStore;
/// use fencing_core::adapter::blob::BlobStore;
/// use fencing_object_store::ObjectStoreBackend;
/// use object_store::memory::InMemory;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fencing_core::Result<()> {
/// let store = BlobStore::new(ObjectStoreBackend::new(Arc::new(InMemory::new())));
/// store.put("jobs/nightly", "v1".into(), fencing_core::FencingToken::new(7)).await?;
/// assert!(store.put("jobs/nightly", "late".into(), fencing_core::FencingToken::new(6)).await.is_err());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ObjectStoreBackend {
    store: Arc<dyn ObjectStore>,
    limits: Limits,
}

impl ObjectStoreBackend {
    /// A backend on `store`, with [`DEFAULT_LIMITS`].
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        Self {
            store,
            limits: DEFAULT_LIMITS,
        }
    }

    /// The same backend with other limits (a store with smaller objects or
    /// shorter keys than S3's).
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The store underneath.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }
}

impl fmt::Debug for ObjectStoreBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreBackend")
            .field(
                "store",
                &fencing_core::redact::redact_text(&self.store.to_string()),
            )
            .field("limits", &self.limits)
            .finish()
    }
}

/// The object_store path of a fencing key, which must name it exactly:
/// object_store drops a leading or trailing `/` and refuses empty
/// segments, so `a/` and `a` would be one object with one mark under two
/// names.
pub(crate) fn path_of(key: &str) -> Result<Path> {
    let path = Path::parse(key)
        .map_err(|e| Error::invalid_input(format!("object_store cannot name key {key:?}: {e}")))?;
    if path.as_ref() != key {
        return Err(Error::invalid_input(format!(
            "object_store would store key {key:?} as {:?} (it drops a leading or trailing \
             `/`), so two keys would share one object; nothing was written",
            path.as_ref()
        )));
    }
    Ok(path)
}

#[async_trait]
impl BlobBackend for ObjectStoreBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn limits(&self) -> Limits {
        self.limits
    }

    async fn read_range(&self, key: &str, len: Option<usize>) -> Result<Option<StoredObject>> {
        let path = path_of(key)?;
        let ranged = len.map(|len| GetRange::Bounded(0..len as u64));
        let mut answer = self
            .store
            .get_opts(&path, GetOptions::new().with_range(ranged.clone()))
            .await;
        if let Some(len) = len
            && answer.as_ref().is_err_and(may_be_range)
        {
            // An object shorter than the range's first byte (an empty one)
            // refuses a ranged read: read it whole if it is that short;
            // report any other failure.
            if let Ok(meta) = self.store.head(&path).await
                && meta.size < len as u64
            {
                answer = self.store.get_opts(&path, GetOptions::new()).await;
            }
        }
        let result = match answer {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(into_fencing(e, "read", false)),
        };
        let version = version::to_blob(&version::of_meta(&result.meta));
        let modified = SystemTime::from(result.meta.last_modified);
        let bytes: Bytes = result
            .bytes()
            .await
            .map_err(|e| into_fencing(e, "read", false))?;
        let bytes = match len {
            Some(len) if bytes.len() > len => bytes.slice(..len),
            _ => bytes,
        };
        Ok(Some(
            StoredObject::new(version, bytes).modified_at(Some(modified)),
        ))
    }

    async fn write(&self, key: &str, write: BlobWrite) -> Result<WriteOutcome> {
        let path = path_of(key)?;
        let mode = match &write.precondition {
            Precondition::Absent => PutMode::Create,
            Precondition::Matches(v) => PutMode::Update(version::from_blob(v)),
        };
        // No metadata hint: Azure refuses a metadata name with a `-`, and
        // `LocalFileSystem` refuses attributes; the frame is what counts.
        let options = PutOptions::from(mode);
        match self
            .store
            .put_opts(&path, PutPayload::from_bytes(write.body), options)
            .await
        {
            Ok(result) => Ok(WriteOutcome::Written(version::to_blob(&version::of_put(
                &result,
            )))),
            Err(
                e @ (object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. }),
            ) => {
                if was_retried(&e) {
                    Err(Error::outcome_unknown(
                        NAME,
                        "conditional write (object_store retried it; the first attempt may have been applied)",
                        fencing_core::redact::redact_text(&fencing_core::error_chain(&e)),
                    ))
                } else {
                    Ok(WriteOutcome::PreconditionFailed)
                }
            }
            Err(e) => Err(into_fencing(e, "conditional write", true)),
        }
    }

    fn unmatchable_version(&self) -> BlobVersion {
        // An ETag no server makes and a generation no GCS object has.
        version::to_blob(&object_store::UpdateVersion {
            e_tag: Some("\"fencing-verify-never-matches\"".to_owned()),
            version: Some("1".to_owned()),
        })
    }
}
