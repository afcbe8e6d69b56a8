//! A background keep-alive for one lease of any [`TokenIssuer`], and the
//! signal that tells the work it guards that the lease is lost.
//!
//! ```
//! # use std::sync::Arc;
//! # use std::time::Duration;
//! use fencing_core::keepalive::KeepAlive;
//! use fencing_core::memory::MemoryIssuer;
//! use fencing_core::{LeaseRequest, TokenIssuer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> fencing_core::Result<()> {
//! let issuer: Arc<dyn TokenIssuer> = Arc::new(MemoryIssuer::new());
//! let request = LeaseRequest::new("jobs/nightly", Duration::from_millis(300));
//! let lease = issuer.try_acquire(&request).await?.expect("free");
//! let keep_alive = KeepAlive::spawn(issuer.clone(), lease);
//! tokio::select! {
//!     lost = keep_alive.lost() => return Err(lost.into()), // stop the work
//!     () = tokio::time::sleep(Duration::from_secs(1)) => {} // the work
//! }
//! assert!(!keep_alive.is_lost()); // renewed three times a second
//! keep_alive.release().await?;
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::instrument::names;
use crate::{Error, FencingToken, Lease, TokenIssuer};

/// An issuer's own way of renewing one lease, kept for the lease's life
/// ([`TokenIssuer::renewal`]): a stream its service keeps open, say.
#[async_trait::async_trait]
pub trait Renewal: Send + Sync + fmt::Debug {
    /// Extends `lease` by its TTL, keeping its token, as
    /// [`TokenIssuer::renew`] does.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the lease expired or was taken.
    async fn renew(&mut self, lease: &Lease) -> crate::Result<Lease>;
}

/// How a [`KeepAlive`] renews and what it does when it ends.
#[derive(Clone, Copy, Debug)]
pub struct KeepAliveOptions {
    renew_every: Option<Duration>,
    retry_every: Option<Duration>,
    release_on_drop: bool,
    release_when_lost: bool,
}

impl Default for KeepAliveOptions {
    fn default() -> Self {
        Self {
            renew_every: None,
            retry_every: None,
            release_on_drop: false,
            release_when_lost: true,
        }
    }
}

impl KeepAliveOptions {
    /// How long after a successful renewal (counted from when it was sent)
    /// to renew again. Default: a third of the lease's TTL.
    #[must_use]
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every);
        self
    }

    /// How soon to try again after a renewal failed for a reason other
    /// than a lost lease (the issuer unreachable, a timeout). Default: a
    /// twentieth of the lease's TTL.
    #[must_use]
    pub fn retry_every(mut self, every: Duration) -> Self {
        self.retry_every = Some(every);
        self
    }

    /// Whether dropping the handle releases the lease (in the background)
    /// instead of only stopping the renewals. Default: no, the lease runs
    /// out after its TTL.
    #[must_use]
    pub fn release_on_drop(mut self, release: bool) -> Self {
        self.release_on_drop = release;
        self
    }

    /// Whether a lease that is lost because renewals kept failing until its
    /// deadline is released (revoked, if the issuer still has it once it is
    /// reachable), so the next holder need not wait for the issuer's TTL.
    /// Releasing a lease that is no longer held does not disturb the
    /// current holder (contract clause 5). Default: yes.
    #[must_use]
    pub fn release_when_lost(mut self, release: bool) -> Self {
        self.release_when_lost = release;
        self
    }
}

mod lost;

pub use lost::{Lost, LostReason};

/// Where the lease stands, as the background task last saw it.
#[derive(Clone, Debug)]
enum State {
    /// Held, as last renewed, with the last renewal failure since then (so
    /// that a reader judging the deadline itself tells what the task would).
    Held(Lease, Option<Arc<Error>>),
    Lost(Lost),
}

impl State {
    fn lease(&self) -> &Lease {
        match self {
            Self::Held(lease, _) => lease,
            Self::Lost(lost) => &lost.lease,
        }
    }

    /// The lease if it is still held as far as its readers go: not
    /// declared lost by the task, not stopped by its owner (`ended`), and
    /// not past its local deadline (a process waking from a pause sees
    /// that before the task's timer fires).
    fn held(&self, ended: bool) -> Result<&Lease, Lost> {
        match self {
            Self::Lost(lost) => Err(lost.clone()),
            Self::Held(lease, _) if ended => Err(Lost {
                lease: lease.clone(),
                reason: LostReason::Stopped,
            }),
            Self::Held(lease, last_error) if lease.is_expired() => Err(Lost {
                lease: lease.clone(),
                reason: LostReason::Expired {
                    last_error: last_error.clone(),
                },
            }),
            Self::Held(lease, _) => Ok(lease),
        }
    }
}

/// What the handle asks of the task when it stops it.
#[derive(Clone, Copy, Debug)]
struct Stop {
    release: bool,
}

/// Keeps one lease of any [`TokenIssuer`] alive in the background, and
/// tells the work it guards when the lease is lost (what other lock
/// libraries call `Session.Done()` or `HandleLostToken`).
///
/// Renews at a third of the lease's TTL (see [`KeepAliveOptions`]). The
/// lease is **lost** when
/// - the issuer refuses a renewal ([`LostReason::Refused`]: it expired
///   there, was released, or another holder took it), or
/// - its local [`deadline`](Lease::deadline) passes before a renewal
///   succeeds ([`LostReason::Expired`]: renewals kept failing, hung, or the
///   process was paused past it).
///
/// Then [`lost`](Self::lost) resolves and [`is_lost`](Self::is_lost) turns
/// true, and nothing renews it any more. The local deadline is
/// conservative; correctness still comes from the token, which the store
/// checks.
///
/// [`stop`](Self::stop) (or dropping the handle) stops the renewals, and no
/// renewal is sent after `stop` returns; the lease then runs out after its
/// TTL, unless [`release`](Self::release) gave it up at once.
///
/// Needs a Tokio runtime with the time driver.
#[derive(Debug)]
pub struct KeepAlive {
    state: watch::Receiver<State>,
    stop: Option<oneshot::Sender<Stop>>,
    task: Option<JoinHandle<Ended>>,
    issuer: Arc<dyn TokenIssuer>,
    release_on_drop: bool,
    /// Set, before anything is sent to the task, when the handle stops it
    /// (`stop`, `release`, drop): from then on every reader sees the lease
    /// as no longer held, whether or not the task has run yet. A task gone
    /// without it died (a panic, its runtime shut down).
    ended: Arc<AtomicBool>,
}

/// A view of one [`KeepAlive`]'s lease ([`KeepAlive::watch`],
/// [`LeaseGuard::watch`](crate::LeaseGuard::watch)): cloneable and cheap,
/// for the code that writes under the lease without owning it.
///
/// A watch outlives its guard: once the guard is released or dropped (or
/// the keep-alive stopped), the watch answers "lost"
/// ([`LostReason::Stopped`]) at once, before the release is sent, so a
/// store bound to it never writes while the next holder holds the lease.
#[derive(Clone, Debug)]
pub struct LeaseWatch {
    state: watch::Receiver<State>,
    ended: Arc<AtomicBool>,
}

impl LeaseWatch {
    /// The lease's fencing token (also once lost: for messages and logs;
    /// write with [`current`](Self::current)).
    pub fn token(&self) -> FencingToken {
        self.state.borrow().lease().token()
    }

    /// Whether the lease is no longer held: declared lost by the task
    /// renewing it, its guard released or dropped, or past its local
    /// deadline. A process paused past the deadline sees it at once on
    /// waking, before the task's timer fires (the task declares it lost
    /// then too: it never takes a renewal after the deadline).
    pub fn is_lost(&self) -> bool {
        self.lost_now().is_some()
    }

    /// How the lease was lost, once it is (as [`is_lost`](Self::is_lost)
    /// judges).
    pub fn lost_now(&self) -> Option<Lost> {
        self.state
            .borrow()
            .held(self.ended.load(Ordering::SeqCst))
            .err()
    }

    /// The token to write with, while the lease is held.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] once the lease is lost or its guard released or
    /// dropped: the work should stop (the store would refuse the token once
    /// a newer holder wrote, but need not have yet).
    pub fn current(&self) -> crate::Result<FencingToken> {
        match self.state.borrow().held(self.ended.load(Ordering::SeqCst)) {
            Ok(lease) => Ok(lease.token()),
            Err(lost) => Err(lost.into()),
        }
    }

    /// Resolves when the lease is no longer held (as
    /// [`is_lost`](Self::is_lost) judges): at once if it already is, and
    /// at the lease's local deadline by its own timer, whether or not the
    /// task renewing it has run (a process waking from a pause; a task
    /// that died).
    pub fn lost(&self) -> impl Future<Output = Lost> + Send + 'static + use<> {
        let mut state = self.state.clone();
        let ended = self.ended.clone();
        async move {
            let mut task_gone = false;
            loop {
                let judged = state
                    .borrow_and_update()
                    .held(ended.load(Ordering::SeqCst))
                    .map(|lease| lease.deadline());
                let deadline = match judged {
                    Ok(deadline) => deadline,
                    Err(lost) => return lost,
                };
                if task_gone {
                    // It died, or was stopped (then `ended` was set
                    // before): nothing renews the lease any more.
                    tokio::time::sleep_until(deadline.into()).await;
                    continue;
                }
                tokio::select! {
                    changed = state.changed() => task_gone = changed.is_err(),
                    // Judged again at the top: past the deadline now.
                    () = tokio::time::sleep_until(deadline.into()) => {}
                }
            }
        }
    }
}

/// Where a write's token comes from when the write does not carry one:
/// the lease the writer is bound to, or a fixed token.
///
/// A [`LeaseWatch`] (from [`LeaseGuard::watch`](crate::LeaseGuard::watch))
/// answers with the lease's token while it is held and with
/// [`Error::LeaseLost`] once it is lost, so a store bound to a lease stops
/// writing as soon as the holder knows it lost it (the store's mark refuses
/// it anyway once a newer holder wrote). A bare [`FencingToken`] always
/// answers with itself, for a token obtained elsewhere (`FENCING_TOKEN` of
/// `fence run`).
pub trait TokenSource: Send + Sync + fmt::Debug + 'static {
    /// The token to write with now.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the lease behind it is lost.
    fn current(&self) -> crate::Result<FencingToken>;
}

impl TokenSource for FencingToken {
    fn current(&self) -> crate::Result<FencingToken> {
        Ok(*self)
    }
}

impl TokenSource for LeaseWatch {
    fn current(&self) -> crate::Result<FencingToken> {
        LeaseWatch::current(self)
    }
}

/// How the task ended: its last state, and the release it was asked for.
type Ended = (State, Option<crate::Result<()>>);

impl KeepAlive {
    /// Starts renewing `lease` on `issuer` at a third of its TTL.
    pub fn spawn(issuer: Arc<dyn TokenIssuer>, lease: Lease) -> Self {
        Self::with_options(issuer, lease, KeepAliveOptions::default())
    }

    /// Starts renewing `lease` on `issuer` as `options` say.
    pub fn with_options(
        issuer: Arc<dyn TokenIssuer>,
        lease: Lease,
        options: KeepAliveOptions,
    ) -> Self {
        let (state_tx, state) = watch::channel(State::Held(lease.clone(), None));
        let (stop_tx, stop_rx) = oneshot::channel();
        let span = tracing::info_span!(
            "fencing.keepalive",
            issuer = issuer.name(),
            resource = lease.resource(),
            token = lease.token().get(),
        );
        let task = tokio::spawn(
            renew_until_lost(issuer.clone(), lease, options, state_tx, stop_rx).instrument(span),
        );
        Self {
            state,
            stop: Some(stop_tx),
            task: Some(task),
            issuer,
            release_on_drop: options.release_on_drop,
            ended: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The lease as last renewed (its deadline moves on with every
    /// renewal; its token never changes), also once it is lost.
    pub fn lease(&self) -> Lease {
        self.state.borrow().lease().clone()
    }

    /// The lease's fencing token: present it with every write.
    pub fn token(&self) -> FencingToken {
        self.state.borrow().lease().token()
    }

    /// Whether the lease has been lost: a renewal was refused, or its local
    /// deadline passed (seen at once by a process waking from a pause).
    pub fn is_lost(&self) -> bool {
        self.watch().is_lost()
    }

    /// A cheap, cloneable view of this lease for whatever writes under it
    /// (a store bound to the lease, another task): its token, and whether
    /// it is lost. It does not keep the lease alive.
    /// The watch stays "lost" ([`LostReason::Stopped`]) once the handle is
    /// stopped, released or dropped.
    pub fn watch(&self) -> LeaseWatch {
        LeaseWatch {
            state: self.state.clone(),
            ended: self.ended.clone(),
        }
    }

    /// How the lease was lost, once it is (also past its local deadline,
    /// before the task's timer fires).
    pub fn lost_now(&self) -> Option<Lost> {
        self.watch().lost_now()
    }

    /// Resolves when the lease is lost: stop the work it guards. Select on
    /// it beside the work; it may be called any number of times, and the
    /// future does not borrow the handle. It resolves at once if the lease
    /// is past its local deadline (a process waking from a pause), and with
    /// [`LostReason::Stopped`] once the keep-alive is stopped, released or
    /// dropped: whatever still runs under it must stop too.
    ///
    /// If the task dies instead (a panic in a renewal, its runtime shut
    /// down), nothing renews the lease any more: it resolves at the lease's
    /// deadline, as [`LostReason::Expired`].
    pub fn lost(&self) -> impl Future<Output = Lost> + Send + 'static {
        self.watch().lost()
    }

    /// Stops renewing and waits until the background task has ended, so
    /// that no renewal is sent after this returns. The lease is not
    /// released: it runs out after its TTL.
    ///
    /// # Errors
    /// The [`Lost`] lease if it was lost before it was stopped.
    pub async fn stop(mut self) -> Result<Lease, Lost> {
        match self.finish(Stop { release: false }).await {
            (State::Held(lease, _), _) => Ok(lease),
            (State::Lost(lost), _) => Err(lost),
        }
    }

    /// Stops renewing (as [`stop`](Self::stop)) and releases the lease so
    /// the next holder gets in at once. The background task sends the
    /// release, so it is sent even if this future is dropped.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if it was lost before it was stopped; any error
    /// of [`TokenIssuer::release`].
    pub async fn release(mut self) -> crate::Result<()> {
        match self.finish(Stop { release: true }).await {
            (State::Held(..), Some(released)) => released,
            // The task was gone before it heard of the release.
            (State::Held(lease, _), None) => self.issuer.release(&lease).await,
            (State::Lost(lost), _) => Err(lost.into()),
        }
    }

    /// Tells the task to stop and waits for its end.
    async fn finish(&mut self, stop: Stop) -> Ended {
        self.ended.store(true, Ordering::SeqCst);
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(stop);
        }
        let last = match self.state.borrow().clone() {
            // The task said so on its way out: the lease was held when it
            // was stopped.
            State::Lost(Lost {
                lease,
                reason: LostReason::Stopped,
            }) => State::Held(lease, None),
            last => last,
        };
        match self.task.take() {
            Some(task) => task.await.unwrap_or((last, None)),
            None => (last, None),
        }
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        // Every watch sees the lease gone from here on, before the release
        // is sent. The task stops at its next step; a renewal in flight is
        // abandoned (dropped), none is started.
        self.ended.store(true, Ordering::SeqCst);
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(Stop {
                release: self.release_on_drop,
            });
        }
    }
}

/// The background task: renews until the lease is lost or the handle
/// stops it, and returns the last state.
async fn renew_until_lost(
    issuer: Arc<dyn TokenIssuer>,
    mut lease: Lease,
    options: KeepAliveOptions,
    state: watch::Sender<State>,
    mut stop: oneshot::Receiver<Stop>,
) -> Ended {
    let ttl = lease.ttl();
    let renew_every = options.renew_every.unwrap_or(ttl / 3);
    let retry_every = options
        .retry_every
        .unwrap_or(ttl / 20)
        .max(Duration::from_millis(1));
    let mut last_error: Option<Arc<Error>> = None;
    let mut renewal = issuer.renewal(&lease);

    let reason = loop {
        // When the lease was last granted or renewed (its deadline counts
        // from then), and so when to renew next.
        let next = if last_error.is_some() {
            Instant::now() + retry_every
        } else {
            let sent_at = lease
                .deadline()
                .checked_sub(ttl)
                .unwrap_or_else(Instant::now);
            sent_at + renew_every
        };
        let deadline = tokio::time::Instant::from_std(lease.deadline());
        tokio::select! {
            biased;
            stopped = &mut stop => {
                // Stopped past the deadline: it was lost first (a reader
                // may have said so already).
                if lease.is_expired() {
                    break LostReason::Expired { last_error };
                }
                return stopped_with(&*issuer, lease, &state, stopped.ok()).await;
            }
            () = tokio::time::sleep_until(deadline) => break LostReason::Expired { last_error },
            () = tokio::time::sleep_until(next.into()) => {}
        }
        // Woken late (a paused process): the lease may be gone already.
        if lease.is_expired() {
            break LostReason::Expired { last_error };
        }
        tokio::select! {
            biased;
            stopped = &mut stop => {
                // Stopped past the deadline: it was lost first (a reader
                // may have said so already).
                if lease.is_expired() {
                    break LostReason::Expired { last_error };
                }
                return stopped_with(&*issuer, lease, &state, stopped.ok()).await;
            }
            () = tokio::time::sleep_until(deadline) => break LostReason::Expired { last_error },
            renewed = renew(&*issuer, &mut renewal, &lease) => match renewed {
                Ok(renewed) => {
                    lease = renewed;
                    last_error = None;
                    state.send_replace(State::Held(lease.clone(), None));
                }
                Err(Error::LeaseLost { .. }) => break LostReason::Refused,
                Err(e) => {
                    tracing::warn!(
                        resource = lease.resource(),
                        token = %lease.token(),
                        remaining = ?lease.remaining(),
                        error = %e,
                        "renewal failed; retrying until the lease's deadline"
                    );
                    last_error = Some(Arc::new(e));
                    // Readers that see the deadline pass before this task
                    // does tell the same failure.
                    state.send_replace(State::Held(lease.clone(), last_error.clone()));
                }
            },
        }
    };

    let lost = Lost {
        lease: lease.clone(),
        reason,
    };
    tracing::warn!(%lost, "lease lost");
    let reason = match lost.reason {
        LostReason::Refused => "refused",
        LostReason::Expired { .. } => "expired",
        LostReason::Stopped => "stopped",
    };
    metrics::counter!(names::LEASES_LOST, names::ISSUER => issuer.name(), names::REASON => reason)
        .increment(1);
    state.send_replace(State::Lost(lost.clone()));
    if options.release_when_lost && matches!(lost.reason, LostReason::Expired { .. }) {
        // Bounded: an unreachable issuer must not keep `stop` waiting.
        let _ = bounded_release(issuer.as_ref(), &lease).await;
    }
    (State::Lost(lost), None)
}

/// One renewal: through the issuer's own [`Renewal`] if it has one.
async fn renew(
    issuer: &dyn TokenIssuer,
    renewal: &mut Option<Box<dyn Renewal>>,
    lease: &Lease,
) -> crate::Result<Lease> {
    match renewal {
        Some(renewal) => renewal.renew(lease).await,
        None => issuer.renew(lease).await,
    }
}

/// Ends the task on the handle's request, releasing if asked (bounded:
/// an issuer that never answers must not keep the task alive). Readers
/// already see the lease gone (the handle set `ended`); the state says so
/// too before the release is sent, which wakes every `lost()`.
async fn stopped_with(
    issuer: &dyn TokenIssuer,
    lease: Lease,
    state: &watch::Sender<State>,
    stop: Option<Stop>,
) -> Ended {
    state.send_replace(State::Lost(Lost {
        lease: lease.clone(),
        reason: LostReason::Stopped,
    }));
    if !stop.is_some_and(|s| s.release) {
        return (State::Held(lease, None), None);
    }
    let released = bounded_release(issuer, &lease).await;
    if let Err(e) = &released {
        tracing::warn!(resource = lease.resource(), token = %lease.token(), error = %e,
            "release after the keep-alive was stopped failed; the lease runs out after its TTL");
    }
    (State::Held(lease, None), Some(released))
}

/// Releases `lease`, giving the issuer its TTL (at least
/// [`RELEASE_AT_LEAST`]) to answer: [`Error::Timeout`] after that.
async fn bounded_release(issuer: &dyn TokenIssuer, lease: &Lease) -> crate::Result<()> {
    let bound = lease.ttl().max(RELEASE_AT_LEAST);
    match tokio::time::timeout(bound, issuer.release(lease)).await {
        Ok(released) => released,
        Err(_) => Err(Error::Timeout {
            operation: format!("release {:?}", lease.resource()),
            after: bound,
        }),
    }
}

/// However short the TTL, a release gets this long to be answered (an
/// etcd call's own timeout is 5 s).
const RELEASE_AT_LEAST: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests;
