//! Waking an issuer's waiters at release instead of polling: what every
//! issuer with a notification channel (PostgreSQL's `NOTIFY`, Redis's
//! `PUBLISH`) shares.
//!
//! A wake-up only says "try again now": grants still come from the
//! issuer's `try_acquire` and its counter, so a lost, late or spurious
//! wake-up costs latency, never a second holder or a token out of order.
//! The backend supplies only how to start its subscription: a
//! [`Subscription`] keeps one per issuer and hands a receiver to each
//! waiter, and [`acquire_woken`] is the waiting loop.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::broadcast::{self, error::RecvError};
use tokio::task::JoinHandle;

use crate::{Error, Lease, LeaseRequest, Result, TokenIssuer};

/// The polling bounds without wake-ups (a subscription that cannot start,
/// or has ended): 5 ms, doubling up to 100 ms, as
/// [`TokenIssuer::acquire`]'s default.
pub const POLL_FIRST: Duration = Duration::from_millis(5);
/// See [`POLL_FIRST`].
pub const POLL_CAP: Duration = Duration::from_millis(100);
/// How long a waiter waits for the subscription to start (a connection,
/// and its confirmation) before it polls instead.
pub const START: Duration = Duration::from_secs(2);
/// After a failed start, waiters poll this long before one tries again.
const RETRY: Duration = Duration::from_secs(5);
/// Wake-ups a slow waiter may fall behind by before it just wakes.
const BACKLOG: usize = 256;

/// What a subscription tells waiters.
#[derive(Clone, Debug)]
pub enum Wake {
    /// The lease of this name (a resource, a lock key) was released.
    Released(Arc<str>),
    /// Anything may have been released (the subscription reconnected or
    /// ended, and what was sent meanwhile is lost): everyone tries again.
    All,
}

/// The sending side a backend's reader task feeds, and the receiver
/// [`Subscription::subscribe`] copies for each waiter.
pub fn wake_channel() -> (broadcast::Sender<Wake>, broadcast::Receiver<Wake>) {
    broadcast::channel(BACKLOG)
}

/// How long a waiter may sleep without a wake-up before it tries again: a
/// quarter of its TTL, between 50 ms and 5 s. Wake-ups bring releases
/// early; this re-check is what notices a crashed holder's expiry (which
/// sends nothing) and covers a lost wake-up.
pub fn recheck(ttl: Duration) -> Duration {
    (ttl / 4).clamp(Duration::from_millis(50), Duration::from_secs(5))
}

/// One subscription per issuer (shared by its clones), started by the
/// first waiter and kept while the issuer lives: a backend's reader task
/// hands every wake-up to every waiter, who picks its own. Not one per
/// waiter: each would hold a connection (a pool's, a server's client slot)
/// for its whole wait.
#[derive(Debug, Default)]
pub struct Subscription {
    state: tokio::sync::Mutex<State>,
}

#[derive(Debug, Default)]
enum State {
    #[default]
    Idle,
    Failed(Instant),
    /// A receiver to subscribe from (`resubscribe`); the task holds the
    /// only sender, so waiters see `Closed` when it ends.
    Running(broadcast::Receiver<Wake>, JoinHandle<()>),
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let State::Running(_, task) = self.state.get_mut() {
            task.abort();
        }
    }
}

impl Subscription {
    /// No subscription yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wake-ups from now on, starting the subscription with `start` if none
    /// runs; `None` when it cannot run, and the waiter polls. A waiter with
    /// less than [`START`] of its wait left (`budget`) starts none.
    ///
    /// `start` must be subscribed before it returns (so a waiter that
    /// subscribes, then tries, misses no release), and returns the reader
    /// task and a receiver of its [`wake_channel`]. `what` names the
    /// subscription in the warning a failed start logs (never a URL or a
    /// password), as does the error's `Display`.
    pub async fn subscribe<F, Fut, E>(
        &self,
        budget: Duration,
        what: &str,
        start: F,
    ) -> Option<broadcast::Receiver<Wake>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<(broadcast::Receiver<Wake>, JoinHandle<()>), E>>,
        E: Display,
    {
        let mut state = tokio::time::timeout(START.min(budget), self.state.lock())
            .await
            .ok()?;
        match &*state {
            State::Running(template, task) if !task.is_finished() => {
                return Some(template.resubscribe());
            }
            State::Failed(at) if at.elapsed() < RETRY => return None,
            _ if budget < START => return None,
            _ => {}
        }
        match tokio::time::timeout(START, start()).await {
            Ok(Ok((template, task))) => {
                let wakeups = template.resubscribe();
                *state = State::Running(template, task);
                Some(wakeups)
            }
            outcome => {
                let why = match outcome {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("not started within {START:?}"),
                };
                tracing::warn!(what, "cannot wait for releases ({why}); waiters poll");
                *state = State::Failed(Instant::now());
                None
            }
        }
    }
}

/// What [`poll_acquire`](crate::adapter::poll_acquire) does after a first
/// try that found the resource held (at `started`), except that with
/// `wakeups` it sleeps between tries until a wake-up names `name` (or says
/// everything) or [`recheck`] has passed. Without wake-ups (`None`, or once
/// they end) it polls with [`POLL_FIRST`]..[`POLL_CAP`].
///
/// It tries once more at once: `wakeups` were subscribed after the first
/// try, and a release in between sent nothing they saw.
///
/// # Errors
/// [`Error::Timeout`] after `wait`; otherwise what `try_acquire` returns.
pub async fn acquire_woken<I: TokenIssuer + ?Sized>(
    issuer: &I,
    request: &LeaseRequest,
    name: &str,
    started: Instant,
    wait: Duration,
    mut wakeups: Option<broadcast::Receiver<Wake>>,
) -> Result<Lease> {
    let recheck = recheck(request.ttl);
    let mut backoff = POLL_FIRST;
    let mut first = true;
    loop {
        let waited = started.elapsed();
        if waited >= wait {
            return Err(Error::Timeout {
                operation: format!("acquire {:?}", request.resource),
                after: waited,
            });
        }
        let left = wait - waited;
        match &mut wakeups {
            Some(_) if first => {}
            Some(rx) => {
                let next = next_wake(rx, name);
                if let Ok(false) = tokio::time::timeout(recheck.min(left), next).await {
                    wakeups = None;
                }
            }
            None => {
                tokio::time::sleep(backoff.min(left)).await;
                backoff = (backoff * 2).min(POLL_CAP);
            }
        }
        first = false;
        if let Some(lease) = issuer.try_acquire(request).await? {
            return Ok(lease);
        }
    }
}

/// Waits for a wake-up that concerns `name`; `false` once the subscription
/// is gone. A lagging receiver missed some: it wakes, to be safe.
async fn next_wake(wakeups: &mut broadcast::Receiver<Wake>, name: &str) -> bool {
    loop {
        match wakeups.recv().await {
            Ok(Wake::Released(released)) if &*released != name => {}
            Ok(_) | Err(RecvError::Lagged(_)) => return true,
            Err(RecvError::Closed) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recheck_is_a_quarter_of_the_ttl_within_bounds() {
        assert_eq!(recheck(Duration::from_secs(2)), Duration::from_millis(500));
        assert_eq!(
            recheck(Duration::from_millis(40)),
            Duration::from_millis(50)
        );
        assert_eq!(recheck(Duration::from_secs(600)), Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_wake_up_for_another_name_does_not_wake() {
        let (sender, mut rx) = wake_channel();
        sender.send(Wake::Released("other".into())).unwrap();
        sender.send(Wake::Released("mine".into())).unwrap();
        assert!(next_wake(&mut rx, "mine").await);
        sender.send(Wake::All).unwrap();
        assert!(next_wake(&mut rx, "mine").await);
        drop(sender);
        assert!(!next_wake(&mut rx, "mine").await);
    }

    #[tokio::test]
    async fn a_failed_start_makes_waiters_poll_until_the_retry() {
        let subscription = Subscription::new();
        let failing = || async { Err::<(broadcast::Receiver<Wake>, JoinHandle<()>), _>("refused") };
        assert!(
            subscription
                .subscribe(START * 2, "test", failing)
                .await
                .is_none()
        );
        // Within RETRY of the failure, no second start is even tried.
        let never = || async { panic!("started again within the retry interval") };
        let none: Option<_> = subscription
            .subscribe::<_, _, &str>(START * 2, "test", never)
            .await;
        assert!(none.is_none());
    }
}
