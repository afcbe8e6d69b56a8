//! Which lock key and etcd lease are a lease's: from the handle it
//! carries or found by token and holder, checked after a keep-alive; and
//! the leases whose background keep-alive gave up, which renew refuses.

use std::collections::HashSet;
use std::time::Instant;

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, Txn};
use fencing_core::adapter::Call;
use fencing_core::{Error, Lease, Result};

use super::EtcdIssuer;
use crate::error::map_error;
use crate::floor::{self, token_of};
use crate::queue::LockHandle;

/// A lease's entry in the abandoned set.
fn abandoned_key(lease: &Lease) -> (String, u64) {
    (lease.resource().to_owned(), lease.token().get())
}

impl EtcdIssuer {
    /// `lease`'s lock key, unless the lease was given up or its key is gone.
    pub(crate) async fn renewable(&self, lease: &Lease) -> Result<LockHandle> {
        if self.is_abandoned(lease) {
            return Err(Error::lease_lost(lease));
        }
        self.lock_of(lease, "find our lock key")
            .await?
            .ok_or_else(|| Error::lease_lost(lease))
    }

    /// After a keep-alive sent at `sent`: the lease renewed, if its lock
    /// key is still there with our etcd lease. The etcd lease outlives a
    /// lock key deleted by hand (`etcdctl del`), and the next in line is
    /// granted at once.
    pub(crate) async fn still_ours(
        &self,
        lease: &Lease,
        lock: &LockHandle,
        sent: Instant,
    ) -> Result<Lease> {
        let ours = Txn::new().when([Compare::lease(
            lock.key.clone(),
            CompareOp::Equal,
            lock.lease_id,
        )]);
        let kept = self.inner.rpc.txn(ours).await.map_err(|e| {
            map_error(
                e,
                Call::read("check our lock key").on_lease(lease.resource(), lease.token()),
            )
        })?;
        if !kept.succeeded() {
            return Err(Error::lease_lost(lease));
        }
        Ok(lease.renewed(sent))
    }

    pub(super) fn abandon(&self, lease: &Lease) {
        self.abandoned().insert(abandoned_key(lease));
    }

    fn is_abandoned(&self, lease: &Lease) -> bool {
        self.abandoned().contains(&abandoned_key(lease))
    }

    /// Forgets an abandoned lease once it is certainly gone from etcd
    /// (revoked, or its key not found), so the set does not grow forever.
    pub(super) fn forget_abandoned(&self, lease: &Lease) {
        self.abandoned().remove(&abandoned_key(lease));
    }

    fn abandoned(&self) -> std::sync::MutexGuard<'_, HashSet<(String, u64)>> {
        self.inner.abandoned.lock().expect("poisoned")
    }

    /// `lease`'s lock key and the etcd lease attached to it: from the handle
    /// the lease carries, or else found by token and holder
    /// ([`Self::find_key`]). `None` if the key is gone, or is not this
    /// holder's.
    pub(super) async fn lock_of(&self, lease: &Lease, op: &str) -> Result<Option<LockHandle>> {
        if let Some(handle) = lease.handle::<LockHandle>()
            && self
                .inner
                .keys
                .is_lock_key_of(lease.resource(), &handle.key)
        {
            return Ok(Some(handle.clone()));
        }
        Ok(self.find_key(lease, op).await?.map(|kv| LockHandle {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            lease_id: kv.lease(),
        }))
    }

    /// Our lock key for `lease`: the key whose create revision is the token
    /// *and* whose value is the lease's holder. A `Lease` rebuilt with the
    /// token but another holder id is not ours: renewing or revoking the
    /// key's etcd lease would act on the real holder's lease.
    ///
    /// Checking the value in this read is as strong as a compare in the
    /// later call: a lock key's value and etcd lease are written once, in
    /// the transaction that creates it, and that etcd lease carries this
    /// key alone; so the lease id found here names this holder's key and
    /// nothing else, even if the key is gone by the time we use it. (For
    /// the same reason a [`LockHandle`], made from that transaction, needs
    /// no check at all.)
    async fn find_key(&self, lease: &Lease, op: &str) -> Result<Option<KeyValue>> {
        let (rpc, keys) = (&self.inner.rpc, &self.inner.keys);
        let (offset, found) =
            floor::floor_and_keys(rpc, keys, lease.resource(), keys.all(GetOptions::new()))
                .await
                .map_err(|e| map_error(e, Call::read(op)))?;
        let value = keys.value(lease.holder().as_str());
        Ok(keys
            .own(lease.resource(), &found)
            .find(|kv| {
                token_of(kv.create_revision(), offset) == lease.token()
                    && kv.value() == value.as_bytes()
            })
            .cloned())
    }
}
