//! [`FencedObjectStore`]: an [`ObjectStore`] whose every write carries a
//! fencing token and is refused below the key's mark.

mod list;
mod multipart;
mod read;
mod write;

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use fencing_core::adapter::blob::{FRAME_HEADER_LEN, KnownVersions};
use fencing_core::adapter::cas::Known;
use fencing_core::safety::SafetyCheck;
use fencing_core::{FencedStore, FencingToken, Limits};
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyMode, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    RenameOptions, RenameTargetMode, Result,
};

use crate::backend::{DEFAULT_LIMITS, ObjectStoreBackend};
use crate::error::{into_store, redacted, rename_half_done};
use crate::token;
use fencing_core::keepalive::TokenSource;

/// The frame's length as object sizes count.
const HEADER: u64 = FRAME_HEADER_LEN as u64;

/// An [`ObjectStore`] that fences every write: swap it in where an engine
/// takes an `Arc<dyn ObjectStore>`, and a writer whose lease was taken over
/// cannot overwrite what the new holder wrote, however long it was paused.
///
/// ```
/// use std::sync::Arc;
/// use fencing_core::FencingToken;
/// use fencing_object_store::{FencedObjectStore, fencing_error};
/// use object_store::memory::InMemory;
/// use object_store::path::Path;
/// use object_store::{ObjectStore, ObjectStoreExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> object_store::Result<()> {
/// let bucket = Arc::new(InMemory::new()); // S3, GCS, Azure: any ObjectStore
/// // In a real program the token is a lease's: `FencedObjectStore::new(bucket, guard.watch())`.
/// let new_holder: Arc<dyn ObjectStore> = Arc::new(FencedObjectStore::new(bucket.clone(), FencingToken::new(34)));
/// let zombie: Arc<dyn ObjectStore> = Arc::new(FencedObjectStore::new(bucket, FencingToken::new(33)));
///
/// let manifest = Path::from("db/manifest");
/// new_holder.put(&manifest, "v2".into()).await?;
/// let refused = zombie.put(&manifest, "v1-late".into()).await.unwrap_err();
/// assert!(fencing_error(&refused).is_some_and(|e| e.is_stale()));
/// assert_eq!(new_holder.get(&manifest).await?.bytes().await?, "v2"); // the frame is invisible
/// # Ok(())
/// # }
/// ```
///
/// **The mark.** Each object starts with the 17-byte frame the fencing
/// blob stores write (its token; a value or a tombstone), so the version
/// the store compares (S3's MD5 ETag, a GCS generation, an Azure ETag)
/// covers it. Reads, `head`, ranged gets and `list` show the caller's
/// bytes and sizes; every reader must therefore go through a
/// `FencedObjectStore` (Parquet files that other engines read directly are
/// not for it: WAL segments, manifests, checkpoints and lock objects are).
///
/// **Writes.** A put reads the object's frame, refuses a token below its
/// mark with [`fencing_core::Error::StaleToken`] (both tokens named;
/// nothing written), and writes conditionally on the version it read. The
/// version of the store's own last write is remembered, so the same
/// holder's next put is one request. `PutMode::Create` and
/// `PutMode::Update` keep their meaning on top (`AlreadyExists`,
/// `Precondition`), and keep the mark rule. Errors of ours travel as the
/// source of `object_store::Error::Generic`: [`fencing_error`](crate::fencing_error) finds
/// them.
///
/// **Deletes** write a tombstone that keeps the mark (a zombie's later put
/// is still refused); `get`, `head` and `list` treat it as absent.
/// `copy` and `rename` write the destination under the destination's
/// mark rule; `rename` leaves a tombstone at the source.
///
/// **Multipart uploads** are staged in memory (up to
/// [`with_max_staged_len`](Self::with_max_staged_len)) and written at
/// `complete` as one fenced put: object stores cannot condition a
/// multipart completion, so no part reaches the store before the check.
///
/// **Objects written without fencing** are refused (reads and writes) with
/// [`fencing_core::Error::Unfenced`] unless
/// [`adopt_unfenced`](Self::adopt_unfenced) takes them over at mark 0.
///
/// The underlying store must honour `PutMode::Create` and
/// `PutMode::Update` (S3 with `aws_conditional_put=etag`, GCS, Azure,
/// `InMemory`); [`verify`](Self::verify) proves it on the real server.
pub struct FencedObjectStore<S> {
    store: Arc<S>,
    source: Option<Arc<dyn TokenSource>>,
    adopt_unfenced: bool,
    limits: Limits,
    max_attempts: u32,
    max_staged_len: usize,
    known: Arc<KnownVersions<Known<crate::version::Ver>>>,
}

impl<S> Clone for FencedObjectStore<S> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            source: self.source.clone(),
            adopt_unfenced: self.adopt_unfenced,
            limits: self.limits,
            max_attempts: self.max_attempts,
            max_staged_len: self.max_staged_len,
            known: self.known.clone(),
        }
    }
}

impl<S: ObjectStore> FencedObjectStore<S> {
    /// Fences `store`, writing with the token `source` answers (a lease's
    /// [`LeaseWatch`](fencing_core::keepalive::LeaseWatch), or a
    /// [`FencingToken`]) unless a call carries its own.
    pub fn new(store: S, source: impl TokenSource) -> Self {
        Self::build(Arc::new(store), Some(Arc::new(source)))
    }

    /// Fences `store` with no token of its own: every write must carry a
    /// [`FencingToken`] in its options' extensions (`delete`, which has
    /// none, is refused).
    pub fn unbound(store: S) -> Self {
        Self::build(Arc::new(store), None)
    }

    fn build(store: Arc<S>, source: Option<Arc<dyn TokenSource>>) -> Self {
        Self {
            store,
            source,
            adopt_unfenced: false,
            limits: DEFAULT_LIMITS,
            max_attempts: 32,
            max_staged_len: 1 << 30,
            known: Arc::new(KnownVersions::new()),
        }
    }

    /// Whether objects without a fencing frame are taken over at mark 0
    /// (read as they are, overwritten by any token) instead of refused.
    /// Off by default; turn it on once to adopt existing data. `list` then
    /// reads every object's first bytes to report its size.
    #[must_use]
    pub fn adopt_unfenced(mut self, adopt: bool) -> Self {
        self.adopt_unfenced = adopt;
        self
    }

    /// The key, value and token limits writes are checked against before
    /// anything is sent (default: S3's, [`DEFAULT_LIMITS`]).
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// How many conditional writes one call may try against concurrent
    /// writers before it gives up with `Contention` (default 32).
    #[must_use]
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The most a multipart upload may stage in memory before its fenced
    /// put (default 1 GiB); a part past it fails, naming the limit.
    #[must_use]
    pub fn with_max_staged_len(mut self, len: usize) -> Self {
        self.max_staged_len = len;
        self
    }

    /// The store underneath.
    pub fn inner(&self) -> &S {
        &self.store
    }

    /// Checks, on the real server, that the store underneath refuses a
    /// write whose precondition cannot hold (a store that ignores them
    /// would let a stale writer win), with the fencing store's generic
    /// probe. It writes under the key `fencing-verify/probe`.
    ///
    /// # Errors
    /// An error of the probe's reads or writes: a store that cannot
    /// condition a write on a version (`LocalFileSystem`, S3 without
    /// `aws_conditional_put=etag`) fails here, naming the operation.
    pub async fn verify(&self) -> fencing_core::Result<Vec<SafetyCheck>> {
        let store: Arc<dyn ObjectStore> = self.store.clone();
        let blob = fencing_core::adapter::blob::BlobStore::new(ObjectStoreBackend::new(store));
        blob.verify().await
    }

    /// The token of a write whose options carry `extensions`.
    fn token(&self, extensions: &object_store::Extensions) -> Result<FencingToken> {
        token::of_call(extensions, self.source.as_deref()).map_err(into_store)
    }
}

impl<S: ObjectStore> fmt::Debug for FencedObjectStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The store's Display names it without credentials; its Debug may
        // hold a key, a SAS or a bearer token.
        f.debug_struct("FencedObjectStore")
            .field(
                "store",
                &fencing_core::redact::redact_text(&self.store.to_string()),
            )
            .field("source", &self.source)
            .field("adopt_unfenced", &self.adopt_unfenced)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl<S: ObjectStore> fmt::Display for FencedObjectStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fenced({})", self.store)
    }
}

/// The meta of an object as the caller sees it: its value's size.
fn value_meta(meta: &ObjectMeta, header_len: u64) -> ObjectMeta {
    ObjectMeta {
        size: meta.size.saturating_sub(header_len),
        ..meta.clone()
    }
}

fn not_found(path: &Path) -> object_store::Error {
    object_store::Error::NotFound {
        path: path.to_string(),
        source: "no object (or a tombstone that keeps its fencing mark)".into(),
    }
}

fn shift(range: &Range<u64>, by: u64) -> Range<u64> {
    range.start + by..range.end + by
}

#[async_trait]
impl<S: ObjectStore> ObjectStore for FencedObjectStore<S> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let token = self.token(&opts.extensions)?;
        self.write(location, payload, token, opts)
            .await
            .map_err(redacted)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        Ok(Box::new(multipart::Staged::new(
            self.clone(),
            location.clone(),
            opts,
        )))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let mut result = self.read(location, options).await.map_err(redacted)?;
        let (meta, range) = (result.meta.clone(), result.range.clone());
        let attributes = std::mem::take(&mut result.attributes);
        let extensions = std::mem::take(&mut result.extensions);
        let body = result.into_stream().map_err(redacted).boxed();
        Ok(GetResult {
            payload: GetResultPayload::Stream(body),
            meta,
            range,
            attributes,
            extensions,
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let this = self.clone();
        locations
            .map(move |location| {
                let this = this.clone();
                async move {
                    let location = location?;
                    let token = this.token(&object_store::Extensions::new())?;
                    this.delete_fenced(&location, token)
                        .await
                        .map_err(redacted)?;
                    Ok(location)
                }
            })
            .buffered(10)
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.visible(self.store.list(prefix))
            .map_err(redacted)
            .boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.visible(self.store.list_with_offset(prefix, offset))
            .map_err(redacted)
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.list_dir(prefix).await.map_err(redacted)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let token = self.token(&options.extensions)?;
        self.copy_fenced(from, to, options.mode, token)
            .await
            .map_err(redacted)
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        let token = self.token(&options.extensions)?;
        let mode = match options.target_mode {
            RenameTargetMode::Overwrite => CopyMode::Overwrite,
            RenameTargetMode::Create => CopyMode::Create,
        };
        // A source a newer holder wrote is refused before anything is
        // written (the copy would land and its tombstone be refused).
        match self
            .read_head(from, &GetOptions::new(), HEADER)
            .await
            .map_err(redacted)?
        {
            Some(source) if source.has_value && token < source.mark => {
                return Err(into_store(fencing_core::Error::StaleToken {
                    key: from.to_string(),
                    presented: token,
                    current: source.mark,
                }));
            }
            Some(source) if source.has_value => {}
            _ => return Err(not_found(from)),
        }
        self.copy_fenced(from, to, mode, token)
            .await
            .map_err(redacted)?;
        self.delete_fenced(from, token)
            .await
            .map_err(|e| rename_half_done(from.as_ref(), to.as_ref(), e))
    }
}

impl<S: ObjectStore> FencedObjectStore<S> {
    /// `from`'s value and attributes written at `to` under `token`.
    async fn copy_fenced(
        &self,
        from: &Path,
        to: &Path,
        mode: CopyMode,
        token: FencingToken,
    ) -> Result<()> {
        let source = self.read(from, GetOptions::new()).await?;
        let attributes = source.attributes.clone();
        let value = source.bytes().await?;
        let mode = match mode {
            CopyMode::Overwrite => PutMode::Overwrite,
            CopyMode::Create => PutMode::Create,
        };
        let options = PutOptions {
            mode,
            attributes,
            ..PutOptions::default()
        };
        self.write(to, value.into(), token, options)
            .await
            .map(|_| ())
    }
}
