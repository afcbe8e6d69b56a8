//! Fencing on object stores: the [conditional-write engine](super::cas) run
//! on every blob backend (S3, GCS, Azure, in-memory).
//!
//! Object stores have no "write if the stored token is lower" operation, but
//! they do have compare-and-swap on an object version (an ETag or a
//! generation). [`BlobStore`] keeps the token in a small header at the front
//! of the object's body (the [`frame`]), reads the version and header, refuses
//! a stale token itself, and writes *conditionally on the version it read*.
//! If another writer got in between, the precondition fails and the loop
//! reads again and decides again. A backend implements only [`BlobBackend`].
//!
//! The token is in the body because the body is what every store's version
//! covers: a metadata-only change (an S3 copy-in-place, a GCS metadata patch,
//! an Azure set-metadata) can neither drop nor lower the mark. Metadata is
//! written too, as a hint for people, and never read.
//!
//! An object without a frame was written by a program that knows nothing of
//! fencing; it is refused with [`Error::Unfenced`] unless the store was told
//! to adopt such objects at mark 0 ([`BlobStore::adopt_unfenced`]).
//!
//! Conditional writes are never retried inside an SDK (a retry of an applied
//! write fails its precondition and would read as "nothing was written");
//! the engine retries them, and reports [`Error::OutcomeUnknown`] whenever an
//! earlier attempt may have been applied.

mod backend;
mod clock;
pub mod config;
pub mod frame;
mod hook;
pub mod http;
pub mod lease;
mod probe;

use std::fmt::{self, Debug};

use async_trait::async_trait;
use bytes::Bytes;

pub use self::backend::{
    BlobBackend, BlobMeta, BlobVersion, BlobWrite, Precondition, STATE_METADATA_KEY, StoredObject,
    TOKEN_METADATA_KEY, WriteOutcome,
};
pub use self::clock::ServerClock;
pub use self::frame::{FRAME_HEADER_LEN, FRAME_MAGIC};
pub use self::hook::{HookedWrites, WriteHook};
pub use self::lease::{BlobIssuer, LeaseExpiry};
use self::probe::precondition_checks;
pub use super::cas::CONTENDED_WRITE_MAX;
pub use super::cas::KnownVersions;
use super::cas::{self, End, Engine, Found, Frame, Intent, Outcome, Payload, Wrote};
pub use super::cas::{MAX_ROUND_TRIP_PAUSE, retry_pause, retry_pause_after};
use crate::safety::{self, SafetyCheck};
use crate::{Error, FencedStore, FencingToken, Limits, Result, Versioned};

/// An object read and unframed.
#[derive(Clone, Debug)]
struct Current {
    version: BlobVersion,
    meta: BlobMeta,
    /// Empty when only the header was read.
    value: Bytes,
}

/// A [`FencedStore`] on any [`BlobBackend`]: the shared compare-and-swap
/// loop.
///
/// A write reads the object's version and frame header, refuses a stale
/// token, and writes conditionally on the version it read (create-only if
/// absent). On a failed precondition it reads again and decides again, up to
/// [`max_attempts`](Self::with_max_attempts), then returns
/// [`Error::Contention`]. A write whose outcome was unknown (a timeout or a
/// dropped connection after sending) is retried the same way, and if the
/// loop cannot then finish it, the call reports [`Error::OutcomeUnknown`],
/// never "nothing was written".
///
/// **Fast path**: after a write, the store remembers the object's new
/// version, so the same holder's next write skips the read and goes straight
/// to the conditional write (one request). If someone else wrote meanwhile,
/// the precondition fails and the loop falls back to reading.
///
/// **Under contention** (the last time this store read the key and then
/// wrote, another write landed in between), a put of a small value or a
/// delete also goes straight to the conditional write, on the last version
/// it saw, if that version's mark is not above the token: there, a version
/// read first is usually overtaken before the write lands, so the read buys
/// nothing (read, lost write, read again: three requests), while the write
/// alone either wins (one request) or fails and is followed by the read
/// that decides (two). After a lost race the loop pauses for a random time
/// up to about the lost write's round trip, so that the writes racing it
/// have landed when it reads again.
///
/// `fence` and `delete` rewrite the object (a marker with an empty value
/// when there is no value), so the mark stays with the key.
pub struct BlobStore<B> {
    backend: B,
    max_attempts: u32,
    adopt_unfenced: bool,
    /// Where the bucket issuer keeps its lease records: not the store's.
    lease_prefix: String,
    known: KnownVersions<cas::Known<BlobVersion>>,
}

/// S3's limits, the tightest of the object stores: keys of 1,024 bytes of
/// UTF-8, one `PutObject` of 5 GiB less the 17-byte frame, any token. The
/// S3 backend's, and the default of the stores built on other object-store
/// libraries, which may reach S3 underneath.
pub const S3_LIMITS: Limits = Limits {
    max_key_len: 1024,
    max_value_len: 5 * 1024 * 1024 * 1024 - FRAME_HEADER_LEN,
    max_token: FencingToken::new(u64::MAX),
};

impl<B: BlobBackend> BlobStore<B> {
    /// A fenced store on `backend`, retrying a lost race up to 32 times and
    /// refusing objects that carry no fencing frame.
    pub fn new(backend: B) -> Self {
        Self {
            backend,
            max_attempts: 32,
            adopt_unfenced: false,
            lease_prefix: BlobIssuer::<B>::DEFAULT_PREFIX.to_owned(),
            known: KnownVersions::new(),
        }
    }

    /// Sets how many conditional writes one call may try.
    #[must_use]
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Whether objects without a fencing frame (written by a program that
    /// knows nothing of fencing) are taken over at mark 0 instead of refused
    /// with [`Error::Unfenced`]. Off by default: an object whose frame was
    /// stripped by a foreign overwrite would otherwise let any stale token
    /// in. Turn it on to adopt existing data once, e.g. for a migration.
    #[must_use]
    pub fn adopt_unfenced(mut self, adopt: bool) -> Self {
        self.adopt_unfenced = adopt;
        self
    }

    /// The prefix of the bucket issuer's lease records in this bucket
    /// (default [`BlobIssuer::DEFAULT_PREFIX`]): the store refuses to write
    /// a key under it, since its frame would turn a lease record foreign
    /// or set its counter.
    #[must_use]
    pub fn with_lease_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.lease_prefix = prefix.into();
        self
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Checks a write's key, token and size, and that the key is not a
    /// lease record's.
    fn check_write(&self, key: &str, token: FencingToken, len: usize) -> Result<()> {
        self.limits().check_write(key, token, len)?;
        if !self.lease_prefix.is_empty() && key.starts_with(&self.lease_prefix) {
            return Err(Error::invalid_input(format!(
                "{key:?} is under {:?}, where the bucket issuer keeps its lease records; \
                 nothing was written (store values under another prefix, or give the \
                 issuer another lease_prefix)",
                self.lease_prefix
            )));
        }
        Ok(())
    }

    /// Unframes a stored object, applying the policy for foreign objects.
    fn unframe(&self, key: &str, stored: StoredObject) -> Result<Current> {
        let first = frame::unframe(self.backend.name(), key, &stored.bytes, self.adopt_unfenced)?;
        Ok(Current {
            version: stored.version,
            meta: first.meta,
            value: stored
                .bytes
                .slice(first.header_len.min(stored.bytes.len())..),
        })
    }

    /// The object's version and header (`need_body: false`) or all of it.
    async fn load(&self, key: &str, need_body: bool) -> Result<Option<Current>> {
        let stored = if need_body {
            self.backend.read(key).await?
        } else {
            self.backend.read_prefix(key, FRAME_HEADER_LEN).await?
        };
        stored.map(|s| self.unframe(key, s)).transpose()
    }

    /// `put`, `fence` and `delete`: the [engine](super::cas) run on this
    /// backend, writing `value` where the intent writes a value.
    async fn update(
        &self,
        key: &str,
        token: FencingToken,
        intent: Intent<BlobVersion>,
        value: Bytes,
    ) -> Result<()> {
        let engine = Engine::new(token, intent, self.known.get(key), self.max_attempts);
        let mut port = Port {
            store: self,
            key,
            value,
            read: Bytes::new(),
        };
        match cas::run(&mut port, &self.known, key, engine).await {
            Outcome::Ended(End::Written(_) | End::Unchanged) => Ok(()),
            Outcome::Ended(End::Stale { current }) => Err(Error::StaleToken {
                key: key.to_owned(),
                presented: token,
                current,
            }),
            Outcome::Ended(End::Contention { attempts }) => Err(Error::Contention {
                key: key.to_owned(),
                attempts,
            }),
            // Neither a put, a delete nor a fence has a condition of the
            // caller's to fail.
            Outcome::Ended(end @ (End::Exists { .. } | End::NotMatched | End::Unknown)) => {
                Err(Error::backend(
                    self.backend.name(),
                    false,
                    format!("the write engine ended a blob store write with {end:?}"),
                ))
            }
            Outcome::Unknown { first, .. } => Err(first),
            Outcome::Failed(e) => Err(e),
        }
    }
}

/// One call's way onto the backend: the read and the conditional write
/// the [engine](super::cas) asks for.
struct Port<'a, B> {
    store: &'a BlobStore<B>,
    key: &'a str,
    /// The caller's value.
    value: Bytes,
    /// The value of the object last read whole (a fence rewrites it).
    read: Bytes,
}

impl<B: BlobBackend> cas::Port for Port<'_, B> {
    type Version = BlobVersion;
    type Error = Error;

    fn name(&self) -> &'static str {
        self.store.backend.name()
    }

    async fn read(&mut self, body: bool) -> Result<Option<Found<BlobVersion>>> {
        let current = self.store.load(self.key, body).await?;
        Ok(current.map(|c| {
            self.read = c.value;
            Found {
                version: c.version,
                mark: c.meta.token,
                live: c.meta.has_value,
            }
        }))
    }

    async fn write(
        &mut self,
        on: Option<BlobVersion>,
        frame: Frame,
        payload: Payload,
    ) -> Result<Wrote<BlobVersion, Error>> {
        let frame = BlobMeta::from(frame);
        let value = match payload {
            Payload::Value => &self.value[..],
            Payload::Empty => &[],
            Payload::AsRead => &self.read[..],
        };
        let precondition = on.map_or(Precondition::Absent, Precondition::Matches);
        let write = BlobWrite::new(frame::encode(frame, value), frame, precondition);
        match self.store.backend.write(self.key, write).await {
            Ok(WriteOutcome::Written(version)) => Ok(Wrote::Written(Some(version))),
            Ok(WriteOutcome::PreconditionFailed) => Ok(Wrote::Lost),
            Err(e @ Error::OutcomeUnknown { .. }) => Ok(Wrote::Unknown(e)),
            Err(e) => Err(e),
        }
    }
}

impl<B: BlobBackend> Debug for BlobStore<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobStore")
            .field("backend", &self.backend)
            .field("max_attempts", &self.max_attempts)
            .field("adopt_unfenced", &self.adopt_unfenced)
            .field("lease_prefix", &self.lease_prefix)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<B: BlobBackend> FencedStore for BlobStore<B> {
    fn name(&self) -> &'static str {
        self.backend.name()
    }

    fn limits(&self) -> Limits {
        self.backend.limits()
    }

    async fn put(&self, key: &str, value: Bytes, token: FencingToken) -> Result<()> {
        self.check_write(key, token, value.len())?;
        let small = value.len() <= CONTENDED_WRITE_MAX;
        self.update(key, token, Intent::Put { small }, value).await
    }

    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        self.limits().check_key(key)?;
        Ok(self.load(key, true).await?.and_then(|current| {
            current.meta.has_value.then_some(Versioned {
                value: current.value,
                token: current.meta.token,
            })
        }))
    }

    async fn fence(&self, key: &str, token: FencingToken) -> Result<FencingToken> {
        self.check_write(key, token, 0)?;
        self.update(key, token, Intent::Fence, Bytes::new()).await?;
        Ok(token)
    }

    async fn mark(&self, key: &str) -> Result<Option<FencingToken>> {
        self.limits().check_key(key)?;
        Ok(self.load(key, false).await?.map(|c| c.meta.token))
    }

    async fn delete(&self, key: &str, token: FencingToken) -> Result<()> {
        self.check_write(key, token, 0)?;
        self.update(key, token, Intent::Delete, Bytes::new()).await
    }

    async fn verify(&self) -> Result<Vec<SafetyCheck>> {
        let mut checks = safety::probe_store(self).await?;
        checks.extend(precondition_checks(&self.backend, safety::PROBE_KEY).await?);
        self.known.remember(safety::PROBE_KEY, None);
        checks.extend(self.backend.bucket_checks().await?);
        if let Some(endpoint) = self.backend.endpoint() {
            checks.push(crate::tls::TlsOptions::endpoint_check(&endpoint));
        }
        Ok(checks)
    }
}
