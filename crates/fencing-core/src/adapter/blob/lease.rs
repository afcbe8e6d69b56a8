//! [`BlobIssuer`]: a fenced lease that needs nothing but a bucket.
//!
//! One object per resource, the *lease record*, changed only by
//! conditional writes on the version last read (the same compare-and-swap
//! the [`BlobStore`](super::BlobStore) loop uses, in the same frame): the
//! record lease of [`crate::adapter::record`], over [`BlobRecords`]. The
//! record keeps the counter: a grant writes `counter + 1` and the holder, a
//! release writes the holder away and keeps the counter. Tokens therefore
//! strictly increase across holders, issuer restarts and crashes.
//!
//! **Expiry is judged by a waiter timing an unchanged version on its own
//! monotonic clock; no two clocks are compared.** A held record is taken
//! over, conditioned on its version, once this waiter has seen that same
//! version for a whole TTL: the holder did not renew for a TTL. The
//! holder's own deadline counts from before it sent its write, and the
//! waiter's from after the answer that showed it, so the holder's always
//! ends first. A record released by its holder is free at once. A waiter
//! that first sees a lease abandoned long ago still waits a TTL: the price
//! of trusting no server's clock (the rule amazon-dynamodb-lock-client
//! uses). A client whose clock is hours off neither steals a live lease nor
//! keeps a dead one: no wall clock is read.
//!
//! [`LeaseExpiry::ServerClocksAgree`] (opt-in, `lease_expiry=server-clocks-agree`)
//! also takes over once the answer that carried the record says its last
//! write (`Last-Modified`) is a TTL old by that same answer's `Date`, plus
//! the second those timestamps are rounded to, where the backend reports
//! both ([`StoredObject::answered`](super::StoredObject::answered)). That
//! compares two servers' clocks: the node that answered the read and the
//! one that stamped the record. A front end whose clock runs ahead (a node
//! of a self-hosted S3-compatible cluster, a proxy) makes a live lease look
//! dead, and two holders hold at once.
//!
//! **A record deleted by hand** (or by a lifecycle rule) takes its counter
//! with it. So that tokens still never go back, a record is made at the
//! server's time in microseconds, not at 1, and granted only once the
//! server's clock has passed it (at most a second's wait, once per record
//! made): a record made again after a deletion, in the same second too,
//! starts above every token the deleted one gave, which would need more
//! than one grant per microsecond to be otherwise (see the record
//! lease's `seed.rs` for the bound). A backend that tells no server time at all is refused
//! ([`Error::UnsafeConfiguration`](crate::Error::UnsafeConfiguration)). `raise_floor` sets any higher floor.
//! `verify` warns about lifecycle rules.
//!
//! **Cost.** A grant is one `GET` and one conditional `PUT`; a renew or a
//! release is one conditional `PUT` (the issuer remembers the version it
//! wrote); acquiring again a record this issuer released is one `PUT`.
//! A waiter polls with one `GET` per try. Making a record is one more
//! `PUT` (made unseeded, then seeded on its own version) and waits for the
//! server's clock to pass its first token, up to the grain of the
//! backend's timestamps; where the backend has no `Date` estimate
//! (`object_store`), also one more `GET` (read back for its
//! `Last-Modified`).

use std::fmt::{self, Debug};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

mod io;
mod record;

pub use self::io::BlobRecords;
pub use crate::adapter::record::LeaseExpiry;

use super::BlobBackend;
use crate::adapter::poll_acquire;
use crate::adapter::record::RecordLeases;
use crate::safety::{self, SafetyCheck};
use crate::{FencingToken, Holding, Lease, LeaseRequest, Removal, Result, TokenIssuer};

/// A [`TokenIssuer`] on any [`BlobBackend`]: S3, GCS, Azure Blob, or the
/// in-memory one. See the [module docs](self) for the record, the expiry
/// rule and the cost.
///
/// The records live under a prefix (default
/// [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX)), so one bucket can be both
/// the issuer and the store. Clones share one record cache.
#[derive(Clone)]
pub struct BlobIssuer<B: BlobBackend> {
    prefix: String,
    leases: RecordLeases<BlobRecords<B>>,
    /// Whether the server was seen to refuse a delete whose condition
    /// cannot hold: checked once, before the first removal.
    deletes_checked: Arc<tokio::sync::OnceCell<SafetyCheck>>,
}

impl<B: BlobBackend> Debug for BlobIssuer<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobIssuer")
            .field("backend", self.backend())
            .field("prefix", &self.prefix)
            .field("expiry", &self.expiry())
            .finish_non_exhaustive()
    }
}

impl<B: BlobBackend> BlobIssuer<B> {
    /// The default prefix of the lease records, apart from a store's keys.
    pub const DEFAULT_PREFIX: &'static str = "fencing-lease/";
    /// The highest floor: the next grant, one above it, must fit a `u64`.
    pub const MAX_FLOOR: FencingToken = RecordLeases::<BlobRecords<B>>::MAX_FLOOR;

    /// An issuer keeping its lease records in `backend` under
    /// [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX). Nothing is sent until the
    /// first operation.
    pub fn new(backend: B) -> Self {
        Self {
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            leases: RecordLeases::new(BlobRecords { backend }, LeaseExpiry::default()),
            deletes_checked: Arc::default(),
        }
    }

    /// Another prefix for the lease records' keys.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How a waiter judges a held record dead:
    /// [`LeaseExpiry::WaiterClock`] (the default) trusts no server's clock;
    /// [`LeaseExpiry::ServerClocksAgree`] assumes every server node's clock
    /// agrees with the one that stamped the record (see its docs for what
    /// breaks when one does not).
    #[must_use]
    pub fn with_expiry(mut self, expiry: LeaseExpiry) -> Self {
        self.leases = self.leases.with_expiry(expiry);
        self
    }

    /// How a waiter judges a held record dead.
    pub fn expiry(&self) -> LeaseExpiry {
        self.leases.expiry()
    }

    /// The prefix of the lease records' keys.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.leases.port().backend
    }

    /// The key of `resource`'s record.
    pub fn record_key(&self, resource: &str) -> String {
        format!("{}{resource}", self.prefix)
    }

    /// The conditional-delete check on the probe record (made by a grant
    /// and release if it is not there).
    async fn delete_check(&self) -> Result<SafetyCheck> {
        let key = self.record_key(safety::PROBE_RESOURCE);
        if self.backend().read_prefix(&key, 1).await?.is_none() {
            safety::probe_issuer(self).await?;
        }
        super::probe::conditional_delete_check(self.backend(), &key).await
    }

    /// Whether this issuer can seed a record on this backend, and from
    /// what: for `verify`.
    fn seeded_from(&self, reads_tell_modified: bool) -> Option<&'static str> {
        if self.backend().server_now().is_some() {
            Some("the `Date` of the server's answers")
        } else if reads_tell_modified {
            Some("the record's own `Last-Modified` (written unseeded, then read back)")
        } else {
            None
        }
    }
}

#[async_trait]
impl<B: BlobBackend> TokenIssuer for BlobIssuer<B> {
    fn name(&self) -> &'static str {
        self.backend().name()
    }

    fn expiry_needs_watching(&self) -> bool {
        self.expiry() == LeaseExpiry::WaiterClock
    }

    /// One conditional `PUT` on a record this issuer released, else a
    /// `GET` and one conditional `PUT`.
    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
        request.validate(self.min_ttl())?;
        let key = self.record_key(&request.resource);
        self.leases.try_acquire(&key, request).await
    }

    /// Polls [`try_acquire`](TokenIssuer::try_acquire), one `GET` per try,
    /// backing off from 50 ms up to a quarter of the TTL and at most a
    /// second (a waiter costs at most a `GET` a second, and sees a release
    /// within one): an object store cannot tell a waiter that a record
    /// changed.
    async fn acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Lease> {
        let cap = (request.ttl / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        poll_acquire(self, request, wait, Duration::from_millis(50), cap).await
    }

    /// One conditional `PUT` from the version this issuer last wrote (a
    /// `GET` first if it knows none, or another was written since).
    ///
    /// # Errors
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) if the lease's local
    /// deadline has passed (a waiter may have judged it dead) or the
    /// record is no longer its.
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let key = self.record_key(lease.resource());
        self.leases.renew(&key, lease).await
    }

    /// One conditional `PUT` that writes the holder away and keeps the
    /// counter.
    async fn release(&self, lease: &Lease) -> Result<()> {
        let key = self.record_key(lease.resource());
        self.leases.release(&key, lease).await
    }

    /// The holder the record names, unless expiry (this issuer's own clock,
    /// or with [`LeaseExpiry::ServerClocksAgree`] the server's) judged it
    /// dead.
    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        let key = self.record_key(resource);
        let port = self.leases.port();
        self.leases
            .holder(&key, || port.foreign(&key, "its holder is no holder id"))
            .await
    }

    /// Raises the counter of a free (or dead) record, creating it if need
    /// be; a live holder's is [`Error::Busy`](crate::Error::Busy). A floor
    /// above [`BlobIssuer::MAX_FLOOR`] is
    /// [`Error::TokenOutOfRange`](crate::Error::TokenOutOfRange), before
    /// anything is sent.
    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        let key = self.record_key(resource);
        self.leases.raise_floor(&key, resource, floor).await
    }

    /// Deletes the record on its version once this issuer has seen it
    /// unchanged for `idle_for` (the call waits out what it has not seen),
    /// if its counter is below the server's clock; where the backend has
    /// no conditional delete, [`Error::Unsupported`](crate::Error::Unsupported).
    ///
    /// # Errors
    /// [`Error::UnsafeConfiguration`](crate::Error::UnsafeConfiguration)
    /// on a server that applied a delete whose condition could not hold
    /// (checked once per issuer, on the probe record, before the first
    /// removal).
    async fn remove_idle(&self, resource: &str, idle_for: Duration) -> Result<Removal> {
        if self.backend().deletes_conditionally() {
            crate::adapter::check_idle(idle_for)?;
            let check = self
                .deletes_checked
                .get_or_try_init(|| self.delete_check())
                .await?;
            if !check.is_safe() {
                return Err(crate::Error::UnsafeConfiguration {
                    backend: self.backend().name(),
                    reason: format!("nothing removed of {resource:?}: {}", check.detail),
                });
            }
        }
        let key = self.record_key(resource);
        self.leases.remove_idle(&key, idle_for).await
    }

    /// The generic probe, then on its record: the server refuses writes
    /// whose precondition cannot hold (a bucket that ignores them could
    /// grant one lease twice), the bucket's own settings, the clock expiry
    /// is judged by, and the transport.
    async fn verify(&self) -> Result<Vec<SafetyCheck>> {
        let mut checks = safety::probe_issuer(self).await?;
        let key = self.record_key(safety::PROBE_RESOURCE);
        checks.extend(super::precondition_checks(self.backend(), &key).await?);
        self.leases.forget(&key);
        if self.backend().deletes_conditionally() {
            checks.push(self.delete_check().await?);
        }
        checks.extend(self.backend().bucket_checks().await?);
        let read = self.backend().read(&key).await?;
        let modified = read.as_ref().is_some_and(|s| s.modified.is_some());
        let dated = read.is_some_and(|s| s.modified.is_some() && s.answered.is_some());
        checks.push(match (self.expiry(), dated) {
            (LeaseExpiry::ServerClocksAgree, true) => SafetyCheck::warn(
                "lease expiry",
                "lease_expiry=server-clocks-agree: a held record is also judged dead by the Date of \
                 the answer that carried it against its Last-Modified, which assumes every server \
                 node's clock agrees within a second with the one that stamped the record; a front \
                 end or proxy whose clock runs ahead lets a waiter take over a live lease (two \
                 holders). The default, waiter-clock, compares no clocks",
            ),
            (LeaseExpiry::ServerClocksAgree, false) => SafetyCheck::pass(
                "lease expiry",
                "expiry is judged on a waiter's monotonic clock (the same record version unchanged \
                 for a TTL): this backend's reads tell no Date, so server-clocks-agree has nothing \
                 to compare; a released record is free at once",
            ),
            (_, _) => SafetyCheck::pass(
                "lease expiry",
                "expiry is judged on a waiter's monotonic clock (the same record version unchanged \
                 for a TTL): no two clocks are compared; a released record is free at once",
            ),
        });
        checks.push(match self.seeded_from(modified) {
            Some(source) => SafetyCheck::pass(
                "lease clock",
                format!(
                    "new records start at the server's time in microseconds, from {source}, and \
                     are granted once the server's clock has passed it, so one deleted by hand \
                     and made again (in the same second too) cannot restart its tokens"
                ),
            ),
            None => SafetyCheck::unsafe_(
                "lease clock",
                "this backend tells no server time (no Date estimate, no Last-Modified on reads): \
                 a new lease record cannot start above the tokens of one deleted before it, so \
                 grants on new records are refused",
            ),
        });
        if let Some(endpoint) = self.backend().endpoint() {
            checks.push(crate::tls::TlsOptions::endpoint_check(&endpoint));
        }
        Ok(checks)
    }
}
