//! [`BlobIssuer`]: a fenced lease that needs nothing but a bucket.
//!
//! One object per resource, the *lease record*, changed only by
//! conditional writes on the version last read (the same compare-and-swap
//! the [`BlobStore`](super::BlobStore) loop uses, in the same frame). The
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
//! than one grant per microsecond to be otherwise (see `seed.rs` for the
//! bound). A backend that tells no server time at all is refused
//! ([`Error::UnsafeConfiguration`]). `raise_floor` sets any higher floor.
//! `verify` warns about lifecycle rules.
//!
//! **Cost.** A grant is one `GET` and one conditional `PUT`; a renew or a
//! release is one conditional `PUT` (the issuer remembers the version it
//! wrote); acquiring again a record this issuer released is one `PUT`.
//! A waiter polls with one `GET` per try. Making a record waits for the
//! server's clock to pass its first token, up to the grain of the
//! backend's timestamps; where the backend has no `Date` estimate
//! (`object_store`), it is also one more `PUT` and `GET` (written unseeded,
//! read back for its `Last-Modified`).

use std::fmt::{self, Debug};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;

mod expiry;
mod io;
mod record;
mod seed;

pub use self::expiry::LeaseExpiry;

use self::io::Wrote;
use self::record::Record;
use super::{BlobBackend, BlobVersion, Precondition};
use crate::adapter::{Recent, poll_acquire};
use crate::safety::{self, SafetyCheck};
use crate::{Error, FencingToken, HolderId, Holding, Lease, LeaseRequest, Result, TokenIssuer};

/// How many conditional writes `raise_floor` tries before reporting
/// [`Error::Contention`].
const FLOOR_ATTEMPTS: u32 = 8;

/// A record as read (or as we last wrote it).
#[derive(Clone, Debug)]
struct Current {
    version: BlobVersion,
    record: Record,
    /// On the server's clock, if the backend said.
    modified: Option<SystemTime>,
    /// The `Date` of the answer that carried `modified`.
    answered: Option<SystemTime>,
    /// When the answer (or our write's) arrived, on this process's
    /// monotonic clock.
    received: Instant,
}

impl Current {
    /// Made, but no token granted from it yet (see `seed.rs`).
    fn unseeded(&self) -> bool {
        self.record.is_unseeded()
    }
}

/// What this issuer last knew of a record: for its own next write (no
/// read) and for judging expiry on its own monotonic clock.
#[derive(Clone, Debug)]
struct Known {
    current: Current,
    /// When this version was first seen (after the answer that showed it).
    since: Instant,
}

/// How many records an issuer remembers.
const KNOWN_CAP: usize = 4096;

/// A [`TokenIssuer`] on any [`BlobBackend`]: S3, GCS, Azure Blob, or the
/// in-memory one. See the [module docs](self) for the record, the expiry
/// rule and the cost.
///
/// The records live under a prefix (default
/// [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX)), so one bucket can be both
/// the issuer and the store. Clones share one record cache.
#[derive(Clone)]
pub struct BlobIssuer<B> {
    backend: B,
    prefix: String,
    expiry: LeaseExpiry,
    known: Arc<Mutex<Recent<Known>>>,
}

impl<B: BlobBackend> Debug for BlobIssuer<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobIssuer")
            .field("backend", &self.backend)
            .field("prefix", &self.prefix)
            .field("expiry", &self.expiry)
            .finish_non_exhaustive()
    }
}

impl<B: BlobBackend> BlobIssuer<B> {
    /// The default prefix of the lease records, apart from a store's keys.
    pub const DEFAULT_PREFIX: &'static str = "fencing-lease/";
    /// The highest floor: the next grant, one above it, must fit a `u64`.
    pub const MAX_FLOOR: FencingToken = FencingToken::new(u64::MAX - 1);

    /// An issuer keeping its lease records in `backend` under
    /// [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX). Nothing is sent until the
    /// first operation.
    pub fn new(backend: B) -> Self {
        Self {
            backend,
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            expiry: LeaseExpiry::default(),
            known: Arc::new(Mutex::new(Recent::with_cap(KNOWN_CAP))),
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
        self.expiry = expiry;
        self
    }

    /// How a waiter judges a held record dead.
    pub fn expiry(&self) -> LeaseExpiry {
        self.expiry
    }

    /// The prefix of the lease records' keys.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The key of `resource`'s record.
    pub fn record_key(&self, resource: &str) -> String {
        format!("{}{resource}", self.prefix)
    }

    fn known(&self, key: &str) -> Option<Known> {
        self.known.lock().expect("known lock").get(key)
    }

    /// Remembers `current` as just seen or written, keeping the instant it
    /// was first seen when the version is the same.
    fn remember(&self, key: &str, current: Option<Current>) {
        let mut known = self.known.lock().expect("known lock");
        let remembered = current.map(|current| {
            let since = known
                .get(key)
                .filter(|k| k.current.version == current.version)
                .map_or_else(Instant::now, |k| k.since);
            Known { current, since }
        });
        known.put(key, remembered);
    }

    /// Writes `lease`'s record as `next` makes it, from the version this
    /// issuer wrote last or, failing that, one read. `Ok(None)` when the
    /// record is no longer the lease's.
    async fn rewrite(
        &self,
        lease: &Lease,
        next: impl Fn(&Record) -> Record,
    ) -> Result<Option<Record>> {
        let key = self.record_key(lease.resource());
        let mut cached = self
            .known(&key)
            .map(|k| k.current)
            .filter(|c| c.record.is_held_by(lease));
        loop {
            let from_cache = cached.is_some();
            let current = match cached.take() {
                Some(current) => current,
                None => match self.read(&key).await? {
                    Some(current) if current.record.is_held_by(lease) => current,
                    _ => return Ok(None),
                },
            };
            let record = next(&current.record);
            match self
                .write(&key, Precondition::Matches(current.version), record.clone())
                .await?
            {
                Wrote::Yes => return Ok(Some(record)),
                // The cached version was old: read and decide again.
                Wrote::Lost if from_cache => {}
                Wrote::Lost => return Ok(None),
            }
        }
    }

    /// Writes a grant of `request` at `token` under `precondition`.
    async fn grant(
        &self,
        request: &LeaseRequest,
        key: &str,
        precondition: Precondition,
        token: u64,
    ) -> Result<Option<Lease>> {
        let record = Record {
            counter: token,
            holder: Some(request.holder.to_string()),
            // Rounded up: never shorter than the holder's deadline.
            ttl_ms: request.ttl_millis_ceil(),
            nonce: rand::random(),
        };
        let sent_at = Instant::now();
        Ok(match self.write(key, precondition, record).await? {
            Wrote::Yes => Some(Lease::new(request, FencingToken::new(token), sent_at)),
            Wrote::Lost => None,
        })
    }

    /// The first grant of a record absent (`current` is `None`) or
    /// unseeded, at the token [`seed`](Self::seed) gives it.
    async fn grant_first(
        &self,
        request: &LeaseRequest,
        key: &str,
        current: Option<Current>,
    ) -> Result<Option<Lease>> {
        match self.seed(key, current).await? {
            Some((precondition, token)) => self.grant(request, key, precondition, token).await,
            None => Ok(None),
        }
    }

    fn next_token(current: &Current) -> Result<u64> {
        current
            .record
            .counter
            .checked_add(1)
            .ok_or(Error::TokenOutOfRange {
                token: FencingToken::new(u64::MAX),
                max: Self::MAX_FLOOR,
            })
    }
}

#[async_trait]
impl<B: BlobBackend> TokenIssuer for BlobIssuer<B> {
    fn name(&self) -> &'static str {
        self.backend.name()
    }

    fn expiry_needs_watching(&self) -> bool {
        self.expiry == LeaseExpiry::WaiterClock
    }

    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
        request.validate(self.min_ttl())?;
        let key = self.record_key(&request.resource);
        // A record this issuer saw free (its own release): write at once.
        if let Some(known) = self
            .known(&key)
            .filter(|k| k.current.record.holder.is_none() && !k.current.record.is_unseeded())
        {
            let token = Self::next_token(&known.current)?;
            let version = Precondition::Matches(known.current.version);
            if let Some(lease) = self.grant(request, &key, version, token).await? {
                return Ok(Some(lease));
            }
        }
        match self.read(&key).await? {
            Some(current) if current.unseeded() => {
                self.grant_first(request, &key, Some(current)).await
            }
            None => self.grant_first(request, &key, None).await,
            Some(current) if current.record.holder.is_none() || self.expired(&key, &current) => {
                let token = Self::next_token(&current)?;
                let version = Precondition::Matches(current.version);
                self.grant(request, &key, version, token).await
            }
            Some(_) => Ok(None),
        }
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
    /// [`Error::LeaseLost`] if the lease's local deadline has passed (a
    /// waiter may have judged it dead) or the record is no longer its.
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        crate::adapter::check_ttl(lease.ttl())?;
        if lease.is_expired() {
            return Err(Error::lease_lost(lease));
        }
        let sent_at = Instant::now();
        let renewed = self
            .rewrite(lease, |record| Record {
                ttl_ms: crate::adapter::ttl_millis_ceil(lease.ttl()),
                nonce: rand::random(),
                ..record.clone()
            })
            .await?;
        match renewed {
            Some(_) => Ok(lease.renewed(sent_at)),
            None => Err(Error::lease_lost(lease)),
        }
    }

    /// One conditional `PUT` that writes the holder away and keeps the
    /// counter.
    async fn release(&self, lease: &Lease) -> Result<()> {
        let released = self
            .rewrite(lease, |record| Record {
                holder: None,
                ttl_ms: 0,
                nonce: rand::random(),
                ..record.clone()
            })
            .await?;
        released.map(|_| ()).ok_or_else(|| Error::lease_lost(lease))
    }

    /// The holder the record names, unless expiry (this issuer's own clock,
    /// or with [`LeaseExpiry::ServerClocksAgree`] the server's) judged it
    /// dead.
    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        let key = self.record_key(resource);
        let Some(current) = self.read(&key).await? else {
            return Ok(None);
        };
        let Some(holder) = current.record.holder.clone() else {
            return Ok(None);
        };
        if self.expired(&key, &current) {
            return Ok(None);
        }
        Ok(Some(Holding {
            holder: HolderId::new(holder)
                .map_err(|_| self.foreign(&key, "its holder is no holder id"))?,
            token: FencingToken::new(current.record.counter),
        }))
    }

    /// Raises the counter of a free (or dead) record, creating it if need
    /// be; a live holder's is [`Error::Busy`]. A floor above
    /// [`BlobIssuer::MAX_FLOOR`] is [`Error::TokenOutOfRange`], before
    /// anything is sent.
    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        if floor > Self::MAX_FLOOR {
            return Err(Error::TokenOutOfRange {
                token: floor,
                max: Self::MAX_FLOOR,
            });
        }
        let key = self.record_key(resource);
        for _ in 0..FLOOR_ATTEMPTS {
            let (precondition, counter) = match self.read(&key).await? {
                Some(current) if current.record.counter >= floor.get() => return Ok(()),
                Some(current)
                    if current.record.holder.is_some() && !self.expired(&key, &current) =>
                {
                    return Err(Error::busy(resource, "raise_floor"));
                }
                Some(current) if !current.unseeded() => {
                    (Precondition::Matches(current.version), floor.get())
                }
                // A floor only raises: a record made (again) starts where a
                // grant would start it, if that is higher.
                current => match self.seed(&key, current).await? {
                    Some((precondition, first)) => {
                        (precondition, floor.get().max(first.saturating_sub(1)))
                    }
                    None => continue,
                },
            };
            let record = Record {
                counter,
                holder: None,
                ttl_ms: 0,
                nonce: rand::random(),
            };
            if let Wrote::Yes = self.write(&key, precondition, record).await? {
                return Ok(());
            }
        }
        Err(Error::Contention {
            key,
            attempts: FLOOR_ATTEMPTS,
        })
    }

    /// The generic probe, then on its record: the server refuses writes
    /// whose precondition cannot hold (a bucket that ignores them could
    /// grant one lease twice), the bucket's own settings, the clock expiry
    /// is judged by, and the transport.
    async fn verify(&self) -> Result<Vec<SafetyCheck>> {
        let mut checks = safety::probe_issuer(self).await?;
        let key = self.record_key(safety::PROBE_RESOURCE);
        checks.extend(super::precondition_checks(&self.backend, &key).await?);
        self.remember(&key, None);
        checks.extend(self.backend.bucket_checks().await?);
        let read = self.backend.read(&key).await?;
        let modified = read.as_ref().is_some_and(|s| s.modified.is_some());
        let dated = read.is_some_and(|s| s.modified.is_some() && s.answered.is_some());
        checks.push(match (self.expiry, dated) {
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
        if let Some(endpoint) = self.backend.endpoint() {
            checks.push(crate::tls::TlsOptions::endpoint_check(&endpoint));
        }
        Ok(checks)
    }
}
