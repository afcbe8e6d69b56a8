//! A lease held for you: take it, fence the keys it guards, keep it alive,
//! stop the work when it is lost, give it back.
//!
//! ```
//! # use std::sync::Arc;
//! # use std::time::Duration;
//! use fencing_core::lock::IssuerExt;
//! use fencing_core::memory::{MemoryIssuer, MemoryStore};
//! use fencing_core::{FencedStore, TokenIssuer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> fencing_core::Result<()> {
//! # let issuer: Arc<dyn TokenIssuer> = Arc::new(MemoryIssuer::new());
//! # let store: Arc<dyn FencedStore> = Arc::new(MemoryStore::new());
//! let held = issuer.lock("nightly-report")
//!     .ttl(Duration::from_secs(30))
//!     .wait(Duration::from_secs(10))
//!     .fence(&store, ["reports/nightly"])
//!     .await?;
//! held.run(store.put("reports/nightly", "report".into(), held.token())).await?;
//! held.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! Every issuer has [`lock`](IssuerExt::lock): `Arc<dyn TokenIssuer>` (what
//! `open_issuer` gives), `Arc<I>`, and every issuer that is `Clone`. A
//! [`Lock`] owns what it needs (the issuer and the stores it fences, as
//! `Arc`s): it can be kept, cloned and awaited again, once per lease.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::keepalive::{KeepAlive, KeepAliveOptions};
use crate::{Error, FencedStore, HolderId, Lease, LeaseRequest, Result, TokenIssuer};

/// The TTL of a lease when [`Lock::ttl`] is not given.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// How long one [`TokenIssuer::acquire`] waits before it is asked again
/// when the lock itself waits for as long as it takes.
const ONE_ACQUIRE: Duration = Duration::from_secs(3600);

/// The longest pause between retries of a failed acquire or fence.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// How many answers in a row may be lost (`OutcomeUnknown`) on one acquire
/// or one fence before the lock gives up: a fence is idempotent and a lost
/// grant can be looked up, so a few lost answers settle by asking again,
/// but an issuer or store that never answers is reported.
const MAX_UNKNOWN: u32 = 5;

/// [`lock`](Self::lock) on every issuer.
pub trait IssuerExt {
    /// A lock on `resource`: set its TTL, how long to wait and which keys
    /// to fence, then `.await` it for a [`LeaseGuard`].
    fn lock(&self, resource: impl Into<String>) -> Lock;
}

impl<I: TokenIssuer + Clone + 'static> IssuerExt for I {
    fn lock(&self, resource: impl Into<String>) -> Lock {
        Lock::new(Arc::new(self.clone()), resource)
    }
}

impl<I: TokenIssuer + 'static> IssuerExt for Arc<I> {
    fn lock(&self, resource: impl Into<String>) -> Lock {
        Lock::new(self.clone(), resource)
    }
}

impl IssuerExt for Arc<dyn TokenIssuer> {
    fn lock(&self, resource: impl Into<String>) -> Lock {
        Lock::new(self.clone(), resource)
    }
}

/// A lock being taken: what [`IssuerExt::lock`] returns. `.await` it.
///
/// Awaiting it
/// 1. acquires the lease, waiting up to [`wait`](Self::wait) (as long as
///    it takes if none is given), retrying errors the issuer marks
///    retryable, and settling a grant whose answer was lost by asking who
///    holds;
/// 2. starts renewing it with the issuer's own keep-alive
///    ([`TokenIssuer::renewal`]; a third of the TTL);
/// 3. fences every key given to [`fence`](Self::fence) with the new token
///    before it returns, so a paused former holder's writes are refused
///    even to keys this holder never writes.
///
/// If the lease is lost while fencing (a pause, an unreachable issuer), it
/// is taken again while the wait allows.
///
/// A `Lock` is a description, not a lease: [`acquire`](Self::acquire)
/// takes `&self`, so one lock (kept in a struct, cloned into tasks) is
/// taken again for every piece of work, each time under a new lease.
#[must_use = "a lock does nothing until it is awaited"]
#[derive(Clone)]
pub struct Lock {
    issuer: Arc<dyn TokenIssuer>,
    resource: String,
    ttl: Duration,
    wait: Option<Duration>,
    holder: Holder,
    fences: Vec<(Arc<dyn FencedStore>, String)>,
    keep_alive: KeepAliveOptions,
}

/// A store a [`Lock`] can keep: an `Arc` of one (`Arc<dyn FencedStore>`,
/// what `open_store` gives, or `Arc<S>`).
pub trait SharedStore {
    /// The store, shared.
    fn shared(&self) -> Arc<dyn FencedStore>;
}

impl SharedStore for Arc<dyn FencedStore> {
    fn shared(&self) -> Arc<dyn FencedStore> {
        self.clone()
    }
}

impl<S: FencedStore + 'static> SharedStore for Arc<S> {
    fn shared(&self) -> Arc<dyn FencedStore> {
        self.clone()
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("issuer", &self.issuer.name())
            .field("resource", &self.resource)
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("holder", &self.holder)
            .field(
                "fences",
                &self
                    .fences
                    .iter()
                    .map(|(store, key)| format!("{}:{key}", store.name()))
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Lock {
    /// A lock on `resource` of `issuer` (what [`IssuerExt::lock`] builds).
    pub fn new(issuer: Arc<dyn TokenIssuer>, resource: impl Into<String>) -> Self {
        Self {
            issuer,
            resource: resource.into(),
            ttl: DEFAULT_TTL,
            wait: None,
            holder: Holder::Fresh(Arc::new(|| Ok(HolderId::unique()))),
            fences: Vec::new(),
            keep_alive: KeepAliveOptions::default().release_on_drop(true),
        }
    }

    /// How long the lease lives without a renewal (default
    /// [`DEFAULT_TTL`], 30 s): how long others wait if this process dies
    /// holding it.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long to wait for the current holder to let go before giving up
    /// with [`Error::Timeout`] (default: as long as it takes;
    /// `Duration::ZERO` tries once).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// The holder id to acquire under (default: a fresh
    /// [`HolderId::unique`]). On a re-entrant issuer, a lock under the id
    /// of a lease already held gets that lease back.
    pub fn holder(mut self, holder: HolderId) -> Self {
        self.holder = Holder::Given(holder);
        self
    }

    /// Holder ids made afresh for every attempt of this lock (as
    /// [`Election`] makes one per campaign): nobody else acquires under
    /// them, so a grant whose answer was lost can be found by asking who
    /// holds.
    ///
    /// [`Election`]: crate::election::Election
    pub(crate) fn fresh_holders(
        mut self,
        make: impl Fn() -> Result<HolderId> + Send + Sync + 'static,
    ) -> Self {
        self.holder = Holder::Fresh(Arc::new(make));
        self
    }

    /// Fences `keys` in `store` with the new token before the lock is
    /// handed out. May be called for several stores.
    pub fn fence<K: Into<String>>(
        mut self,
        store: &impl SharedStore,
        keys: impl IntoIterator<Item = K>,
    ) -> Self {
        let store = store.shared();
        self.fences
            .extend(keys.into_iter().map(|key| (store.clone(), key.into())));
        self
    }

    /// How the lease is renewed ([`KeepAliveOptions`]). Dropping the
    /// [`LeaseGuard`] releases the lease whatever these say.
    pub fn keep_alive(mut self, options: KeepAliveOptions) -> Self {
        self.keep_alive = options.release_on_drop(true);
        self
    }

    /// Acquires, starts renewing and fences: see [`Lock`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad resource or TTL;
    /// [`Error::Timeout`] when the wait ran out; a non-retryable error of
    /// the issuer; a fence that failed (the lease is released first):
    /// [`Error::StaleToken`] if a store holds a mark above the new token
    /// while the lease is still held (a token went backwards: an issuer was
    /// replaced without a floor).
    pub async fn acquire(&self) -> Result<LeaseGuard> {
        // A wait too long to add to the clock is no deadline at all.
        let deadline = self.wait.and_then(|wait| Instant::now().checked_add(wait));
        loop {
            // A fresh holder id for every attempt: a lease given up by an
            // earlier attempt (lost while fencing, its release perhaps not
            // through) must never be mistaken for this one's.
            let request =
                LeaseRequest::new(&self.resource, self.ttl).with_holder(self.holder.next()?);
            request.validate(self.issuer.min_ttl())?;
            let lease = self.take(&request, deadline).await?;
            let guard = LeaseGuard {
                keep_alive: KeepAlive::with_options(self.issuer.clone(), lease, self.keep_alive),
            };
            match self.fence_all(&guard, deadline).await {
                Ok(()) => return Ok(guard),
                Err(e) => {
                    let lost = self.no_longer_held(&guard).await;
                    let token = guard.token();
                    let _ = guard.release().await;
                    let time_left = deadline.is_none_or(|d| Instant::now() < d);
                    if lost && time_left {
                        // Paused, cut off or revoked while fencing: a later
                        // holder may have fenced already. Take it again.
                        tracing::warn!(resource = %self.resource, %token, error = %e,
                            "lease lost while fencing on acquire; acquiring again");
                        continue;
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Whether the guard's lease is gone (lost, past its deadline, or held
    /// by someone else as the issuer answers), so that a fence refused
    /// meanwhile says nothing about tokens going backwards.
    async fn no_longer_held(&self, guard: &LeaseGuard) -> bool {
        if guard.is_lost() || guard.lease().is_expired() {
            return true;
        }
        let lease = guard.lease();
        match self.issuer.holder(&self.resource).await {
            Ok(Some(held)) => held.holder != *lease.holder() || held.token != lease.token(),
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// Acquires the resource within the deadline.
    async fn take(&self, request: &LeaseRequest, deadline: Option<Instant>) -> Result<Lease> {
        let mut backoff = Backoff::new(self.ttl);
        let mut unknown = 0;
        // When the first acquire whose answer was lost was sent: a grant
        // found later under this holder id may be that one's, so it is
        // dated from then.
        let mut first_unknown_sent_at = None;
        loop {
            let sent_at = Instant::now();
            let tried = match self.wait {
                // One try: what `try_acquire` is for (no queue entry, no
                // wake-up subscription).
                Some(Duration::ZERO) => match self.issuer.try_acquire(request).await {
                    Ok(Some(lease)) => Ok(lease),
                    Ok(None) => Err(Error::Timeout {
                        operation: format!("acquire {:?}", request.resource),
                        after: sent_at.elapsed(),
                    }),
                    Err(e) => Err(e),
                },
                _ => {
                    let wait =
                        deadline.map_or(ONE_ACQUIRE, |d| d.saturating_duration_since(sent_at));
                    self.issuer.acquire(request, wait).await
                }
            };
            let mut error = match tried {
                Ok(lease) => return Ok(lease),
                Err(e) => e,
            };
            if let Error::OutcomeUnknown { .. } = error {
                first_unknown_sent_at.get_or_insert(sent_at);
            } else {
                // "In a row": an answered attempt starts the count again.
                unknown = 0;
            }
            let out_of_time = deadline.is_some_and(|d| Instant::now() >= d);
            let retry = !out_of_time
                && match &error {
                    Error::Timeout { .. } if deadline.is_none() => true,
                    e if e.is_retryable() => true,
                    Error::OutcomeUnknown { .. } if unknown < MAX_UNKNOWN => {
                        unknown += 1;
                        true
                    }
                    _ => false,
                };
            // An answer lost on this attempt or any earlier one: that grant
            // may have gone through, whatever this attempt answered (the
            // next one, waiting on our own orphan, times out).
            if let Some(dated) = first_unknown_sent_at
                && let Some(lease) = self.granted_anyway(request, dated).await
            {
                if retry && !lease.is_expired() {
                    return Ok(lease);
                }
                // Given up, or found past its local deadline (granted late,
                // its answer lost later still): handed back, never handed
                // out as held.
                error = self.hand_back(&lease, error).await;
                if !retry {
                    return Err(error);
                }
                first_unknown_sent_at = None;
            }
            if !retry {
                return Err(error);
            }
            tracing::debug!(resource = %self.resource, error = %error, "lock: acquire failed; retrying");
            if let Error::Timeout { .. } = error
                && deadline.is_none()
            {
                continue;
            }
            backoff.wait(deadline).await;
            if deadline.is_some_and(|d| Instant::now() >= d) {
                let timeout = Error::Timeout {
                    operation: format!("acquire {:?}", request.resource),
                    after: sent_at.elapsed(),
                };
                return Err(self.give_up(request, first_unknown_sent_at, timeout).await);
            }
        }
    }

    /// Gives up acquiring with `error`, first handing back a grant whose
    /// answer was lost (since `first_unknown`) if it went through after all.
    async fn give_up(
        &self,
        request: &LeaseRequest,
        first_unknown: Option<Instant>,
        error: Error,
    ) -> Error {
        match first_unknown {
            Some(dated) => match self.granted_anyway(request, dated).await {
                Some(orphan) => self.hand_back(&orphan, error).await,
                None => error,
            },
            None => error,
        }
    }

    /// Granted after all, but the caller is giving up: the lease is handed
    /// back rather than left blocking the next holder for its TTL.
    async fn hand_back(&self, orphan: &Lease, error: Error) -> Error {
        if let Err(e) = self.issuer.release(orphan).await {
            tracing::warn!(resource = %self.resource, token = %orphan.token(), error = %e,
                "lock: a grant whose answer was lost could not be handed back; it runs out after its TTL");
        }
        error
    }

    /// After an acquire whose answer was lost: the lease, if the grant went
    /// through after all. Only for a fresh holder id, which nobody else
    /// holds under: holding the resource under it means that very acquire
    /// was granted (on a re-entrant issuer too: its next acquire would hand
    /// the lease back, but a lock that gives up must release it). The lease is dated from `sent_at`, when the first acquire whose
    /// answer was lost was sent, so its deadline stays conservative.
    async fn granted_anyway(&self, request: &LeaseRequest, sent_at: Instant) -> Option<Lease> {
        if !self.holder.is_fresh() {
            return None;
        }
        match self.issuer.holder(&request.resource).await {
            Ok(Some(held)) if held.holder == request.holder => {
                Some(Lease::new(request, held.token, sent_at))
            }
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(resource = %self.resource, error = %e,
                    "lock: could not ask who holds; acquiring again");
                None
            }
        }
    }

    /// Fences every key with the lease's token, retrying errors marked
    /// retryable while the lease is held and the wait lasts, and a lost
    /// answer (fencing again with one token settles it) up to
    /// [`MAX_UNKNOWN`] times in a row. A fence still unanswered when the
    /// lease is lost is abandoned.
    async fn fence_all(&self, guard: &LeaseGuard, deadline: Option<Instant>) -> Result<()> {
        let token = guard.token();
        for (store, key) in &self.fences {
            let mut backoff = Backoff::new(self.ttl);
            let mut unknown = 0;
            loop {
                let fenced = tokio::select! {
                    biased;
                    lost = guard.lost() => return Err(lost.into()),
                    fenced = store.fence(key, token) => fenced,
                };
                let retry = match fenced {
                    Ok(_) => break,
                    Err(e) if guard.lease().is_expired() => return Err(e),
                    Err(e) if deadline.is_some_and(|d| Instant::now() >= d) => return Err(e),
                    Err(e) if e.is_retryable() => {
                        unknown = 0;
                        e
                    }
                    Err(e @ Error::OutcomeUnknown { .. }) if unknown < MAX_UNKNOWN => {
                        unknown += 1;
                        e
                    }
                    Err(e) => return Err(e),
                };
                tracing::debug!(store = store.name(), key = %key, error = %retry,
                    "fence on acquire failed; fencing again");
                backoff.wait(deadline).await;
            }
        }
        Ok(())
    }
}

impl IntoFuture for Lock {
    type Output = Result<LeaseGuard>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<LeaseGuard>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.acquire().await })
    }
}

/// Whose holder id a lock acquires under.
#[derive(Clone)]
enum Holder {
    /// The caller's ([`Lock::holder`]): it may hold other leases.
    Given(HolderId),
    /// Made afresh for every attempt.
    Fresh(Arc<dyn Fn() -> Result<HolderId> + Send + Sync>),
}

impl Holder {
    fn next(&self) -> Result<HolderId> {
        match self {
            Self::Given(holder) => Ok(holder.clone()),
            Self::Fresh(make) => make(),
        }
    }

    fn is_fresh(&self) -> bool {
        matches!(self, Self::Fresh(_))
    }
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Given(holder) => write!(f, "{holder:?}"),
            Self::Fresh(_) => f.write_str("fresh"),
        }
    }
}

/// A capped exponential backoff for retries.
#[derive(Debug)]
struct Backoff {
    next: Duration,
    cap: Duration,
}

impl Backoff {
    fn new(ttl: Duration) -> Self {
        Self {
            next: Duration::from_millis(10),
            cap: (ttl / 4).clamp(Duration::from_millis(10), MAX_BACKOFF),
        }
    }

    /// Sleeps the next pause, never past `deadline`.
    async fn wait(&mut self, deadline: Option<Instant>) {
        let pause = deadline.map_or(self.next, |d| {
            self.next.min(d.saturating_duration_since(Instant::now()))
        });
        tokio::time::sleep(pause).await;
        self.next = (self.next * 2).min(self.cap);
    }
}

mod guard;

pub use guard::LeaseGuard;

#[cfg(test)]
mod tests;
