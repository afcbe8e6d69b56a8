//! The etcd issuer: the etcd concurrency-mutex algorithm, with the lock
//! key's `create_revision` as the fencing token.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{Client, ConnectOptions};
use fencing_core::adapter::{Call, give_up_at};
use fencing_core::keepalive::Renewal;
use fencing_core::tls::TlsMode;
use fencing_core::{
    Error, FencingToken, HolderId, Holding, Lease, LeaseRequest, Result, TokenIssuer,
};

use crate::client::Rpc;
use crate::error::{NAME, map_error};
use crate::floor::{self, token_of};
use crate::keys::{DEFAULT_PREFIX, Keys, Layout};
use crate::queue::{self, LockHandle, RevokeOnDrop, Waiter};
use crate::single_key::{self, Taken};

mod connect;
mod ours;

/// The shortest lease etcd grants with its default timing: the server
/// raises any TTL to 1.5 × its election timeout (1 s by default), rounded
/// up to whole seconds.
pub const DEFAULT_MIN_TTL: Duration = Duration::from_secs(2);

pub(crate) const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

/// A [`TokenIssuer`] on etcd.
///
/// Acquiring grants an etcd lease with the request's TTL (rounded up to
/// whole seconds) and creates the key `{prefix}{resource}/{lease_id:016x}`
/// in a transaction, only if absent, with the lease attached. The holder is
/// the key with the lowest `create_revision` under `{prefix}{resource}/`;
/// a waiter watches the deletion of the key just ahead of it (no herd, no
/// polling) and keeps its own lease alive while it waits.
/// **The fencing token is the lock key's `create_revision`**: cluster-wide,
/// monotonic across leader elections, strictly increasing in grant order.
///
/// The resource name is written as it is, `/` and `%` included, so
/// resource `jobs/a` is `etcdctl lock {prefix}jobs/a`. Every key
/// `{prefix}{resource}/{name}` with no further `/` in `{name}` takes its
/// place in the queue by its create revision, ours or not: another
/// client's key there (an `etcdctl lock {prefix}{resource}` or Go
/// `concurrency.Mutex` on that name, a key put by hand) is a foreign holder
/// or waiter, waited for and never deleted, and
/// [`holder`](TokenIssuer::holder) names it `foreign:{key}`. A key with a
/// further `/` is in the queue of a resource below (`jobs/a`'s, under
/// `{prefix}jobs/`), so `jobs` and `jobs/a` are two locks. The names
/// `%floor` and `%floor/…` are refused ([`Error::InvalidInput`]): the
/// floors are kept under `{prefix}%floor/`.
///
/// With [`Layout::SingleKey`] the lock is one key, `{prefix}{resource}`,
/// created only if absent, as python-etcd3's `Lock` keeps it: a waiter
/// watches its deletion and tries again; the token is still its
/// `create_revision` (plus the floor).
///
/// A granted [`Lease`] carries its etcd lease id, so renewing it is one
/// keep-alive and releasing it one revoke. A lease rebuilt from its token
/// ([`Lease::new`], e.g. in another process) works too: its lock key is
/// found first by token and holder, one more round trip.
///
/// **Renewal is the caller's.** A granted lease is *not* kept alive in the
/// background: [`renew`](TokenIssuer::renew) sends one keep-alive, and a
/// holder that stops renewing loses the lease after its TTL, as the
/// [`TokenIssuer`] contract says. For a background keep-alive, hold it
/// with `issuer.lock(…)` ([`fencing_core::lock`]), whose renewals go on one
/// etcd keep-alive stream ([`TokenIssuer::renewal`]).
///
/// Cheap to clone: clones share the client.
#[derive(Clone)]
pub struct EtcdIssuer {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    rpc: Rpc,
    /// The endpoints [`EtcdConfig::connect_issuer`](crate::EtcdConfig::connect_issuer)
    /// dialled (empty for a caller's own client): `verify` checks they all
    /// belong to one cluster.
    endpoints: Vec<String>,
    /// How `verify` reaches each member on a connection of its own.
    dial: Dial,
    keys: Keys,
    min_ttl: Duration,
    /// `(resource, token)` of leases whose background keep-alive gave up:
    /// renew refuses them even if etcd would still extend the lease. Keyed
    /// by resource too: a floor can give two resources the same token.
    /// Shared by every issuer built from the same one.
    abandoned: Arc<Mutex<HashSet<(String, u64)>>>,
}

/// How the issuer connected: what `verify` needs to reach each member on
/// its own connection, and to report the transport.
#[derive(Clone, Default)]
pub(crate) struct Dial {
    /// TLS and the user, as the issuer's own client has them. Never
    /// printed: its `Debug` would show the client key and the password.
    pub(crate) options: ConnectOptions,
    /// The transport; not known for a caller's own client.
    pub(crate) mode: Option<TlsMode>,
    /// Whether this is the caller's own client ([`EtcdIssuer::new`]):
    /// nothing is known of its TLS or user.
    pub(crate) callers_client: bool,
    /// A user was given, but etcd has authentication off, so the issuer
    /// connected without it.
    pub(crate) auth_off: bool,
}

impl fmt::Debug for EtcdIssuer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdIssuer")
            .field("prefix", &self.inner.keys.prefix())
            .field("min_ttl", &self.inner.min_ttl)
            .field("operation_timeout", &self.inner.rpc.timeout())
            .finish_non_exhaustive()
    }
}

impl EtcdIssuer {
    /// An issuer on the caller's own client, with the defaults: prefix
    /// [`DEFAULT_PREFIX`], min TTL [`DEFAULT_MIN_TTL`], a 5 s operation
    /// timeout. For other settings on a client of one's own, see
    /// [`EtcdConfig::issuer_on`](crate::EtcdConfig::issuer_on); to dial
    /// etcd, [`EtcdConfig::connect_issuer`](crate::EtcdConfig::connect_issuer).
    pub fn new(client: Client) -> Self {
        Self {
            inner: Arc::new(Inner {
                rpc: Rpc::new(client, DEFAULT_OPERATION_TIMEOUT),
                endpoints: Vec::new(),
                dial: Dial {
                    callers_client: true,
                    ..Dial::default()
                },
                keys: Keys::new(DEFAULT_PREFIX.to_owned(), Layout::Queue),
                min_ttl: DEFAULT_MIN_TTL,
                abandoned: Arc::default(),
            }),
        }
    }

    /// The issuer with [`EtcdConfig`](crate::EtcdConfig)'s settings (those
    /// given), applied once, before it is shared.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty prefix or one with a NUL byte.
    pub(crate) fn configured(
        self,
        keys: Option<Keys>,
        timeout: Option<Duration>,
        min_ttl: Option<Duration>,
    ) -> Result<Self> {
        if let Some(keys) = &keys {
            check_prefix(keys.prefix())?;
        }
        Ok(self.rebuild(|inner| {
            if let Some(keys) = keys {
                inner.keys = keys;
            }
            if let Some(timeout) = timeout {
                inner.rpc = inner.rpc.with_timeout(timeout);
            }
            if let Some(min_ttl) = min_ttl {
                inner.min_ttl = min_ttl;
            }
        }))
    }

    fn rebuild(self, change: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Inner::clone(&self.inner);
        // A builder step gets a set of its own, as a new issuer would.
        inner.abandoned = Arc::new(Mutex::new(
            self.inner.abandoned.lock().expect("poisoned").clone(),
        ));
        change(&mut inner);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        self.inner.keys.prefix()
    }

    /// How the lock is kept: whose lock clients share it.
    pub fn layout(&self) -> Layout {
        self.inner.keys.layout()
    }

    /// The endpoints it dialled; empty for an issuer on the caller's own
    /// client.
    pub(crate) fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    /// How the issuer connected, for `verify`.
    pub(crate) fn dial(&self) -> &Dial {
        &self.inner.dial
    }

    /// Whether etcd keeps more than `most` revisions of history, as
    /// [`verify`](TokenIssuer::verify) checks with
    /// [`HISTORY_REVISIONS`](crate::HISTORY_REVISIONS): a warning when a
    /// read `most` revisions back is answered (nothing compacted it), a
    /// pass when it is refused as compacted or there is no such revision.
    ///
    /// # Errors
    /// A failed read.
    pub async fn history_check(&self, most: u64) -> Result<fencing_core::safety::SafetyCheck> {
        crate::verify::history(self, most).await
    }

    /// The etcd client, for anything this crate does not do.
    pub fn client(&self) -> &Client {
        self.inner.rpc.client()
    }

    /// The calls to etcd, with the operation timeout.
    pub(crate) fn rpc(&self) -> &Rpc {
        &self.inner.rpc
    }
}

#[async_trait]
impl TokenIssuer for EtcdIssuer {
    fn name(&self) -> &'static str {
        NAME
    }

    fn min_ttl(&self) -> Duration {
        self.inner.min_ttl
    }

    /// The generic probe, plus the transport (plaintext past the loopback
    /// is a warning; not known for the caller's own client), a user that
    /// etcd ignores because authentication is off (a warning), and etcd's
    /// membership: how many members vote
    /// (one is a warning: no failover), each member's status and health on
    /// its own connection, with the issuer's TLS and user (unreachable is
    /// a warning: raft keeps tokens
    /// safe, grants only wait), one agreed leader, the connect endpoints
    /// all in one cluster (two clusters are unsafe: unrelated revisions),
    /// and etcd's alarms (`CORRUPT` is unsafe, `NOSPACE` a warning). A
    /// cluster-wide read that the user's role may not make (the member
    /// list, the alarms) is a warning, not an error: the issuer needs
    /// rights on its prefix only. The history etcd keeps: more than
    /// [`HISTORY_REVISIONS`](crate::HISTORY_REVISIONS) uncompacted is a
    /// warning (every grant adds to it, and a full quota refuses every
    /// write); compaction cannot hurt tokens (a live key keeps its create
    /// revision; a waiter's watch starts from a fresh read).
    async fn verify(&self) -> Result<Vec<fencing_core::safety::SafetyCheck>> {
        crate::verify::verify(self).await
    }

    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
        let rpc = &self.inner.rpc;
        if self.layout() == Layout::SingleKey {
            let taken = single_key::try_take(rpc, &self.inner.keys, request, self.inner.min_ttl);
            return match taken.await? {
                Taken::Granted(lease) => Ok(Some(lease)),
                Taken::Held { .. } => Ok(None),
            };
        }
        let queued = queue::enqueue(rpc, &self.inner.keys, request, self.inner.min_ttl).await?;
        let guard = RevokeOnDrop::new(rpc, &queued);
        if queued.first {
            guard.disarm();
            return Ok(Some(queued.granted(request)));
        }
        // Someone holds it: take our key out of the queue again. (Should
        // this future be dropped meanwhile, the guard revokes in the
        // background.)
        rpc.revoke(queued.lease_id)
            .await
            .map_err(|e| map_error(e, Call::write("revoke the lease of a refused try")))?;
        guard.disarm();
        Ok(None)
    }

    async fn acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Lease> {
        let started = Instant::now();
        let (rpc, keys) = (&self.inner.rpc, &self.inner.keys);
        if self.layout() == Layout::SingleKey {
            let budget = (started, give_up_at(started, wait));
            return single_key::take(rpc, keys, request, self.inner.min_ttl, budget).await;
        }
        let queued = queue::enqueue(rpc, keys, request, self.inner.min_ttl).await?;
        let guard = RevokeOnDrop::new(rpc, &queued);
        if queued.first {
            guard.disarm();
            return Ok(queued.granted(request));
        }
        let waiter = Waiter::new(
            rpc,
            keys,
            &queued,
            request,
            started,
            give_up_at(started, wait),
        );
        match waiter.wait_turn().await {
            Ok(alive_at) => {
                guard.disarm();
                Ok(queued.lease(request, alive_at))
            }
            Err(e) => {
                guard.revoke().await;
                Err(e)
            }
        }
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let lock = self.renewable(lease).await?;
        let sent = Instant::now();
        self.inner
            .rpc
            .keep_alive_once(lock.lease_id)
            .await
            .map_err(|e| map_error(e, renewal_call(lease, "keep the lease alive")))?;
        self.still_ours(lease, &lock, sent).await
    }

    /// Renewals on one etcd keep-alive stream kept open for the lease's
    /// life (a message each, where [`renew`](TokenIssuer::renew) opens a
    /// stream per renewal), each followed by the same check that the lock
    /// key is still ours.
    fn renewal(&self, lease: &Lease) -> Option<Box<dyn Renewal>> {
        let _ = lease;
        Some(Box::new(crate::keep_alive::Stream::new(self.clone())))
    }

    /// Gives the lease up: revokes its etcd lease. From the moment it is
    /// called, [`renew`](TokenIssuer::renew) refuses the lease, even if the
    /// revoke fails and etcd still has it: a holder that asked to let go
    /// (or a keep-alive that gave up past the deadline) is not kept alive
    /// by a renewal still in flight.
    async fn release(&self, lease: &Lease) -> Result<()> {
        self.abandon(lease);
        let Some(LockHandle { lease_id, .. }) = self.lock_of(lease, "find our lock key").await?
        else {
            // Our key is gone for good (keys are never re-created with a
            // past create revision).
            self.forget_abandoned(lease);
            return Err(Error::lease_lost(lease));
        };
        // A revoked (or expired) etcd lease answers "not found": LeaseLost.
        let revoked = self.inner.rpc.revoke(lease_id).await.map_err(|e| {
            map_error(
                e,
                Call::write("revoke the lease").on_lease(lease.resource(), lease.token()),
            )
        });
        // Keep an abandoned lease refused while etcd may still have it:
        // forgotten only once etcd said it is gone (revoked, or not found),
        // not after a failure or a lost answer.
        if matches!(&revoked, Ok(()) | Err(Error::LeaseLost { .. })) {
            self.forget_abandoned(lease);
        }
        revoked
    }

    /// A key under the resource's prefix that is not one of our lock keys
    /// (`etcdctl lock` and Go's `concurrency.Mutex` write an empty value;
    /// a key put by hand has no lease or another name) is a holder whose
    /// id is `foreign:` and the key. Its token is the one its place in the
    /// queue gives it, as ours get theirs: its `create_revision` plus the
    /// floor offset. (Not `etcdctl lock`'s `ETCD_LOCK_REV`, the revision
    /// of its last read: a holder that waited gets a number above a later
    /// holder's key.) `fence token` hands it to such a client.
    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        let keys = &self.inner.keys;
        keys.check(resource)?;
        let (offset, found) =
            floor::floor_and_keys(&self.inner.rpc, keys, resource, keys.in_order())
                .await
                .map_err(|e| map_error(e, Call::read("find the holder")))?;
        let Some(first) = keys.own(resource, &found).next() else {
            return Ok(None);
        };
        let holder = match keys.holder_of(resource, first) {
            Some(holder) => holder,
            None => {
                let lease = (keys.layout() == Layout::SingleKey).then(|| first.lease());
                foreign_holder(first.key(), lease)?
            }
        };
        Ok(Some(Holding {
            holder,
            token: token_of(first.create_revision(), offset),
        }))
    }

    /// Adds an offset to the resource's tokens so that every later grant is
    /// above `floor`: tokens are `create_revision + offset`, and the offset
    /// is set to `floor - current revision` if that is more. Only while the
    /// resource is free (no holder, nobody queued; checked in the same
    /// transaction), so every live key carries the offset it was created
    /// with.
    ///
    /// # Errors
    /// [`Error::Busy`] while the resource is held or waited for.
    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        floor::raise(&self.inner.rpc, &self.inner.keys, resource, floor).await
    }
}

/// `foreign:` and the key, cut to fit a holder id. On the single key,
/// where every holder of a resource has the same key, the key's lease is
/// added (`foreign:/locks/NAME@<lease id in hex>`), so that one holder's
/// name does not also name the next: a python-etcd3 holder paused past its
/// lease must not be handed its successor's token.
fn foreign_holder(key: &[u8], lease: Option<i64>) -> Result<HolderId> {
    let mut id = format!("foreign:{}", String::from_utf8_lossy(key));
    // The lease is what tells one single-key holder from the next: the
    // key is cut to fit, never it.
    let lease = lease.map(|lease| format!("@{lease:x}")).unwrap_or_default();
    if id.len() + lease.len() > 256 {
        let mut end = 253 - lease.len();
        while !id.is_char_boundary(end) {
            end -= 1;
        }
        id.truncate(end);
        id.push('…');
    }
    id.push_str(&lease);
    HolderId::new(id)
}

/// An etcd key prefix the issuer can use: not empty, no NUL.
fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() || prefix.contains('\0') {
        return Err(Error::invalid_input(format!(
            "bad etcd key prefix {prefix:?}"
        )));
    }
    Ok(())
}

/// How a keep-alive is labelled: idempotent, since one whose answer is
/// lost, or one sent twice, changes nothing but the etcd lease's expiry.
pub(crate) fn renewal_call<'a>(lease: &'a Lease, what: &'a str) -> Call<'a> {
    Call::idempotent(what).on_lease(lease.resource(), lease.token())
}

#[cfg(test)]
mod tests {
    use super::foreign_holder;

    #[test]
    fn a_foreign_holder_keeps_its_lease_however_long_its_key() {
        let short = foreign_holder(b"/locks/r", Some(0x694d)).unwrap();
        assert_eq!(short.as_str(), "foreign:/locks/r@694d");
        let long_key = format!("/locks/{}", "r".repeat(400));
        let long = foreign_holder(long_key.as_bytes(), Some(0x694d_9a1b_2c3d_4e5f)).unwrap();
        assert!(long.as_str().ends_with("…@694d9a1b2c3d4e5f"), "{long:?}");
        assert_eq!(long.as_str().len(), 256);
        let queued = foreign_holder(long_key.as_bytes(), None).unwrap();
        assert!(queued.as_str().ends_with('…'), "{queued:?}");
    }
}
