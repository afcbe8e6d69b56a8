//! The ZooKeeper issuer: the lock recipe on ephemeral sequential znodes,
//! one shared session per TTL, with the znode's `czxid` (or the parent's
//! `cversion`) as the fencing token.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fencing_core::adapter::Call;
use fencing_core::{
    Error, FencingToken, HolderId, Holding, Lease, LeaseRequest, Removal, Result, TokenIssuer,
};
use zookeeper_client as zk;

use crate::access::Access;
use crate::client::{Reap, Rpc};
use crate::error::{NAME, map_error};
use crate::floor;
use crate::held::HeldLeases;
use crate::keys::{Znode, is_lock_node, normalize_prefix, resource_path};
use crate::queue::{self, Attempt};
use crate::token::{TokenSource, czxid_token, with_offset};

const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// A [`TokenIssuer`] on ZooKeeper.
///
/// Built by [`ZkConfig::connect_issuer`](crate::ZkConfig::connect_issuer), the one builder
/// (a lease needs sessions of its own, so there is no issuer on a caller's
/// client).
///
/// The leases of one TTL **share a ZooKeeper session** (opened at the
/// first acquire with that TTL, its timeout the TTL as the server allows:
/// it negotiates within `[2, 20] × tickTime`). Each acquire creates an
/// ephemeral sequential znode `{prefix}/{resource}/_f_<nonce>-lock-N` in
/// it, holding the holder id. The holder is the lock node with the lowest
/// `czxid`; a waiter watches only the node just ahead of it (an
/// exists-watch: no herd). The lease is that node, in that session:
///
/// - **Renew** checks that the node still exists (owned by the session),
///   and moves this lease's deadline on by its TTL.
/// - A holder that **stops renewing** loses the lease at its deadline: the
///   issuer deletes the node then. (The session's heartbeats would
///   otherwise keep it forever.) The session, and its other leases, stay.
/// - A holder whose **process stops** (GC pause, SIGSTOP, partition) stops
///   the session's heartbeats: ZooKeeper expires the session after its
///   timeout and deletes every node in it, and every later call on those
///   leases fails with [`Error::LeaseLost`].
/// - **Release** deletes the node; nothing else of the session changes.
///
/// A free resource is granted in one round trip (the create's transaction
/// answers with the child count, so a node created alone holds without a
/// read of the queue), released in one more.
///
/// The lease's TTL is the requested one, shortened to the negotiated
/// session timeout if the server grants less (above `20 × tickTime`), so
/// the local deadline stays conservative. [`min_ttl`](TokenIssuer::min_ttl)
/// is the server's minimum session timeout, learned at connect.
///
/// A granted [`Lease`] carries its node and session (its handle). A lease rebuilt
/// from resource, holder and token ([`Lease::new`]) is found among the
/// leases this issuer (or a clone of it) granted; the session lives in
/// this process, so another process cannot renew or release it.
///
/// The sequence suffix of a lock node is a signed 32-bit counter that
/// wraps (ZOOKEEPER-2944); ordering therefore uses `czxid`, never the name.
///
/// The resource znode is `{prefix}/{resource}`, the name as it is
/// (`jobs/a` is Curator's lock path `{prefix}/jobs/a`); a name that is no
/// such znode path is refused with [`Error::InvalidInput`].
///
/// Every ephemeral child of the resource znode is in the queue, ours or
/// not (a persistent one is the znode of a resource below): another
/// client's lock node there (kazoo's `Lock` or Curator's
/// `InterProcessMutex` on the resource znode's path) created before ours
/// is a foreign holder or waiter ahead of us, waited for and never
/// deleted, and [`holder`](TokenIssuer::holder) names it `foreign:{name}`.
/// The other way round is theirs: Curator orders every child by the
/// sequence number after `lock-`, ours included, but kazoo looks only at
/// `__lock__` nodes and takes its lock while we hold ours.
#[derive(Clone)]
pub struct ZkIssuer {
    inner: Arc<Inner>,
}

struct Inner {
    rpc: Rpc,
    prefix: String,
    token_source: TokenSource,
    held: HeldLeases,
}

impl fmt::Debug for ZkIssuer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (min, max) = self.session_timeouts();
        let access = self.inner.rpc.access();
        f.debug_struct("ZkIssuer")
            .field("connect_string", &self.connect_string())
            .field("tls", &access.mode())
            .field("user", &access.user())
            .field("prefix", &self.inner.prefix)
            .field("token_source", &self.inner.token_source)
            .field("session_timeouts", &(min..=max))
            .finish_non_exhaustive()
    }
}

impl ZkIssuer {
    /// [`ZkConfig::connect_issuer`](crate::ZkConfig::connect_issuer): the one way in.
    pub(crate) async fn open(
        connect_string: &str,
        access: Access,
        prefix: &str,
        token_source: TokenSource,
    ) -> Result<Self> {
        let prefix = normalize_prefix(prefix)?;
        let rpc = Rpc::connect(connect_string, access, DEFAULT_OPERATION_TIMEOUT).await?;
        let issuer = Self {
            inner: Arc::new(Inner {
                rpc,
                prefix,
                token_source,
                held: HeldLeases::new(DEFAULT_OPERATION_TIMEOUT),
            }),
        };
        issuer
            .inner
            .rpc
            .make_prefix(&issuer.client(), &issuer.inner.prefix, token_source)
            .await?;
        Ok(issuer)
    }

    /// The sessions and calls (for `verify`).
    pub(crate) fn rpc(&self) -> &Rpc {
        &self.inner.rpc
    }

    /// The connect string (`host:port[,host:port…]`).
    pub(crate) fn connect_string(&self) -> &str {
        self.inner.rpc.connect_string()
    }

    /// The prefix znode.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Where tokens come from.
    pub fn token_source(&self) -> TokenSource {
        self.inner.token_source
    }

    /// The server's `(minSessionTimeout, maxSessionTimeout)`.
    pub fn session_timeouts(&self) -> (Duration, Duration) {
        self.inner.rpc.session_timeouts()
    }

    /// The issuer's own ZooKeeper client (not a lease's session).
    pub fn client(&self) -> zk::Client {
        self.inner.rpc.main()
    }

    /// The znode of a resource: `{prefix}/{resource}`, Curator's and
    /// kazoo's lock path for that name. (The issuer refuses a name that is
    /// no such path: see the crate's README.)
    pub fn resource_path(&self, resource: &str) -> String {
        resource_path(&self.inner.prefix, resource)
    }

    /// The resource's znode, for a name the issuer takes.
    pub(crate) fn znode(&self, resource: &str) -> Result<Znode> {
        Znode::of(&self.inner.prefix, resource, self.inner.token_source)
    }

    async fn enqueue(&self, request: &LeaseRequest) -> Result<queue::Queued> {
        queue::enqueue(&self.inner.rpc, self.znode(&request.resource)?, request).await
    }
}

#[async_trait]
impl TokenIssuer for ZkIssuer {
    fn name(&self) -> &'static str {
        NAME
    }

    fn min_ttl(&self) -> Duration {
        self.session_timeouts().0
    }

    /// The generic probe, plus the ensemble: its voting servers from
    /// `/zookeeper/config` (none or one is a warning: no failover), each
    /// server of the connect string by `srvr` (standalone or unreachable is
    /// a warning: ZAB keeps zxids safe, grants only wait), and one leader
    /// (a connect string spanning two ensembles is unsafe: unrelated
    /// zxids).
    async fn verify(&self) -> Result<Vec<fencing_core::safety::SafetyCheck>> {
        crate::verify::verify(self).await
    }

    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
        let rpc = &self.inner.rpc;
        let q = self.enqueue(request).await?;
        if q.alone {
            let sent = q.sent;
            return Ok(Some(self.inner.held.hold(q, sent)));
        }
        let sent = Instant::now();
        match queue::ahead_of(rpc, &q).await {
            Ok(None) => Ok(Some(self.inner.held.hold(q, sent))),
            // Held by someone else: leave the queue.
            Ok(Some(_)) => {
                q.leave(rpc).await;
                Ok(None)
            }
            Err(e) => {
                q.leave(rpc).await;
                Err(e)
            }
        }
    }

    async fn acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Lease> {
        let attempt = Attempt::new(Instant::now(), wait);
        let q = self.enqueue(request).await?;
        if q.alone {
            let sent = q.sent;
            return Ok(self.inner.held.hold(q, sent));
        }
        match queue::wait_turn(&self.inner.rpc, &q, attempt).await {
            Ok(alive_at) => Ok(self.inner.held.hold(q, alive_at)),
            Err(e) => {
                q.leave(&self.inner.rpc).await;
                Err(e)
            }
        }
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let held = self
            .inner
            .held
            .find(lease)
            .ok_or_else(|| Error::lease_lost(lease))?;
        let sent = Instant::now();
        let client = held.live_client().ok_or_else(|| Error::lease_lost(lease))?;
        let stat = self
            .inner
            .rpc
            .timed(client.check_stat(&held.path))
            .await
            .map_err(|e| {
                map_error(
                    e,
                    Call::read("check the lock node").on_lease(lease.resource(), lease.token()),
                )
            })?;
        match stat {
            Some(stat) if stat.ephemeral_owner == held.session.0 => {
                if !held.extend(sent) {
                    return Err(Error::lease_lost(lease));
                }
                Ok(lease.renewed(sent))
            }
            _ => {
                held.close();
                Err(Error::lease_lost(lease))
            }
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let held = self
            .inner
            .held
            .take(lease)
            .ok_or_else(|| Error::lease_lost(lease))?;
        let Some(client) = held.live_client() else {
            // Past its deadline: the watchdog deletes the node.
            return Err(Error::lease_lost(lease));
        };
        match self.inner.rpc.timed(client.delete(&held.path, None)).await {
            Ok(()) => {
                held.close();
                Ok(())
            }
            Err(e) => {
                let e = map_error(
                    e,
                    Call::write("delete the lock node").on_lease(lease.resource(), lease.token()),
                );
                if e.is_retryable() {
                    // Still ours: keep it so the caller can try again (or
                    // the watchdog deletes it at the deadline).
                    self.inner.held.put_back(lease, held);
                } else {
                    held.close();
                    self.inner.rpc.reap(client, Reap::Path(held.path.clone()));
                }
                Err(e)
            }
        }
    }

    /// Adds an offset to the resource's tokens so that every later grant is
    /// above `floor`. The offset is the resource znode's data; it is written
    /// at the version of a snapshot that showed no lock node, and since
    /// every create rewrites that data at the version it read, the write
    /// fails if any create came in between. So every live lock node carries
    /// the offset it was created with, and tokens keep strictly increasing.
    ///
    /// # Errors
    /// [`Error::Busy`] while the resource is held or waited for.
    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        floor::raise(&self.inner.rpc, self.znode(resource)?, resource, floor).await
    }

    /// With `token=czxid`, under a prefix such an issuer made: deletes the
    /// resource znode and its keeper if no lock node is there and none was
    /// granted for `idle_for`, by the leader's clock; a znode with a floor
    /// offset is kept. A lock node made later is above every token the
    /// removed znode gave (its czxid). See the `removal` module.
    ///
    /// # Errors
    /// [`Error::UnsafeConfiguration`] with `token=cversion` (the count
    /// would start again at 0), and under a prefix that a `token=czxid`
    /// issuer of this release did not make (a `token=cversion` issuer may
    /// have used it).
    async fn remove_idle(&self, resource: &str, idle_for: Duration) -> Result<Removal> {
        crate::removal::remove_idle(&self.inner.rpc, self.znode(resource)?, resource, idle_for)
            .await
    }

    /// A child of the resource znode that is not one of our lock nodes
    /// (kazoo's `<uuid>__lock__N`, Curator's `_c_<uuid>-lock-N`, anything
    /// else), first in creation order, is a holder whose id is `foreign:`
    /// and the node's name. With [`TokenSource::Czxid`] its token is its
    /// node's `czxid` plus the floor offset, as ours (`fence token` hands
    /// it to such a client); with [`TokenSource::ParentCversion`] it is 0:
    /// the cversion its create left cannot be read back.
    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        let dir = self.znode(resource)?.dir;
        let rpc = &self.inner.rpc;
        let client = rpc.live_main().await?;
        let (offset, nodes) = queue::lock_nodes(rpc, &client, &dir)
            .await
            .map_err(|e| map_error(e, Call::read("list the lock nodes")))?;
        let Some(first) = nodes.into_iter().next() else {
            return Ok(None);
        };
        let foreign = || {
            let token = match self.inner.token_source {
                TokenSource::Czxid => with_offset(czxid_token(first.czxid)?, offset)?,
                TokenSource::ParentCversion => FencingToken::ZERO,
            };
            Ok(Some(Holding {
                holder: foreign_holder(&first.name)?,
                token,
            }))
        };
        let data = match std::str::from_utf8(&first.data) {
            Ok(data) if is_lock_node(&first.name) => data,
            _ => return foreign(),
        };
        let (holder, token) = match self.inner.token_source {
            TokenSource::Czxid => (data, with_offset(czxid_token(first.czxid)?, offset)?),
            TokenSource::ParentCversion => match data.rsplit_once('\n') {
                // `holder\ntoken`, written right after the create.
                Some((holder, token)) => match token.parse::<FencingToken>() {
                    Ok(token) => (holder, token),
                    Err(_) => return foreign(),
                },
                None if HolderId::new(data).is_ok() => {
                    return Err(Error::backend(
                        NAME,
                        true,
                        format!("lock node {dir}/{} holds no token yet", first.name),
                    ));
                }
                None => return foreign(),
            },
        };
        match HolderId::new(holder) {
            Ok(holder) => Ok(Some(Holding { holder, token })),
            Err(_) => foreign(),
        }
    }
}

/// `foreign:` and a node's name, cut to fit a holder id.
fn foreign_holder(name: &str) -> Result<HolderId> {
    let mut id = format!("foreign:{name}");
    if id.len() > 256 {
        let mut end = 253;
        while !id.is_char_boundary(end) {
            end -= 1;
        }
        id.truncate(end);
        id.push('…');
    }
    HolderId::new(id)
}
