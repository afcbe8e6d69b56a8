//! The wait queue: an ephemeral sequential lock node per acquirer, in the
//! session its TTL class shares, ordered by `czxid` (the sequence suffix
//! wraps, ZOOKEEPER-2944). A waiter watches only the node just ahead of it
//! (an exists-watch: no herd).
//!
//! Every ephemeral child of the resource znode is in the queue, ours or
//! not (a persistent child is the znode of a resource below: lock nodes
//! end with their session, in every recipe): another
//! client's lock node (kazoo's `<uuid>__lock__N`, Curator's
//! `_c_<uuid>-lock-N`) created before ours is ahead of us, so we never
//! hold while it is there. The czxid orders them all: every child has one,
//! whoever created it, and it grows with creation order as the sequence
//! suffixes of one parent do, without wrapping.

use std::time::{Duration, Instant};

use fencing_core::adapter::Call;
use fencing_core::{Error, FencingToken, LeaseRequest, Result};
use zookeeper_client as zk;

use crate::client::{Known, Reap, Rpc, ZkResult};
use crate::error::map_error;
use crate::floor::{CREATE_ATTEMPTS, parse_offset};
use crate::keys::{KEEPER, Znode, keeper_path, lock_node_prefix};
use crate::token::{TokenSource, cversion_token, czxid_token, with_offset};

/// How long to wait before trying again after a failed call while queued.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// ZooKeeper's session timeout is an `i32` of milliseconds.
const MAX_SESSION_MILLIS: u64 = i32::MAX as u64;

/// A lock node created by an acquire, in its TTL class's session.
pub(crate) struct Queued {
    pub(crate) client: zk::Client,
    dir: String,
    name: String,
    pub(crate) token: FencingToken,
    /// The request, with the TTL the session allows.
    pub(crate) request: LeaseRequest,
    /// When the transaction that created the node was sent.
    pub(crate) sent: Instant,
    /// Whether the node was the resource znode's only child when created:
    /// then it holds, with no read of the queue.
    pub(crate) alone: bool,
}

impl Queued {
    pub(crate) fn path(&self) -> String {
        format!("{}/{}", self.dir, self.name)
    }

    /// Leaves the queue: deletes the node now, or else in the background
    /// (in a shared session nothing else would).
    pub(crate) async fn leave(self, rpc: &Rpc) {
        let path = self.path();
        match rpc.timed(self.client.delete(&path, None)).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => {
                tracing::debug!(error = %e, %path, "deleting a lock node failed; trying again in the background");
                rpc.reap(self.client, Reap::Path(path));
            }
        }
    }

    fn lost(&self) -> Error {
        Error::LeaseLost {
            resource: self.request.resource.clone(),
            token: self.token,
        }
    }
}

/// What the transaction creating a lock node answered.
struct Created {
    /// The lock node's name (`_f_<nonce>-lock-NNNNNNNNNN`).
    name: String,
    /// When the transaction was sent.
    sent: Instant,
    /// The resource znode's child count right after the create.
    children: i32,
    /// The lock node's creation zxid.
    czxid: i64,
    /// The resource znode's `cversion` right after the create.
    cversion: i32,
    /// The resource's floor offset the create was checked against.
    offset: u64,
}

/// A lock node as read back: its name, creation zxid and data (empty if
/// its ACL does not let us read it: another client's).
pub(crate) struct LockNode {
    pub(crate) name: String,
    pub(crate) czxid: i64,
    pub(crate) data: Vec<u8>,
}

/// Creates a lease's lock node under `dir`, in the session of its TTL
/// class.
pub(crate) async fn enqueue(rpc: &Rpc, znode: Znode, request: &LeaseRequest) -> Result<Queued> {
    let source = znode.source;
    request.validate(rpc.session_timeouts().0)?;
    // The session timeout goes on the wire as an i32 of milliseconds
    // (the client casts, so a larger one would wrap): refuse a TTL that
    // does not fit rather than ask for a wrapped one. Rounded up, so
    // the session is never shorter than the lease.
    let millis = request.ttl_millis_ceil();
    if millis > MAX_SESSION_MILLIS {
        return Err(Error::invalid_input(format!(
            "ttl {:?} is above ZooKeeper's largest session timeout, {MAX_SESSION_MILLIS} ms (an i32)",
            request.ttl
        )));
    }
    let client = rpc.lease_session(Duration::from_millis(millis)).await?;
    let mut request = request.clone();
    request.ttl = request.ttl.min(client.session_timeout());
    let holder = request.holder.as_str().as_bytes();
    // In the node's name, to find it should the create's answer be lost
    // (Curator's "protected" mode): the session outlives this call.
    let nonce = format!("{:016x}", rand::random::<u64>());
    let mut created = create_lock_node(rpc, &client, &znode, holder, &nonce).await;
    if created.as_ref().err() == Some(&zk::Error::NoNode) {
        rpc.make_resource(&client, &znode).await?;
        created = create_lock_node(rpc, &client, &znode, holder, &nonce).await;
    }
    let dir = znode.dir;
    let created = match created {
        Ok(created) => created,
        Err(e) => {
            let e = map_error(e, Call::write("create the lock node"));
            if matches!(e, Error::OutcomeUnknown { .. }) {
                rpc.reap(client, Reap::Nonce { dir, nonce });
            }
            return Err(e);
        }
    };
    let mut queued = Queued {
        client,
        dir,
        name: created.name,
        token: FencingToken::ZERO,
        request,
        sent: created.sent,
        // The keeper and ours (the create checked the keeper is there).
        alone: created.children == 2,
    };
    let token = match source {
        TokenSource::Czxid => with_offset(czxid_token(created.czxid)?, created.offset),
        TokenSource::ParentCversion => {
            match with_offset(cversion_token(created.cversion)?, created.offset) {
                Ok(token) => {
                    // Record the token in the node, for `holder`.
                    let data = format!("{}\n{token}", queued.request.holder);
                    rpc.timed(
                        queued
                            .client
                            .set_data(&queued.path(), data.as_bytes(), Some(0)),
                    )
                    .await
                    .map(|_| token)
                    .map_err(|e| map_error(e, Call::write("record the token in the lock node")))
                }
                Err(e) => Err(e),
            }
        }
    };
    match token {
        Ok(token) => {
            queued.token = token;
            Ok(queued)
        }
        Err(e) => {
            queued.leave(rpc).await;
            Err(e)
        }
    }
}

/// Creates `{dir}/_f_<nonce>-lock-NNNNNNNNNN` (ephemeral, sequential) in
/// `client`'s session, in one transaction with a write of the resource
/// znode's data (its floor offset, unchanged) at the version last seen:
/// so every create bumps that version, a floor can be raised only when no
/// create came between (see [`crate::floor::raise`]), and the transaction
/// answers with the resource znode's `cversion` and child count right
/// after our create and its new `mzxid`, which is our node's czxid (one
/// transaction, one zxid). The version comes from our last create on the
/// resource (no read) while no other client's create came between ours,
/// else from a read. The transaction also checks the prefix znode's
/// version as it was when the resource znode was read: a removal changes
/// it, so a znode removed and made again since (its version maybe back
/// where it was, its floor maybe another) is read again, never written
/// over with what the old one held.
async fn create_lock_node(
    rpc: &Rpc,
    client: &zk::Client,
    znode: &Znode,
    holder: &[u8],
    nonce: &str,
) -> ZkResult<Created> {
    let dir = znode.dir.as_str();
    let node_prefix = format!("{dir}/{}", lock_node_prefix(nonce));
    let keeper = keeper_path(dir);
    let options = zk::CreateMode::EphemeralSequential.with_acls(rpc.access().acls());
    let known = rpc.known_resource(dir);
    let mut guess = known.clone().filter(|k| k.trusted);
    for attempt in 0..CREATE_ATTEMPTS {
        let (read, guessed) = match guess.take() {
            Some(k) => (k, true),
            None => {
                let read = rpc.read_resource(client, znode, false).await?;
                // No resource znode: NoNode, and the caller makes it.
                let resource = read.resource.ok_or(zk::Error::NoNode)?;
                let known = Known {
                    data: resource.data,
                    version: resource.stat.version,
                    prefix_version: read.prefix_version,
                    trusted: false,
                };
                (known, false)
            }
        };
        let (data, version) = (read.data, read.version);
        let offset = parse_offset(&data)?;
        let mut writer = client.new_multi_writer();
        writer.add_check_version(&znode.prefix, read.prefix_version)?;
        // No keeper (a resource znode made before it, or by another
        // client): NoNode, and the caller makes it.
        writer.add_check_version(&keeper, -1)?;
        writer.add_create(&node_prefix, holder, &options)?;
        writer.add_set_data(dir, &data, Some(version))?;
        let sent = Instant::now();
        let committed = rpc
            .timed(async { writer.commit().await.map_err(zk::Error::from) })
            .await;
        let results = match committed {
            Ok(results) => results,
            Err(zk::Error::BadVersion) => {
                // Another create (or a floor, or a removal) came first:
                // read again.
                rpc.remember_resource(dir, None);
                tokio::time::sleep(Duration::from_millis(2 * u64::from(attempt))).await;
                continue;
            }
            Err(e) => {
                rpc.remember_resource(dir, None);
                return Err(e);
            }
        };
        // One transaction, one zxid: the resource znode's new mzxid is
        // our node's czxid. (ZooKeeper 3.8 answers a create inside a
        // multi with an invalid stat, ZOOKEEPER-4026.)
        let mut created = None;
        let mut parent = None;
        for result in results {
            match result {
                zk::MultiWriteResult::Create { path, .. } => created = Some(path),
                zk::MultiWriteResult::SetData { stat } => parent = Some(stat),
                _ => {}
            }
        }
        return match (created, parent) {
            (Some(path), Some(stat)) => {
                // Trusted next time if nobody else's create came between
                // our last one and this one.
                let trusted = guessed || known.as_ref().is_some_and(|k| k.version == version);
                rpc.remember_resource(
                    dir,
                    Some(Known {
                        data: data.clone(),
                        version: stat.version,
                        prefix_version: read.prefix_version,
                        trusted,
                    }),
                );
                Ok(Created {
                    name: path.rsplit('/').next().unwrap_or_default().to_owned(),
                    sent,
                    children: stat.num_children,
                    czxid: stat.mzxid,
                    cversion: stat.cversion,
                    offset,
                })
            }
            _ => Err(zk::Error::UnexpectedError(
                "a lock-node transaction answered without its results".into(),
            )),
        };
    }
    Err(zk::Error::Throttled)
}

/// The children of `dir`, ours and other clients', read through
/// `client`, in creation order (by `czxid`: the sequence suffix wraps).
/// With them, the resource's floor offset (read in the same multi-read
/// as the nodes' data: every node there was created with it).
pub(crate) async fn lock_nodes(
    rpc: &Rpc,
    client: &zk::Client,
    dir: &str,
) -> ZkResult<(u64, Vec<LockNode>)> {
    let names = lock_names(rpc, client, dir).await?;
    read_lock_nodes(rpc, client, dir, names).await
}

/// The names of the children of `dir` but its keeper, in no order; none
/// if `dir` is gone. Not only ours (`lock-…`): another client's lock node
/// counts too.
async fn lock_names(rpc: &Rpc, client: &zk::Client, dir: &str) -> ZkResult<Vec<String>> {
    match rpc.timed(client.list_children(dir)).await {
        Ok(mut children) => {
            children.retain(|name| name != KEEPER);
            Ok(children)
        }
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// [`lock_nodes`] for nodes already listed.
async fn read_lock_nodes(
    rpc: &Rpc,
    client: &zk::Client,
    dir: &str,
    names: Vec<String>,
) -> ZkResult<(u64, Vec<LockNode>)> {
    if names.is_empty() {
        return Ok((0, Vec::new()));
    }
    let mut reader = client.new_multi_reader();
    reader.add_get_data(dir)?;
    for name in &names {
        reader.add_get_data(&format!("{dir}/{name}"))?;
    }
    let mut results = rpc.timed(reader.commit()).await?.into_iter();
    let offset = match results.next() {
        Some(zk::MultiReadResult::Data { data, .. }) => parse_offset(&data)?,
        _ => return Ok((0, Vec::new())),
    };
    let mut nodes = Vec::with_capacity(names.len());
    for (name, result) in names.into_iter().zip(results) {
        match result {
            // Persistent: the znode of a resource below this one.
            zk::MultiReadResult::Data { stat, .. } if stat.ephemeral_owner == 0 => {}
            zk::MultiReadResult::Data { data, stat } => nodes.push(LockNode {
                name,
                czxid: stat.czxid,
                data,
            }),
            zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            } => {} // deleted since the listing
            _ => {
                // Another client's node that its ACL keeps us from reading
                // (Curator with an ACL provider): `exists` needs no
                // permission, and its czxid places it all the same.
                let path = format!("{dir}/{name}");
                if let Some(stat) = rpc.timed(client.check_stat(&path)).await?
                    && stat.ephemeral_owner != 0
                {
                    nodes.push(LockNode {
                        name,
                        czxid: stat.czxid,
                        data: Vec::new(),
                    });
                }
            }
        }
    }
    nodes.sort_by_key(|n| n.czxid);
    Ok((offset, nodes))
}

/// Where our node stands: `Ok(None)` if first, else the node ahead.
pub(crate) async fn ahead_of(rpc: &Rpc, q: &Queued) -> Result<Option<String>> {
    let lost_or_failed = |e| {
        map_error(
            e,
            Call::read("list the lock nodes").on_lease(&q.request.resource, q.token),
        )
    };
    let names = lock_names(rpc, &q.client, &q.dir)
        .await
        .map_err(lost_or_failed)?;
    if !names.contains(&q.name) {
        // Our node is gone: the session expired (or was closed).
        return Err(q.lost());
    }
    if names.len() == 1 {
        // Alone in the queue: first, with no need to read the order.
        return Ok(None);
    }
    let (_, nodes) = read_lock_nodes(rpc, &q.client, &q.dir, names)
        .await
        .map_err(lost_or_failed)?;
    let Some(index) = nodes.iter().position(|n| n.name == q.name) else {
        // Our node is gone: the session expired (or was closed).
        return Err(q.lost());
    };
    Ok(index.checked_sub(1).map(|i| nodes[i].name.clone()))
}

/// An acquire's time budget.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attempt {
    started: Instant,
    give_up: Instant,
}

impl Attempt {
    /// An acquire started at `started` that waits at most `wait`.
    pub(crate) fn new(started: Instant, wait: Duration) -> Self {
        Self {
            started,
            give_up: fencing_core::adapter::give_up_at(started, wait),
        }
    }

    fn is_over(&self) -> bool {
        Instant::now() >= self.give_up
    }

    fn timeout(&self, resource: &str) -> Error {
        Error::Timeout {
            operation: format!("acquire {resource:?}"),
            after: self.started.elapsed(),
        }
    }
}

/// Waits for the node ahead to go, re-reading the queue after each
/// change; returns when our node was seen first (the session was alive
/// then).
pub(crate) async fn wait_turn(rpc: &Rpc, q: &Queued, attempt: Attempt) -> Result<Instant> {
    let timeout = || attempt.timeout(&q.request.resource);
    loop {
        let sent = Instant::now();
        let ahead = match ahead_of(rpc, q).await {
            Ok(ahead) => ahead,
            Err(e) if e.is_retryable() && !attempt.is_over() => {
                tracing::debug!(error = %e, "reading the lock queue failed; trying again");
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            Err(e) if e.is_retryable() => return Err(timeout()),
            Err(e) => return Err(e),
        };
        let Some(ahead) = ahead else { return Ok(sent) };
        let path = format!("{}/{ahead}", q.dir);
        match rpc.timed(q.client.check_and_watch_stat(&path)).await {
            Ok((None, _)) => {}
            Ok((Some(_), watcher)) => {
                tokio::select! {
                    _ = watcher.changed() => {}
                    () = tokio::time::sleep_until(attempt.give_up.into()) => return Err(timeout()),
                }
            }
            Err(e) => {
                let e = map_error(
                    e,
                    Call::read("watch the node ahead").on_lease(&q.request.resource, q.token),
                );
                if !e.is_retryable() {
                    return Err(e);
                }
                if attempt.is_over() {
                    return Err(timeout());
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}
