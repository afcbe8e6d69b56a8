//! Fenced leader election over any [`TokenIssuer`]: one leader per term,
//! each term with its own fencing token, and the stores fenced before the
//! new leader's work begins.
//!
//! Election recipes elsewhere (etcd's `Election`, Curator's `LeaderLatch`,
//! client-go's `leaderelection`) tell a deposed leader that it lost, but
//! nothing stops the writes it already sent. Here each term is a lease with
//! a fencing token. On winning, the new leader raises the mark of every key
//! it was told to fence ([`Election::fence_on_takeover`]) **before**
//! [`campaign`](Election::campaign) returns. A paused leader that wakes and
//! writes with its old token is then refused by the store, even if the new
//! leader never wrote to that key.
//!
//! ```
//! # use std::sync::Arc;
//! # use std::time::Duration;
//! use fencing_core::election::Election;
//! use fencing_core::memory::{MemoryIssuer, MemoryStore};
//! use fencing_core::{Error, FencedStore, TokenIssuer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> fencing_core::Result<()> {
//! let issuer: Arc<dyn TokenIssuer> = Arc::new(MemoryIssuer::new());
//! let store: Arc<dyn FencedStore> = Arc::new(MemoryStore::new());
//! let ttl = Duration::from_millis(300);
//! let election = |name: &str| {
//!     Election::new(issuer.clone(), "scheduler", name, ttl)
//!         .fence_on_takeover(store.clone(), "jobs/state")
//! };
//!
//! // "a" leads: its term's token goes with every write.
//! let a = election("a").campaign().await?;
//! store.put("jobs/state", "from a".into(), a.token()).await?;
//!
//! // "b" waits; "a" hands over at once.
//! let b = election("b");
//! let b = tokio::spawn(async move { b.campaign().await });
//! let old_token = a.token();
//! a.resign().await?;
//! let b = b.await.expect("no panic")?;
//! assert!(b.token() > old_token);
//!
//! // "b" has not written yet, but its win fenced the key: a late write
//! // from the old term is refused.
//! let late = store.put("jobs/state", "late from a".into(), old_token).await;
//! assert!(matches!(late, Err(Error::StaleToken { .. })));
//!
//! // Anyone can watch the terms go by.
//! let leader = Election::new(issuer.clone(), "scheduler", "watcher", ttl)
//!     .leader()
//!     .await?
//!     .expect("b leads");
//! assert_eq!((leader.candidate.as_str(), leader.token), ("b", b.token()));
//!
//! // The work runs until it ends or the term is lost.
//! tokio::select! {
//!     lost = b.lost() => return Err(lost.into()),
//!     () = tokio::time::sleep(Duration::from_millis(100)) => {} // the work
//! }
//! b.resign().await?;
//! # Ok(())
//! # }
//! ```

mod observe;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::keepalive::{KeepAliveOptions, Lost};
use crate::lock::{LeaseGuard, Lock};
use crate::{Error, FencedStore, FencingToken, HolderId, Holding, Lease, Result, TokenIssuer};

pub use observe::Observer;

/// Separates a candidate id from the random part of its holder id.
const TERM_SEPARATOR: char = '#';

/// A key to fence when a term begins: raise its mark in `store` to the new
/// term's token before the leader's work starts.
#[derive(Clone, Debug)]
struct TakeoverFence {
    store: Arc<dyn FencedStore>,
    key: String,
}

/// One candidate's view of an election on one resource of a
/// [`TokenIssuer`]. Cheap to clone.
///
/// Every term is a lease on the resource, held by the leader and renewed
/// in the background (a [`LeaseGuard`]); its fencing token is the term's
/// token, strictly above every earlier term's.
///
/// The holder id of a term is the candidate id followed by `#` and 128
/// random bits, fresh for every campaign: on re-entrant issuers (Redis, SQL,
/// memory) a holder id is a capability, and a restarted process with the
/// same candidate id must not be handed its paused predecessor's term.
/// [`Leader::candidate`] gives the candidate id back.
#[derive(Clone)]
pub struct Election {
    issuer: Arc<dyn TokenIssuer>,
    resource: String,
    candidate: String,
    ttl: Duration,
    fences: Vec<TakeoverFence>,
    keep_alive: KeepAliveOptions,
    poll_every: Option<Duration>,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("issuer", &self.issuer.name())
            .field("resource", &self.resource)
            .field("candidate", &self.candidate)
            .field("ttl", &self.ttl)
            .field(
                "fences",
                &self
                    .fences
                    .iter()
                    .map(|f| format!("{}:{}", f.store.name(), f.key))
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Election {
    /// An election on `resource` of `issuer`, for the candidate `candidate`
    /// (a name people read, e.g. the host; 1..=200 bytes), whose terms are
    /// leases of `ttl`, renewed every third of it.
    pub fn new(
        issuer: Arc<dyn TokenIssuer>,
        resource: impl Into<String>,
        candidate: impl Into<String>,
        ttl: Duration,
    ) -> Self {
        Self {
            issuer,
            resource: resource.into(),
            candidate: candidate.into(),
            ttl,
            fences: Vec::new(),
            keep_alive: KeepAliveOptions::default(),
            poll_every: None,
        }
    }

    /// On winning, fence `key` in `store` with the new term's token before
    /// [`campaign`](Self::campaign) returns (fence-on-takeover), so that a
    /// deposed leader's in-flight writes to it are refused even if the new
    /// leader never writes it. May be called for any number of keys.
    #[must_use]
    pub fn fence_on_takeover(
        mut self,
        store: Arc<dyn FencedStore>,
        key: impl Into<String>,
    ) -> Self {
        self.fences.push(TakeoverFence {
            store,
            key: key.into(),
        });
        self
    }

    /// How the term's lease is renewed ([`KeepAliveOptions`]; dropping a
    /// [`Leadership`] always resigns).
    #[must_use]
    pub fn with_keep_alive(mut self, options: KeepAliveOptions) -> Self {
        self.keep_alive = options;
        self
    }

    /// How often an [`Observer`] asks the issuer who leads. Default: a
    /// tenth of the TTL, between 10 ms and 1 s.
    #[must_use]
    pub fn with_poll_interval(mut self, every: Duration) -> Self {
        self.poll_every = Some(every.max(Duration::from_millis(1)));
        self
    }

    /// The resource the election is on.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// This candidate's id.
    pub fn candidate(&self) -> &str {
        &self.candidate
    }

    /// The TTL of a term's lease.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Waits until this candidate leads, fences the keys given to
    /// [`fence_on_takeover`](Self::fence_on_takeover) with the term's
    /// token, and returns the term.
    ///
    /// Waits as long as it takes (wrap it in `tokio::time::timeout` to
    /// bound it). Errors the issuer marks retryable (a server restarting,
    /// a timeout) are retried with a backoff of up to a second. A lost
    /// answer ([`Error::OutcomeUnknown`], up to five in a row) is settled,
    /// not given up on: a takeover fence is sent again (fencing twice with
    /// one token changes nothing), and a grant is looked up with
    /// [`TokenIssuer::holder`] (this campaign's holder id is fresh, so if
    /// it holds the resource, the grant went through).
    ///
    /// Dropping the future while it waits gives up the candidacy; a term
    /// won just as it is dropped runs out after its TTL.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad resource, candidate id or TTL; a
    /// non-retryable error of the issuer; a fence that failed (the term is
    /// resigned first): [`Error::StaleToken`] if a store holds a mark above
    /// the new term's token while the term is still held (a token went
    /// backwards: an issuer was replaced without a floor).
    pub async fn campaign(&self) -> Result<Leadership> {
        let guard = self.lock()?.await?;
        tracing::info!(resource = %self.resource, token = %guard.token(),
            candidate = %self.candidate, "elected");
        Ok(Leadership {
            guard,
            candidate: self.candidate.clone(),
        })
    }

    /// The [`Lock`] a campaign takes: on the resource, with a fresh holder
    /// id (`candidate#<128 random bits>`) for every attempt, this
    /// election's keep-alive and takeover fences, waiting as long as it
    /// takes. For a way in that holds a term as a lock (the Python
    /// package's `election.campaign()`); [`campaign`](Self::campaign) is
    /// this lock, taken.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad candidate id.
    pub fn lock(&self) -> Result<Lock> {
        let mut lock = Lock::new(self.issuer.clone(), &self.resource)
            .ttl(self.ttl)
            .fresh_holders(term_holders(&self.candidate)?)
            .keep_alive(self.keep_alive);
        for fence in &self.fences {
            lock = lock.fence(&fence.store, [fence.key.as_str()]);
        }
        Ok(lock)
    }

    /// Who leads now, if anyone (one question to the issuer).
    ///
    /// # Errors
    /// Any error of [`TokenIssuer::holder`].
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self
            .issuer
            .holder(&self.resource)
            .await?
            .map(Leader::from_holding))
    }

    /// Watches the terms go by: the current leader, then every change
    /// (polling [`TokenIssuer::holder`], see
    /// [`with_poll_interval`](Self::with_poll_interval)).
    pub fn observe(&self) -> Observer {
        let every = self.poll_every.unwrap_or_else(|| {
            (self.ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
        });
        Observer::new(self.issuer.clone(), self.resource.clone(), every)
    }
}

/// Fresh holder ids for the campaigns of `candidate`: `candidate#<128
/// random bits>`, a new one for every attempt.
fn term_holders(candidate: &str) -> Result<impl Fn() -> Result<HolderId> + Send + Sync + 'static> {
    if candidate.is_empty() || candidate.len() > 200 {
        return Err(Error::invalid_input(format!(
            "candidate id must be 1..=200 bytes, got {}",
            candidate.len()
        )));
    }
    let candidate = candidate.to_owned();
    Ok(move || {
        let random: u128 = rand::random();
        HolderId::new(format!("{candidate}{TERM_SEPARATOR}{random:032x}"))
    })
}

/// A term as leader: the lease, renewed in the background, and its token.
///
/// Select on [`lost`](Self::lost) beside the work; present
/// [`token`](Self::token) with every write. [`resign`](Self::resign) hands
/// over at once; **dropping a `Leadership` resigns too** (in the
/// background), so a leader that returns early does not keep its followers
/// waiting for the TTL.
#[derive(Debug)]
pub struct Leadership {
    guard: LeaseGuard,
    candidate: String,
}

impl Leadership {
    /// The term's fencing token: present it with every write.
    pub fn token(&self) -> FencingToken {
        self.guard.token()
    }

    /// The term's lease, as last renewed.
    pub fn lease(&self) -> Lease {
        self.guard.lease()
    }

    /// This term's leader, as observers see it.
    pub fn leader(&self) -> Leader {
        let lease = self.guard.lease();
        Leader {
            candidate: self.candidate.clone(),
            holder: lease.holder().clone(),
            token: lease.token(),
        }
    }

    /// Resolves when the term is lost: a renewal was refused, or the
    /// lease's local deadline passed before one succeeded (a paused
    /// process, an unreachable issuer). Stop the work; its late writes
    /// will be refused by fenced stores anyway. Does not borrow the
    /// leadership; may be called any number of times.
    pub fn lost(&self) -> impl Future<Output = Lost> + Send + 'static {
        self.guard.lost()
    }

    /// Whether the term has been lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Gives the term up so the next candidate takes over at once.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the term was already lost; any error of
    /// [`TokenIssuer::release`] (the term then runs out after its TTL).
    pub async fn resign(self) -> Result<()> {
        let token = self.token();
        self.guard.release().await?;
        tracing::info!(%token, candidate = %self.candidate, "resigned");
        Ok(())
    }
}

/// Who leads a term: as [`Election::leader`] and [`Observer`] report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The candidate id given to [`Election::new`] (the whole holder id if
    /// the lease was not taken by an [`Election`]).
    pub candidate: String,
    /// The term's holder id on the issuer.
    pub holder: HolderId,
    /// The term's fencing token.
    pub token: FencingToken,
}

impl Leader {
    /// The leader a [`Holding`] names.
    pub fn from_holding(holding: Holding) -> Self {
        Self {
            candidate: candidate_of(&holding.holder).to_owned(),
            holder: holding.holder,
            token: holding.token,
        }
    }
}

impl fmt::Display for Leader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (token {})", self.candidate, self.token)
    }
}

/// The candidate id in a term's holder id (`candidate#<32 hex digits>`),
/// or the whole id.
fn candidate_of(holder: &HolderId) -> &str {
    let id = holder.as_str();
    match id.rsplit_once(TERM_SEPARATOR) {
        Some((candidate, random))
            if !candidate.is_empty()
                && random.len() == 32
                && random.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            candidate
        }
        _ => id,
    }
}

#[cfg(test)]
mod tests;
