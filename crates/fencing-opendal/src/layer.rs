//! [`FencingLayer`]: the layer and its options.

use std::fmt;
use std::sync::Arc;

use fencing_core::Limits;
use fencing_core::adapter::blob::KnownVersions;
use fencing_core::keepalive::TokenSource;
use opendal::raw::Servicer;

use crate::core::Core;
use crate::service::FencedService;

/// S3's limits (the tightest of the object stores OpenDAL speaks to): keys
/// of 1,024 bytes, one `PUT` of 5 GiB less the 17-byte frame, any token.
pub const DEFAULT_LIMITS: Limits = fencing_core::adapter::blob::S3_LIMITS;

/// An OpenDAL [`Layer`](opendal::raw::Layer) that fences every write: add it to
/// an operator on a bucket, and a writer whose lease was taken over cannot
/// overwrite what the new holder wrote, however long it was paused.
///
/// ```
/// use fencing_core::FencingToken;
/// use fencing_opendal::FencingLayer;
/// use opendal::Operator;
/// use opendal::services::Memory;
///
/// # fn main() -> opendal::Result<()> {
/// // In a real program: S3 (or any service with conditional writes) and a lease's token source,
/// // `FencingLayer::new(guard.watch())`.
/// let op = Operator::new(Memory::default())?.layer(FencingLayer::new(FencingToken::new(7)));
/// # let _ = op;
/// # Ok(())
/// # }
/// ```
///
/// Every object written through the layer starts with the 17-byte fencing
/// frame (`"fencing1"`, the token, `v` for a value or `m` for a tombstone),
/// byte for byte what `fencing_core`'s `BlobStore` and
/// `fencing_object_store`'s `FencedObjectStore` write: the three read each
/// other's objects and keep the same mark. Reads, `stat` and `list` show the
/// caller's bytes and sizes, so every reader of these objects must go
/// through the layer (or one of the other two).
///
/// What each operation does is in the crate documentation.
#[derive(Clone)]
pub struct FencingLayer {
    source: Arc<dyn TokenSource>,
    adopt_unfenced: bool,
    limits: Limits,
    max_attempts: u32,
}

impl FencingLayer {
    /// Fences writes with the token `source` answers when they are sent: a
    /// lease's [`LeaseWatch`](fencing_core::keepalive::LeaseWatch) (which
    /// answers [`LeaseLost`](fencing_core::Error::LeaseLost) once the lease
    /// is lost, and nothing more is written), or a fixed
    /// [`FencingToken`](fencing_core::FencingToken).
    pub fn new(source: impl TokenSource) -> Self {
        Self {
            source: Arc::new(source),
            adopt_unfenced: false,
            limits: DEFAULT_LIMITS,
            max_attempts: 32,
        }
    }

    /// Whether objects without a fencing frame are taken over at mark 0
    /// (read as they are, overwritten by any token) instead of refused with
    /// [`Unfenced`](fencing_core::Error::Unfenced). Off by default; turn it
    /// on once to adopt existing data. `list` then reads every object's
    /// first bytes to report its size.
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
    /// writers before it gives up with
    /// [`Contention`](fencing_core::Error::Contention) (default 32).
    #[must_use]
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }
}

impl fmt::Debug for FencingLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencingLayer")
            .field("source", &self.source)
            .field("adopt_unfenced", &self.adopt_unfenced)
            .field("limits", &self.limits)
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

impl opendal::raw::Layer for FencingLayer {
    fn apply_service(&self, srv: Servicer) -> Servicer {
        Arc::new(FencedService::new(Core {
            inner: srv,
            source: self.source.clone(),
            adopt_unfenced: self.adopt_unfenced,
            limits: self.limits,
            max_attempts: self.max_attempts,
            known: KnownVersions::new(),
        }))
    }
}
