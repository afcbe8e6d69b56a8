//! The wait queue: a lock key per acquirer, ordered by create revision. A
//! waiter watches the deletion of the key just ahead of it (no herd, no
//! polling) and keeps its own etcd lease alive while it waits.

use std::time::{Duration, Instant};

use etcd_client::{
    Compare, CompareOp, EventType, KeyValue, PutOptions, Txn, TxnOp, WatchFilterType, WatchOptions,
};
use fencing_core::adapter::Call;
use fencing_core::{Error, FencingToken, Lease, LeaseRequest, Result};

use crate::client::Rpc;
use crate::error::{NAME, lease_not_found, map_error};
use crate::floor::{offset_at, token_of};
use crate::keys::{Keys, Layout, before, in_queue};

/// How long to wait before trying again after a failed call while queued.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// What a granted [`Lease`] carries ([`Lease::handle`]): its lock key and
/// the etcd lease attached to it, so renew and release need no lookup.
#[derive(Clone, Debug)]
pub(crate) struct LockHandle {
    pub(crate) key: String,
    pub(crate) lease_id: i64,
}

/// A lock key this process created and keeps alive while it waits.
pub(crate) struct Queued {
    pub(crate) lease_id: i64,
    key: String,
    revision: i64,
    /// The resource's floor offset when the key was created.
    offset: u64,
    /// When the grant request was sent: the lease lives at least the TTL
    /// from here.
    granted_at: Instant,
    /// Whether the key was the lowest under the resource when created.
    pub(crate) first: bool,
}

impl Queued {
    fn token(&self) -> FencingToken {
        token_of(self.revision, self.offset)
    }

    /// The lease this key grants, alive since `alive_at`, carrying its
    /// [`LockHandle`].
    pub(crate) fn lease(&self, request: &LeaseRequest, alive_at: Instant) -> Lease {
        Lease::new(request, self.token(), alive_at).with_handle(LockHandle {
            key: self.key.clone(),
            lease_id: self.lease_id,
        })
    }

    /// The lease as granted by the create itself (for the first in line).
    pub(crate) fn granted(&self, request: &LeaseRequest) -> Lease {
        self.lease(request, self.granted_at)
    }
}

/// Grants an etcd lease and creates the lock key in one transaction, with
/// the lease attached; reads back whether the key is the lowest under the
/// resource (the holder).
pub(crate) async fn enqueue(
    rpc: &Rpc,
    keys: &Keys,
    request: &LeaseRequest,
    min_ttl: Duration,
) -> Result<Queued> {
    keys.check(&request.resource)?;
    let (lease_id, granted_at) = grant(rpc, request, min_ttl).await?;
    let key = Keys::lock_key(&keys.dir(&request.resource), lease_id);
    let Ok(created) = create(rpc, keys, request, &key, lease_id).await? else {
        rpc.revoke_quietly(lease_id).await;
        return Err(Error::backend(
            NAME,
            true,
            format!("lock key {key:?} of a fresh lease already existed"),
        ));
    };
    Ok(Queued {
        lease_id,
        key,
        revision: created.revision,
        offset: created.offset,
        granted_at,
        first: created.first == Some(created.revision),
    })
}

/// A lock key just created.
pub(crate) struct Created {
    /// Its create revision.
    pub(crate) revision: i64,
    /// The resource's floor offset when it was created.
    pub(crate) offset: u64,
    /// The create revision of the resource's holder then (itself, for the
    /// single key).
    pub(crate) first: Option<i64>,
}

/// Creates `key` with etcd lease `lease_id` attached, only if it is absent,
/// in one transaction that also reads the floor and, in the queue, the
/// resource's first key. `Err(revision)` if the key exists (the revision of
/// that answer, from which a watch sees its deletion): the lease is the
/// caller's to revoke. On any other failure the lease is revoked (which
/// removes the key, if it was created) before the error returns.
pub(crate) async fn create(
    rpc: &Rpc,
    keys: &Keys,
    request: &LeaseRequest,
    key: &str,
    lease_id: i64,
) -> Result<std::result::Result<Created, i64>> {
    let queue = keys.layout() == Layout::Queue;
    let mut reads = vec![
        TxnOp::put(
            key,
            keys.value(request.holder.as_str()),
            Some(PutOptions::new().with_lease(lease_id)),
        ),
        TxnOp::get(key, None),
    ];
    if queue {
        reads.push(TxnOp::get(
            keys.dir(&request.resource),
            Some(keys.in_order().with_keys_only()),
        ));
    }
    reads.push(TxnOp::get(keys.floor_key(&request.resource), None));
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then(reads);
    let response = match rpc.txn(txn).await {
        Ok(response) => response,
        Err(e) => {
            // The key may exist: revoking the lease removes it either way.
            rpc.revoke_quietly(lease_id).await;
            return Err(map_error(e, Call::write("create lock key")));
        }
    };
    if !response.succeeded() {
        return Ok(Err(response.header().map_or(0, |h| h.revision())));
    }
    let revision_of = |get: Option<etcd_client::GetResponse>| {
        get.as_ref()
            .and_then(|g| keys.own(&request.resource, g.kvs()).next())
            .map(KeyValue::create_revision)
    };
    let mut gets = crate::client::gets(&response);
    let own = revision_of(gets.next());
    let first = if queue { revision_of(gets.next()) } else { own };
    let floor = gets.next();
    let Some(revision) = own else {
        rpc.revoke_quietly(lease_id).await;
        return Err(Error::backend(
            NAME,
            true,
            format!("lock key {key:?} was not read back"),
        ));
    };
    match offset_at(revision, floor.as_ref()) {
        Ok(offset) => Ok(Ok(Created {
            revision,
            offset,
            first,
        })),
        Err(e) => {
            rpc.revoke_quietly(lease_id).await;
            Err(e)
        }
    }
}

/// Checks `request` and grants the etcd lease of its TTL: its id, and when
/// the grant was sent (the lease lives at least the TTL from then).
pub(crate) async fn grant(
    rpc: &Rpc,
    request: &LeaseRequest,
    min_ttl: Duration,
) -> Result<(i64, Instant)> {
    request.validate(min_ttl)?;
    let ttl = whole_seconds(request)?;
    let granted_at = Instant::now();
    // An orphan lease (its grant answer lost) has no key and expires by
    // itself, so an unknown grant is merely retryable.
    let lease_id = rpc
        .grant(ttl)
        .await
        .map_err(|e| map_error(e, Call::idempotent("grant lease")))?;
    Ok((lease_id, granted_at))
}

/// Removes the lock key of an acquire that did not finish (an error, a
/// timeout, or a caller that dropped the future), so it never becomes a
/// holder nobody knows about.
pub(crate) struct RevokeOnDrop {
    rpc: Rpc,
    lease_id: Option<i64>,
}

impl RevokeOnDrop {
    pub(crate) fn new(rpc: &Rpc, queued: &Queued) -> Self {
        Self::lease(rpc, queued.lease_id)
    }

    /// Revokes etcd lease `lease_id` unless disarmed.
    pub(crate) fn lease(rpc: &Rpc, lease_id: i64) -> Self {
        Self {
            rpc: rpc.clone(),
            lease_id: Some(lease_id),
        }
    }

    pub(crate) async fn revoke(mut self) {
        if let Some(id) = self.lease_id.take() {
            self.rpc.revoke_quietly(id).await;
        }
    }

    pub(crate) fn disarm(mut self) {
        self.lease_id = None;
    }
}

impl Drop for RevokeOnDrop {
    fn drop(&mut self) {
        if let (Some(id), Ok(runtime)) = (self.lease_id, tokio::runtime::Handle::try_current()) {
            let rpc = self.rpc.clone();
            runtime.spawn(async move { rpc.revoke_quietly(id).await });
        }
    }
}

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

/// A TTL in whole etcd seconds, rounded up: rounding down would let etcd
/// end the lease before the holder's local deadline.
fn whole_seconds(request: &LeaseRequest) -> Result<i64> {
    // `ttl_secs_ceil` overflows near `Duration::MAX`: refuse such TTLs first.
    fencing_core::adapter::check_ttl(request.ttl)?;
    i64::try_from(request.ttl_secs_ceil())
        .map_err(|_| Error::invalid_input(format!("ttl {:?} is too long for etcd", request.ttl)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_to_whole_seconds() {
        let secs = |ttl| whole_seconds(&LeaseRequest::new("r", ttl));
        assert_eq!(secs(Duration::from_secs(2)).unwrap(), 2);
        assert_eq!(secs(Duration::from_millis(2001)).unwrap(), 3);
        assert_eq!(secs(Duration::from_millis(2500)).unwrap(), 3);
        assert_eq!(secs(Duration::from_millis(1)).unwrap(), 1);
        assert!(secs(Duration::MAX).is_err());
    }
}
