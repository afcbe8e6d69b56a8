//! [`Layout::SingleKey`](crate::Layout::SingleKey): the lock is one key,
//! created only if absent with the holder's etcd lease, as python-etcd3's
//! `Lock` keeps it. Nobody queues: a waiter watches the key's deletion and
//! tries again, as python-etcd3's do. The token is the key's create
//! revision plus the floor offset, as in the queue.

use std::time::Instant;

use etcd_client::{WatchFilterType, WatchOptions};
use fencing_core::adapter::Call;
use fencing_core::{Error, Lease, LeaseRequest, Result};

use crate::client::Rpc;
use crate::error::map_error;
use crate::floor::token_of;
use crate::keys::Keys;
use crate::queue::{self, LockHandle, RETRY_PAUSE, RevokeOnDrop};

/// What one try found.
pub(crate) enum Taken {
    Granted(Lease),
    /// Someone holds the key; `seen` is the revision of that answer, from
    /// which a watch sees its deletion.
    Held {
        seen: i64,
    },
}

/// One try: grants an etcd lease and creates the key with it in one
/// transaction, only if the key is absent; otherwise revokes the lease.
pub(crate) async fn try_take(
    rpc: &Rpc,
    keys: &Keys,
    request: &LeaseRequest,
    min_ttl: std::time::Duration,
) -> Result<Taken> {
    keys.check(&request.resource)?;
    let (lease_id, granted_at) = queue::grant(rpc, request, min_ttl).await?;
    let key = keys.dir(&request.resource);
    // Should this future be dropped before the create answers, the lease
    // (and the key with it) is revoked in the background.
    let guard = RevokeOnDrop::lease(rpc, lease_id);
    let created = queue::create(rpc, keys, request, &key, lease_id).await;
    match created {
        Ok(Ok(created)) => {
            guard.disarm();
            let token = token_of(created.revision, created.offset);
            let lease = Lease::new(request, token, granted_at);
            Ok(Taken::Granted(
                lease.with_handle(LockHandle { key, lease_id }),
            ))
        }
        Ok(Err(seen)) => {
            // Should this revoke fail, the guard tries again in the
            // background.
            rpc.revoke(lease_id)
                .await
                .map_err(|e| map_error(e, Call::write("revoke the lease of a refused try")))?;
            guard.disarm();
            Ok(Taken::Held { seen })
        }
        Err(e) => {
            // `create` revoked the lease already.
            guard.disarm();
            Err(e)
        }
    }
}

/// Tries until granted or `give_up`, waiting between tries for the key's
/// deletion.
pub(crate) async fn take(
    rpc: &Rpc,
    keys: &Keys,
    request: &LeaseRequest,
    min_ttl: std::time::Duration,
    (started, give_up): (Instant, Instant),
) -> Result<Lease> {
    let key = keys.dir(&request.resource);
    loop {
        let seen = match try_take(rpc, keys, request, min_ttl).await {
            Ok(Taken::Granted(lease)) => return Ok(lease),
            Ok(Taken::Held { seen }) => Some(seen),
            Err(e) if e.is_retryable() && Instant::now() < give_up => {
                tracing::debug!(error = %e, "single-key acquire: trying again");
                None
            }
            Err(e) => return Err(e),
        };
        if Instant::now() >= give_up {
            return Err(Error::Timeout {
                operation: format!("acquire {:?}", request.resource),
                after: started.elapsed(),
            });
        }
        match seen {
            Some(seen) => deleted(rpc, &key, seen + 1, give_up).await,
            None => {
                tokio::time::sleep_until(give_up.min(Instant::now() + RETRY_PAUSE).into()).await
            }
        }
    }
}

/// Returns once `key` was deleted at or after revision `from` (its holder
/// released or its lease expired), the watch failed (after a pause), or
/// `give_up` came.
async fn deleted(rpc: &Rpc, key: &str, from: i64, give_up: Instant) {
    let pause = || tokio::time::sleep_until(give_up.min(Instant::now() + RETRY_PAUSE).into());
    let options = WatchOptions::new()
        .with_start_revision(from)
        .with_filters([WatchFilterType::NoPut]);
    let mut stream = match rpc.watch(key.as_bytes().to_vec(), options).await {
        Ok(stream) => stream,
        Err(e) => {
            tracing::debug!(error = ?e, "single-key acquire: watch failed");
            return pause().await;
        }
    };
    loop {
        tokio::select! {
            message = stream.message() => match message {
                Ok(Some(response)) if response.canceled() => return pause().await,
                Ok(Some(response)) if !response.events().is_empty() => return,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return pause().await,
            },
            () = tokio::time::sleep_until(give_up.into()) => return,
        }
    }
}
