//! Waiting one's turn in the queue: watching the key just ahead, keeping
//! our own etcd lease alive meanwhile, and confirming the grant once first.

use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, EventType, Txn, WatchFilterType, WatchOptions};
use fencing_core::adapter::Call;
use fencing_core::{Error, LeaseRequest, Result};

use super::{Queued, RETRY_PAUSE};
use crate::client::Rpc;
use crate::error::{NAME, lease_not_found, map_error};
use crate::keys::{Keys, before, in_queue};

/// An acquire's time budget, and why it last failed to make progress.
struct Attempt {
    started: Instant,
    give_up: Instant,
    last_error: Option<Error>,
}

impl Attempt {
    fn is_over(&self) -> bool {
        Instant::now() >= self.give_up
    }
}

/// What we know of our queued key's etcd lease: alive at least until
/// `alive_since + ttl`; refreshed next at `next_refresh`.
struct Liveness {
    alive_since: Instant,
    next_refresh: Instant,
    interval: Duration,
    ttl: Duration,
}

impl Liveness {
    fn new(granted_at: Instant, ttl: Duration) -> Self {
        let interval = (ttl / 3).max(Duration::from_millis(100));
        Self {
            alive_since: granted_at,
            next_refresh: granted_at + interval,
            interval,
            ttl,
        }
    }

    /// Whether the lease may have ended by now.
    fn may_have_ended(&self) -> bool {
        Instant::now() >= self.alive_since + self.ttl
    }
}

/// One acquirer waiting in the queue.
pub(crate) struct Waiter<'a> {
    rpc: &'a Rpc,
    dir: String,
    queued: &'a Queued,
    request: &'a LeaseRequest,
    attempt: Attempt,
    live: Liveness,
}

impl<'a> Waiter<'a> {
    pub(crate) fn new(
        rpc: &'a Rpc,
        keys: &Keys,
        queued: &'a Queued,
        request: &'a LeaseRequest,
        started: Instant,
        give_up: Instant,
    ) -> Self {
        Self {
            rpc,
            dir: keys.dir(&request.resource),
            queued,
            request,
            attempt: Attempt {
                started,
                give_up,
                last_error: None,
            },
            live: Liveness::new(queued.granted_at, request.ttl),
        }
    }

    fn lost(&self) -> Error {
        Error::LeaseLost {
            resource: self.request.resource.clone(),
            token: self.queued.token(),
        }
    }

    fn timeout(&self) -> Error {
        Error::Timeout {
            operation: format!("acquire {:?}", self.request.resource),
            after: self.attempt.started.elapsed(),
        }
    }

    /// Waits until every key ahead of ours is gone, keeping our lease
    /// alive; then checks, after a fresh keep-alive, that our key still
    /// exists with our lease. Returns when that keep-alive was sent.
    pub(crate) async fn wait_turn(mut self) -> Result<Instant> {
        self.wait_until_first().await?;
        self.confirm().await
    }

    async fn wait_until_first(&mut self) -> Result<()> {
        loop {
            if self.attempt.is_over() {
                if let Some(e) = &self.attempt.last_error {
                    tracing::debug!(error = %e, "acquire gave up after a failing call");
                }
                return Err(self.timeout());
            }
            let ahead = match self
                .rpc
                .get(self.dir.clone(), before(self.queued.revision))
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    self.attempt.last_error = Some(map_error(e, Call::read("find the key ahead")));
                    self.pause().await?;
                    continue;
                }
            };
            // The latest key before ours in our queue: a key of a
            // resource below ours (`{resource}/…`) is no predecessor.
            let predecessor = ahead.kvs().iter().find(|kv| in_queue(&self.dir, kv.key()));
            let Some(predecessor) = predecessor else {
                return Ok(());
            };
            let from = ahead.header().map_or(0, |h| h.revision()) + 1;
            self.watch_ahead(predecessor.key().to_vec(), from).await?;
        }
    }

    /// Watches the deletion of the key ahead (and of ours: if our lease
    /// ends while we wait, stop at once) from revision `from`, refreshing
    /// our lease meanwhile, until something changed: then `Ok`, and the
    /// queue is read again.
    async fn watch_ahead(&mut self, predecessor: Vec<u8>, from: i64) -> Result<()> {
        let options = WatchOptions::new()
            .with_start_revision(from)
            .with_filters([WatchFilterType::NoPut]);
        let mut stream = match self.rpc.watch(predecessor, options.clone()).await {
            Ok(s) => s,
            Err(e) => {
                self.attempt.last_error = Some(map_error(e, Call::read("watch the key ahead")));
                self.pause().await?;
                return Ok(());
            }
        };
        let ours = &self.queued.key;
        if let Err(e) = stream.watch(ours.clone(), Some(options)).await {
            self.attempt.last_error = Some(map_error(e.into(), Call::read("watch our key")));
            return Ok(());
        }
        loop {
            tokio::select! {
                message = stream.message() => match message {
                    Ok(Some(response)) => {
                        let ours_gone = response.events().iter().any(|e| {
                            e.event_type() == EventType::Delete
                                && e.kv().is_some_and(|kv| kv.key() == ours.as_bytes())
                        });
                        if ours_gone {
                            return Err(self.lost());
                        }
                        if response.canceled() && !response.cancel_reason().is_empty() {
                            // etcd refused the watch, e.g. "permission denied"
                            // for a token that expired while idle: read the
                            // queue again after a pause (the read renews the
                            // token), never in a tight loop.
                            let reason = response.cancel_reason();
                            self.attempt.last_error = Some(Error::backend(
                                NAME,
                                true,
                                format!("etcd cancelled the watch of the key ahead: {reason}"),
                            ));
                            self.pause().await?;
                            return Ok(());
                        }
                        if response.canceled() || !response.events().is_empty() {
                            return Ok(());
                        }
                    }
                    Ok(None) => return Ok(()),
                    Err(e) => {
                        self.attempt.last_error = Some(map_error(e.into(), Call::read("watch the key ahead")));
                        let left = self.attempt.give_up.saturating_duration_since(Instant::now());
                        tokio::time::sleep(RETRY_PAUSE.min(left)).await;
                        return Ok(());
                    }
                },
                () = tokio::time::sleep_until(self.live.next_refresh.into()) => self.refresh().await?,
                () = tokio::time::sleep_until(self.attempt.give_up.into()) => return Err(self.timeout()),
            }
        }
    }

    /// Our turn. Never report a grant on a lease that ended while we were
    /// queued (etcd#11456): a fresh keep-alive proves the lease is alive,
    /// then one transaction proves our key still carries it.
    async fn confirm(&mut self) -> Result<Instant> {
        let q = self.queued;
        loop {
            let sent = Instant::now();
            match self.rpc.keep_alive_once(q.lease_id).await {
                Ok(()) => {
                    let txn = Txn::new().when([
                        Compare::create_revision(q.key.clone(), CompareOp::Equal, q.revision),
                        Compare::lease(q.key.clone(), CompareOp::Equal, q.lease_id),
                    ]);
                    match self.rpc.txn(txn).await {
                        Ok(r) if r.succeeded() => return Ok(sent),
                        Ok(_) => return Err(self.lost()),
                        Err(e) => {
                            self.attempt.last_error =
                                Some(map_error(e, Call::read("check our key")));
                        }
                    }
                }
                Err(e) if lease_not_found(&e) => return Err(self.lost()),
                Err(e) => {
                    // A renewal sent twice or lost only moves the lease's
                    // expiry; whether we still hold it is checked above.
                    self.attempt.last_error =
                        Some(map_error(e, Call::idempotent("keep our lease alive")));
                }
            }
            if self.live.may_have_ended() {
                return Err(self.lost());
            }
            if self.attempt.is_over() {
                tracing::debug!(error = ?self.attempt.last_error, "acquire gave up in its final check");
                return Err(self.timeout());
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// Sleeps a little after a failed call, still keeping the lease alive.
    async fn pause(&mut self) -> Result<()> {
        let until = (Instant::now() + RETRY_PAUSE).min(self.attempt.give_up);
        if self.live.next_refresh <= until {
            tokio::time::sleep_until(self.live.next_refresh.into()).await;
            self.refresh().await?;
        }
        tokio::time::sleep_until(until.into()).await;
        Ok(())
    }

    /// One keep-alive of our lease. [`Error::LeaseLost`] if the lease is
    /// gone, or could not be refreshed before its TTL ran out.
    async fn refresh(&mut self) -> Result<()> {
        let sent = Instant::now();
        match self.rpc.keep_alive_once(self.queued.lease_id).await {
            Ok(()) => {
                self.live.alive_since = sent;
                self.live.next_refresh = sent + self.live.interval;
                Ok(())
            }
            Err(e) if lease_not_found(&e) => Err(self.lost()),
            Err(e) => {
                tracing::debug!(error = ?e, "keep-alive of a queued lease failed");
                if self.live.may_have_ended() {
                    return Err(self.lost());
                }
                self.live.next_refresh = Instant::now() + RETRY_PAUSE;
                Ok(())
            }
        }
    }
}
