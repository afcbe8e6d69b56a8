//! Waking the issuer's waiters at release: PostgreSQL's `LISTEN`/`NOTIFY`.
//!
//! A wake-up only says "try again now": grants still come from the acquire
//! statement and its counter, so a lost, late or spurious notification
//! costs latency, never a second holder or a token out of order.
// Without PostgreSQL only the polling bounds are used.
#![cfg_attr(not(feature = "postgres"), allow(dead_code))]

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing_core::{Error, Lease, LeaseRequest, Result, TokenIssuer};
use tokio::sync::broadcast::{self, error::RecvError};

/// The old polling bounds, for the dialects without notifications (and a
/// listener that cannot start): 5 ms, doubling up to 100 ms.
pub(crate) const POLL_FIRST: Duration = Duration::from_millis(5);
/// See [`POLL_FIRST`].
pub(crate) const POLL_CAP: Duration = Duration::from_millis(100);

/// What the listener tells waiters.
#[derive(Clone, Debug)]
pub(crate) enum Wake {
    /// This resource was released.
    Released(Arc<str>),
    /// Anything may have been released (the listener reconnected, and
    /// notifications sent meanwhile are lost): everyone tries again.
    All,
}

/// How long a woken-up waiter may sleep without a wake-up before it tries
/// again: a quarter of its TTL, between 50 ms and 5 s. Notifications bring
/// releases early; this re-check is what notices a crashed holder's expiry
/// (which sends nothing) and covers a lost notification.
pub(crate) fn recheck(ttl: Duration) -> Duration {
    (ttl / 4).clamp(Duration::from_millis(50), Duration::from_secs(5))
}

/// What [`fencing_core::adapter::poll_acquire`] does after a first try
/// that found the resource held (at `started`), but with `wakeups`, between
/// tries it sleeps until a wake-up names the resource (or says
/// everything), or [`recheck`] has passed. Without wake-ups (`None`, or
/// once they end) it polls with [`POLL_FIRST`]..[`POLL_CAP`].
///
/// It tries once more at once: `wakeups` were subscribed after the first
/// try, and a release in between sent nothing they saw.
pub(crate) async fn acquire_woken<I: TokenIssuer + ?Sized>(
    issuer: &I,
    request: &LeaseRequest,
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
                let next = next_wake(rx, &request.resource);
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

/// Waits for a wake-up that concerns `resource`; `false` once the listener
/// is gone. A lagging receiver missed some: it wakes, to be safe.
async fn next_wake(wakeups: &mut broadcast::Receiver<Wake>, resource: &str) -> bool {
    loop {
        match wakeups.recv().await {
            Ok(Wake::Released(r)) if &*r != resource => {}
            Ok(_) | Err(RecvError::Lagged(_)) => return true,
            Err(RecvError::Closed) => return false,
        }
    }
}

#[cfg(feature = "postgres")]
pub(crate) use listener::Listener;

#[cfg(feature = "postgres")]
mod listener {
    use std::time::{Duration, Instant};

    use sqlx::postgres::{PgListener, PgPool};
    use tokio::sync::broadcast;
    use tokio::task::JoinHandle;

    use super::Wake;

    /// How long a waiter waits for the listener to start (a pool
    /// connection, and its own notification back) before it polls instead.
    const START: Duration = Duration::from_secs(2);
    /// After a failed start, waiters poll this long before one tries again.
    const RETRY: Duration = Duration::from_secs(5);
    /// Wake-ups a slow waiter may fall behind by before it just wakes.
    const BACKLOG: usize = 256;

    /// One `LISTEN` connection per issuer (shared by its clones), started
    /// by the first waiter and kept while the issuer lives; a task reads
    /// its notifications and hands them to every waiter, who picks its
    /// resource's. Not one per waiter: each would hold a pool connection
    /// for the whole wait, so as many waiters as the pool has connections
    /// would leave none for the acquire statements (and a server's
    /// `max_connections` bounds the waiters of all processes). One per
    /// issuer costs one pool connection, so a pool of one connection never
    /// listens: its waiters poll.
    #[derive(Debug, Default)]
    pub(crate) struct Listener {
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

    impl Drop for Listener {
        fn drop(&mut self) {
            if let State::Running(_, task) = self.state.get_mut() {
                task.abort();
            }
        }
    }

    impl Listener {
        /// Wake-ups for `channel`, from now on; `None` when the listener
        /// cannot run (the waiter polls). A waiter with less than `START`
        /// of its wait left (`budget`) does not start one: it polls.
        pub(crate) async fn subscribe(
            &self,
            pool: &PgPool,
            channel: &str,
            budget: Duration,
        ) -> Option<broadcast::Receiver<Wake>> {
            if pool.options().get_max_connections() < 2 {
                return None;
            }
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
            match tokio::time::timeout(START, start(pool, channel)).await {
                Ok(Ok((template, task))) => {
                    let wakeups = template.resubscribe();
                    *state = State::Running(template, task);
                    Some(wakeups)
                }
                outcome => {
                    let why = match outcome {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no connection, or no notification back, within {START:?}"),
                    };
                    tracing::warn!(
                        channel,
                        "postgres: cannot LISTEN for releases ({why}); waiters poll"
                    );
                    *state = State::Failed(Instant::now());
                    None
                }
            }
        }
    }

    /// `LISTEN`s on `channel` (done before this returns, so a waiter that
    /// subscribes then tries misses no release) and spawns the reader.
    async fn start(
        pool: &PgPool,
        channel: &str,
    ) -> sqlx::Result<(broadcast::Receiver<Wake>, JoinHandle<()>)> {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(channel).await?;
        // One notification to ourselves, through the pool: behind a
        // transaction-pooling proxy (PgBouncer) LISTEN succeeds and hears
        // nothing, and waiters must poll instead. An empty payload names
        // no resource.
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(channel)
            .execute(pool)
            .await?;
        while !listener.recv().await?.payload().is_empty() {}
        let (sender, template) = broadcast::channel(BACKLOG);
        let task = tokio::spawn(async move {
            loop {
                let wake = match listener.try_recv().await {
                    Ok(Some(n)) => Wake::Released(n.payload().into()),
                    // Reconnected (and listening again): whatever was
                    // released meanwhile sent nothing we saw.
                    Ok(None) => Wake::All,
                    // The pool closed or the reconnect failed: waiters
                    // poll, and the next one starts a new listener.
                    Err(e) => {
                        tracing::debug!("postgres: release listener ended: {e}");
                        let _ = sender.send(Wake::All);
                        return;
                    }
                };
                let _ = sender.send(wake);
            }
        });
        Ok((template, task))
    }
}
