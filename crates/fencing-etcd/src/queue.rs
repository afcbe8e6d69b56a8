//! The wait queue: a lock key per acquirer, ordered by create revision. A
//! waiter watches the deletion of the key just ahead of it (no herd, no
//! polling) and keeps its own etcd lease alive while it waits.

use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp};
use fencing_core::adapter::Call;
use fencing_core::{Error, FencingToken, Lease, LeaseRequest, Result};

use crate::client::Rpc;
use crate::error::{NAME, map_error};
use crate::floor::{offset_at, token_of};
use crate::keys::{Keys, Layout};

mod waiter;

pub(crate) use waiter::Waiter;

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
    // Armed before the next await: a caller dropping this future (a timeout,
    // a cancelled task) between the grant and the key's creation must not
    // leave a granted lease behind until its TTL. The caller arms its own
    // guard on the `Queued` with no await in between.
    let guard = RevokeOnDrop::lease(rpc, lease_id);
    let key = Keys::lock_key(&keys.dir(&request.resource), lease_id);
    let created = match create(rpc, keys, request, &key, lease_id).await {
        Ok(created) => created,
        Err(e) => {
            // `create` revoked the lease already.
            guard.disarm();
            return Err(e);
        }
    };
    let Ok(created) = created else {
        guard.revoke().await;
        return Err(Error::backend(
            NAME,
            true,
            format!("lock key {key:?} of a fresh lease already existed"),
        ));
    };
    guard.disarm();
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
