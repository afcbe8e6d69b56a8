//! Waking the issuer's waiters at release: the release script `PUBLISH`es
//! the lock key on `{prefix}released`, and one subscribed connection per
//! issuer hands it to the waiters.
//!
//! A wake-up only says "try again now": grants still come from the acquire
//! script and its counter, so a lost, late or spurious message costs
//! latency, never a second holder or a token out of order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing_core::adapter::Call;
use fencing_core::{Error, Lease, LeaseRequest, Result, TokenIssuer};
use futures_util::StreamExt;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::task::JoinHandle;

use crate::error::map_error;

/// The polling bounds without wake-ups (a caller's own connection manager,
/// a subscription that cannot start): 5 ms, doubling up to 100 ms.
pub(crate) const POLL_FIRST: Duration = Duration::from_millis(5);
/// See [`POLL_FIRST`].
pub(crate) const POLL_CAP: Duration = Duration::from_millis(100);
/// How long a waiter waits for the subscription to start before it polls.
const START: Duration = Duration::from_secs(2);
/// After a failed start, waiters poll this long before one tries again.
const RETRY: Duration = Duration::from_secs(5);
/// Wake-ups a slow waiter may fall behind by before it just wakes.
const BACKLOG: usize = 256;

/// The channel releases under key prefix `prefix` publish on: one per
/// prefix, the lock key in the message. (Channels are not keys: nothing is
/// stored, and an ACL must allow it, `&{prefix}*`; without it the release
/// still works and waiters poll.)
pub(crate) fn channel(prefix: &str) -> String {
    format!("{prefix}released")
}

/// What the subscription tells waiters.
#[derive(Clone, Debug)]
pub(crate) enum Wake {
    /// The lease at this lock key was released.
    Released(Arc<str>),
    /// The subscription ended: everyone tries again.
    All,
}

/// How long a waiter may sleep without a wake-up before it tries again: a
/// quarter of its TTL, between 50 ms and 5 s. Wake-ups bring releases
/// early; this re-check is what notices a crashed holder's expiry (which
/// publishes nothing) and covers a lost message.
pub(crate) fn recheck(ttl: Duration) -> Duration {
    (ttl / 4).clamp(Duration::from_millis(50), Duration::from_secs(5))
}

/// What [`fencing_core::adapter::poll_acquire`] does after a first try
/// that found the resource held (at `started`), but with `wakeups`, between
/// tries it sleeps until a wake-up names `lock_key` (or says
/// everything), or [`recheck`] has passed. Without wake-ups (`None`, or
/// once they end) it polls with [`POLL_FIRST`]..[`POLL_CAP`].
///
/// It tries once more at once: `wakeups` were subscribed after the first
/// try, and a release in between sent nothing they saw.
pub(crate) async fn acquire_woken<I: TokenIssuer + ?Sized>(
    issuer: &I,
    request: &LeaseRequest,
    lock_key: &str,
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
                let next = next_wake(rx, lock_key);
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

/// Waits for a wake-up that concerns `lock_key`; `false` once the
/// subscription is gone. A lagging receiver missed some: it wakes.
async fn next_wake(wakeups: &mut broadcast::Receiver<Wake>, lock_key: &str) -> bool {
    loop {
        match wakeups.recv().await {
            Ok(Wake::Released(key)) if &*key != lock_key => {}
            Ok(_) | Err(RecvError::Lagged(_)) => return true,
            Err(RecvError::Closed) => return false,
        }
    }
}

/// One subscribed connection per issuer (shared by its clones), opened by
/// the first waiter with the issuer's own client (its TLS and login) and
/// kept while the issuer lives; a task reads its messages and hands them to
/// every waiter, who picks its lock key's. Not a connection per waiter:
/// each would hold a socket, and on the server a client, for the whole
/// wait. Not `BLPOP` on the issuer's multiplexed connection either: a
/// blocking command stalls every other command on it.
pub(crate) struct Listener {
    client: redis::Client,
    channel: String,
    state: tokio::sync::Mutex<State>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
enum State {
    #[default]
    Idle,
    Failed(Instant),
    /// A receiver to subscribe from (`resubscribe`); the task holds the
    /// only sender, so waiters see `Closed` when it ends.
    Running(broadcast::Receiver<Wake>, JoinHandle<()>),
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let State::Running(_, task) = self.state.get_mut() {
            task.abort();
        }
    }
}

impl Listener {
    /// Wake-ups for the issuer with key prefix `prefix`, through `client`.
    pub(crate) fn new(client: redis::Client, prefix: &str) -> Self {
        Self {
            client,
            channel: channel(prefix),
            state: tokio::sync::Mutex::default(),
        }
    }

    /// The same client on another prefix's channel (nothing started yet).
    pub(crate) fn prefixed(&self, prefix: &str) -> Self {
        Self::new(self.client.clone(), prefix)
    }

    /// Wake-ups from now on; `None` when the subscription cannot run (the
    /// waiter polls). A waiter with less than `START` of its wait left
    /// (`budget`) does not start one: it polls.
    pub(crate) async fn subscribe(&self, budget: Duration) -> Option<broadcast::Receiver<Wake>> {
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
        match tokio::time::timeout(START, self.start()).await {
            Ok(Ok((template, task))) => {
                let wakeups = template.resubscribe();
                *state = State::Running(template, task);
                Some(wakeups)
            }
            outcome => {
                // The error names the operation, never the URL or password.
                let why = match outcome {
                    Ok(Err(e)) => map_error(e, Call::read("subscribe to releases")).to_string(),
                    _ => format!("no subscription within {START:?}"),
                };
                tracing::warn!(
                    channel = self.channel,
                    "redis: cannot SUBSCRIBE for releases ({why}); waiters poll"
                );
                *state = State::Failed(Instant::now());
                None
            }
        }
    }

    /// Subscribes (confirmed before this returns, so a waiter that
    /// subscribes then tries misses no release) and spawns the reader.
    async fn start(&self) -> redis::RedisResult<(broadcast::Receiver<Wake>, JoinHandle<()>)> {
        let mut pubsub = self.client.get_async_pubsub().await?;
        pubsub.subscribe(&self.channel).await?;
        let mut messages = pubsub.into_on_message();
        let (sender, template) = broadcast::channel(BACKLOG);
        let task = tokio::spawn(async move {
            while let Some(message) = messages.next().await {
                let key = String::from_utf8_lossy(message.get_payload_bytes());
                let _ = sender.send(Wake::Released(key.into()));
            }
            // The connection is gone (a restart, a network fault): what was
            // published meanwhile is lost. Waiters try now, then poll; the
            // next one subscribes again.
            tracing::debug!("redis: release subscription ended");
            let _ = sender.send(Wake::All);
        });
        Ok((template, task))
    }
}
