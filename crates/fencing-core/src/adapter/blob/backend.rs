//! What a backend implements ([`BlobBackend`]) and the types it speaks:
//! versions, preconditions, write outcomes, stored bytes.

use std::fmt::{self, Debug};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;

use crate::safety::SafetyCheck;
use crate::{FencingToken, Limits, Result};

/// The metadata key of the token hint (never read back: the frame decides).
pub const TOKEN_METADATA_KEY: &str = "fencing-token";
/// The metadata key of the state hint (`value` or `marker`).
pub const STATE_METADATA_KEY: &str = "fencing-state";

/// An object's version as its backend names it: an ETag, a generation.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct BlobVersion(String);

impl BlobVersion {
    /// Wraps a backend's version string.
    pub fn new(version: impl Into<String>) -> Self {
        Self(version.into())
    }

    /// The version string, as the backend's precondition expects it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for BlobVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlobVersion({})", self.0)
    }
}

/// What the frame says about an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlobMeta {
    /// The object's mark.
    pub token: FencingToken,
    /// `false` for a marker left by `fence` on an absent key or by `delete`.
    pub has_value: bool,
}

impl From<super::super::cas::Frame> for BlobMeta {
    /// The frame the write engine asks for, as the blob frame encodes it.
    fn from(frame: super::super::cas::Frame) -> Self {
        Self {
            token: frame.token,
            has_value: frame.live,
        }
    }
}

impl BlobMeta {
    /// The hint as `(key, value)` pairs, for backends that also write it as
    /// user metadata (for people and tools; the store never reads it).
    pub fn to_pairs(self) -> [(&'static str, String); 2] {
        let state = if self.has_value { "value" } else { "marker" };
        [
            (TOKEN_METADATA_KEY, self.token.to_string()),
            (STATE_METADATA_KEY, state.to_owned()),
        ]
    }
}

/// An object as stored: its version and its bytes (all of them, or the
/// first ones for [`BlobBackend::read_range`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredObject {
    /// The version a conditional write must match.
    pub version: BlobVersion,
    /// The stored bytes, frame included.
    pub bytes: Bytes,
    /// When the server last wrote the object, on the server's clock
    /// (`Last-Modified`, GCS's update time), if the answer said, truncated
    /// to its grain (never rounded up). The bucket issuer seeds a lease
    /// record it made from it where the backend tells no
    /// [`server_now`](BlobBackend::server_now), and, only with
    /// [`LeaseExpiry::ServerClocksAgree`](super::LeaseExpiry::ServerClocksAgree),
    /// judges a lease's age by it against [`answered`](Self::answered);
    /// the store never reads it.
    pub modified: Option<SystemTime>,
    /// The `Date` of the answer that carried the object: the time of the
    /// server that answered, when it answered, if the answer said. Only
    /// with [`LeaseExpiry::ServerClocksAgree`](super::LeaseExpiry::ServerClocksAgree)
    /// does the bucket issuer judge a lease's age by it against
    /// [`modified`](Self::modified), both from one answer (so that no
    /// other answer can make a live lease look old), assuming the node that
    /// answered keeps the time of the one that stamped the record.
    pub answered: Option<SystemTime>,
}

impl StoredObject {
    /// An object at `version` holding `bytes`, of unknown modification time.
    pub fn new(version: BlobVersion, bytes: Bytes) -> Self {
        Self {
            version,
            bytes,
            modified: None,
            answered: None,
        }
    }

    /// The same object, last written at `modified` by the server's clock.
    #[must_use]
    pub fn modified_at(mut self, modified: Option<SystemTime>) -> Self {
        self.modified = modified;
        self
    }

    /// The same object, carried by an answer dated `answered` (its `Date`).
    #[must_use]
    pub fn answered_at(mut self, answered: Option<SystemTime>) -> Self {
        self.answered = answered;
        self
    }
}

/// The condition a write is made under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// The object must not exist (`If-None-Match: *`, `ifGenerationMatch=0`).
    Absent,
    /// The object must still be at this version (`If-Match`,
    /// `ifGenerationMatch`).
    Matches(BlobVersion),
}

impl Precondition {
    /// Whether a write under this precondition would be applied to an
    /// object now at `version` (`None`: absent).
    pub fn holds_for(&self, version: Option<&BlobVersion>) -> bool {
        match (self, version) {
            (Self::Absent, None) => true,
            (Self::Matches(expected), Some(version)) => expected == version,
            _ => false,
        }
    }
}

/// A conditional write, as the loop hands it to [`BlobBackend::write`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobWrite {
    /// The framed body (opaque to the backend).
    pub body: Bytes,
    /// What the frame says, which the backend may also store as user
    /// metadata (for people and tools; the store never reads it).
    pub hint: BlobMeta,
    /// The condition the write is made under.
    pub precondition: Precondition,
}

impl BlobWrite {
    /// A write of `body` under `precondition`.
    pub fn new(body: Bytes, hint: BlobMeta, precondition: Precondition) -> Self {
        Self {
            body,
            hint,
            precondition,
        }
    }
}

/// The result of a conditional write that reached the backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Written; the object's new version.
    Written(BlobVersion),
    /// The precondition did not hold (HTTP 412, Azure's 409 on create, S3's
    /// 409 on a concurrent conditional write). Nothing was written.
    PreconditionFailed,
}

/// The small trait an object store implements to be fenced by [`BlobStore`](super::BlobStore).
///
/// Bodies are opaque to the backend: the store frames and unframes them.
#[async_trait]
pub trait BlobBackend: Send + Sync + Debug {
    /// A short name for messages, e.g. `"gcs"`.
    fn name(&self) -> &'static str;

    /// The backend's key, value and token limits; `max_value_len` is the
    /// largest *value*, the object size limit less [`FRAME_HEADER_LEN`](super::FRAME_HEADER_LEN).
    fn limits(&self) -> Limits;

    /// The object's version and its first `len` bytes (all of them if it is
    /// shorter, or for `None`), in one request; `None` if absent. A prefix
    /// is the loop's cheap read: a ranged GET costs what a HEAD costs and
    /// returns the token.
    async fn read_range(&self, key: &str, len: Option<usize>) -> Result<Option<StoredObject>>;

    /// The version and first `len` bytes: [`read_range`](Self::read_range)
    /// with `Some(len)`.
    async fn read_prefix(&self, key: &str, len: usize) -> Result<Option<StoredObject>> {
        self.read_range(key, Some(len)).await
    }

    /// The whole object, or `None` if absent: [`read_range`](Self::read_range)
    /// with `None`.
    async fn read(&self, key: &str) -> Result<Option<StoredObject>> {
        self.read_range(key, None).await
    }

    /// Writes `write.body` if `write.precondition` holds, in one request,
    /// **without retrying inside the SDK** (a retried write that was
    /// applied fails its precondition and would look like a lost race).
    /// `write.hint` may be stored as user metadata. A failed precondition is
    /// [`WriteOutcome::PreconditionFailed`], not an error; a write that may
    /// have been applied is [`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown).
    async fn write(&self, key: &str, write: BlobWrite) -> Result<WriteOutcome>;

    /// Whether [`delete_if`](Self::delete_if) is implemented. Default: no.
    fn deletes_conditionally(&self) -> bool {
        false
    }

    /// Deletes the object if it is still at `version`, in one request
    /// nothing retries blindly: `true` if deleted, `false` if the
    /// precondition failed (another version, or none). A delete that may
    /// have been applied is [`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown).
    /// Used only to remove an idle lease record
    /// ([`TokenIssuer::remove_idle`](crate::TokenIssuer::remove_idle)).
    /// Default: [`Error::Unsupported`](crate::Error::Unsupported), for a
    /// client with no conditional delete.
    async fn delete_if(&self, key: &str, version: &BlobVersion) -> Result<bool> {
        let _ = (key, version);
        Err(crate::Error::Unsupported {
            backend: self.name(),
            operation: "remove_idle",
        })
    }

    /// A version no object can have, for [`FencedStore::verify`](crate::FencedStore::verify)'s probe
    /// that the server refuses a write conditioned on it.
    fn unmatchable_version(&self) -> BlobVersion {
        BlobVersion::new("\"fencing-verify-never-matches\"")
    }

    /// What `verify` should report of the bucket's own settings: anything
    /// that deletes objects outside the store (a lifecycle expiration rule)
    /// takes their marks with it, and a zombie may then write. None by
    /// default.
    async fn bucket_checks(&self) -> Result<Vec<SafetyCheck>> {
        Ok(Vec::new())
    }

    /// The endpoint the client talks to (`https://…`, `http://127.0.0.1:9000`),
    /// without credentials, if the client can say: `verify` reports a
    /// plaintext endpoint past the loopback. `None` by default.
    fn endpoint(&self) -> Option<String> {
        None
    }

    /// The server's clock now, as a [`ServerClock`](super::ServerClock) fed
    /// with the `Date` of the backend's answers estimates it: never ahead
    /// of the server's clock, and at most
    /// [`server_now_lag`](Self::server_now_lag) behind it. The answer that
    /// showed a lease record absent must have fed it. The bucket issuer
    /// seeds a new lease record from it (an estimate ahead makes the first
    /// token higher, and a record deleted and made again later at the real
    /// time may then start below it: the contract's table of what can send
    /// tokens back); it never judges expiry by it. `None` (the default)
    /// when the backend cannot tell: the issuer then seeds a record it
    /// made from the record's own [`StoredObject::modified`].
    fn server_now(&self) -> Option<SystemTime> {
        None
    }

    /// The most [`server_now`](Self::server_now) may trail the server's
    /// clock: a second (the grain of `Date`) by default. A new lease record
    /// starts this far above the estimate and is granted once that time has
    /// passed, so that one made again within the same second still starts
    /// above every token of the one it replaces.
    fn server_now_lag(&self) -> Duration {
        Duration::from_secs(1)
    }
}

/// Forwards to the backend behind the reference (two stores, or a test and
/// a store, on one backend).
macro_rules! forward_blob_backend {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl<B: BlobBackend + ?Sized> BlobBackend for $ty {
            fn name(&self) -> &'static str {
                (**self).name()
            }
            fn limits(&self) -> Limits {
                (**self).limits()
            }
            async fn read_range(&self, key: &str, len: Option<usize>) -> Result<Option<StoredObject>> {
                (**self).read_range(key, len).await
            }
            async fn write(&self, key: &str, write: BlobWrite) -> Result<WriteOutcome> {
                (**self).write(key, write).await
            }
            fn deletes_conditionally(&self) -> bool {
                (**self).deletes_conditionally()
            }
            async fn delete_if(&self, key: &str, version: &BlobVersion) -> Result<bool> {
                (**self).delete_if(key, version).await
            }
            fn unmatchable_version(&self) -> BlobVersion {
                (**self).unmatchable_version()
            }
            async fn bucket_checks(&self) -> Result<Vec<SafetyCheck>> {
                (**self).bucket_checks().await
            }
            fn endpoint(&self) -> Option<String> {
                (**self).endpoint()
            }
            fn server_now(&self) -> Option<SystemTime> {
                (**self).server_now()
            }
            fn server_now_lag(&self) -> Duration {
                (**self).server_now_lag()
            }
        }
    )*};
}
forward_blob_backend!(&B, std::sync::Arc<B>);
