//! The ZooKeeper issuer: the lock recipe on ephemeral sequential znodes,
//! one session per lease, with the znode's `czxid` (or the parent's
//! `cversion`) as the fencing token.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fencing_core::{
    Error, FencingToken, HolderId, Holding, Lease, LeaseRequest, Result, TokenIssuer,
};
use tokio::task::JoinHandle;
use zookeeper_client as zk;

use crate::error::{BACKEND, Op, map_error};

/// The znode under which every resource lives when no prefix is given.
pub const DEFAULT_PREFIX: &str = "/fencing";

/// Lock nodes are `lock-<sequence>` children of the resource's znode.
const LOCK_PREFIX: &str = "lock-";

type ZkResult<T> = std::result::Result<T, zk::Error>;

/// How often a create may lose the race for the resource znode's version
/// to other creates before giving up (retryable).
const CREATE_ATTEMPTS: u32 = 50;

const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Where a lease's fencing token comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TokenSource {
    /// The lock znode's `czxid`: the zxid of the transaction that created
    /// it, `epoch << 32 | counter`. Cluster-wide and monotonic, also
    /// across leader elections (a new leader starts a higher epoch). Shared
    /// by every resource: tokens of one resource jump by whatever happened
    /// elsewhere in between, and they are large (above 2³²). Right for
    /// almost everyone; the default.
    #[default]
    Czxid,
    /// The resource znode's `cversion` right after our lock node was
    /// created (read in the same transaction): it counts child creates
    /// *and* deletes of that one znode, so tokens are small and per
    /// resource; they advance by 2 per uncontended grant (our create, our
    /// delete). Right when a store keeps tokens in a narrow column or a
    /// person reads them. It resets if the resource znode is deleted and
    /// recreated, so **never delete resource znodes** (this crate never
    /// does); it is a signed 32-bit counter, and a wrapped value is refused
    /// ([`Error::UnsafeConfiguration`]) rather than let a token go
    /// backwards. (Not the sequence suffix of the node's name: on
    /// ZooKeeper 3.8 that counts creates only, and it wraps too,
    /// ZOOKEEPER-2944.) Costs one more write per acquire: the token is
    /// stored in the lock node for [`holder`](TokenIssuer::holder).
    ParentCversion,
}

/// A [`TokenIssuer`] on ZooKeeper.
///
/// Each acquire opens **its own ZooKeeper session**, with a session timeout
/// equal to the lease's TTL (as the server allows: it negotiates within
/// `[2, 20] × tickTime`), and creates an ephemeral sequential znode
/// `{prefix}/{resource}/lock-NNNNNNNNNN` holding the holder id. The holder
/// is the lock node with the lowest `czxid`; a waiter watches only the node
/// just ahead of it (an exists-watch: no herd). The lease *is* that
/// session:
///
/// - **Renew** checks that the session is alive and the node still exists
///   (owned by the session), and moves the lease's deadline on by its TTL.
/// - A holder that **stops renewing** loses the lease at its deadline: the
///   issuer closes the session then, and ZooKeeper deletes the node. (A
///   session's own heartbeats would otherwise keep it alive forever.)
/// - A holder whose **process stops** (GC pause, SIGSTOP, partition) loses
///   the session when ZooKeeper stops hearing from it for the session
///   timeout; the node goes with it, and every later call on the lease
///   fails with [`Error::LeaseLost`].
/// - **Release** deletes the node and closes the session.
///
/// The lease's TTL is the requested one, shortened to the negotiated
/// session timeout if the server grants less (above `20 × tickTime`), so
/// the local deadline stays conservative. [`min_ttl`](TokenIssuer::min_ttl)
/// is the server's minimum session timeout, learned at connect.
///
/// Leases can be renewed and released only through the issuer (or a clone
/// of it) that granted them: the session lives here.
///
/// The sequence suffix of a lock node is a signed 32-bit counter that
/// wraps (ZOOKEEPER-2944); ordering therefore uses `czxid`, never the name.
#[derive(Clone)]
pub struct ZkIssuer {
    inner: Arc<Inner>,
}

struct Inner {
    connect_string: String,
    /// The issuer's own session: holder lookups and creating resource
    /// znodes. Replaced when it expires (e.g. after this process stopped).
    client: Mutex<zk::Client>,
    prefix: String,
    token_source: TokenSource,
    min_session: Duration,
    max_session: Duration,
    operation_timeout: Duration,
    held: Mutex<HashMap<(String, u64), Arc<Held>>>,
}

impl fmt::Debug for ZkIssuer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkIssuer")
            .field("connect_string", &self.inner.connect_string)
            .field("prefix", &self.inner.prefix)
            .field("token_source", &self.inner.token_source)
            .field(
                "session_timeouts",
                &(self.inner.min_session..=self.inner.max_session),
            )
            .finish_non_exhaustive()
    }
}

/// A granted lease's session, closed by its watchdog at the deadline
/// unless renewed.
struct Held {
    path: String,
    /// Checked with the token: a `Lease` rebuilt with the token but another
    /// holder id must not renew or release this one.
    holder: HolderId,
    session: zk::SessionId,
    ttl: Duration,
    state: Mutex<HeldState>,
    watchdog: Mutex<Option<JoinHandle<()>>>,
}

struct HeldState {
    /// `None` once the session is closed.
    client: Option<zk::Client>,
    deadline: Instant,
}

impl Held {
    /// The session's client, if the lease is still live by the local clock.
    fn live_client(&self) -> Option<zk::Client> {
        let mut state = self.state.lock().expect("poisoned");
        if Instant::now() >= state.deadline {
            state.client = None; // closes the session
        }
        state.client.clone()
    }

    fn close(&self) {
        self.state.lock().expect("poisoned").client = None;
        if let Some(watchdog) = self.watchdog.lock().expect("poisoned").take() {
            watchdog.abort();
        }
    }
}

/// A lock node created by an acquire, in its own session.
struct Queued {
    client: zk::Client,
    dir: String,
    name: String,
    token: FencingToken,
    /// The request, with the TTL the session allows.
    request: LeaseRequest,
}

impl Queued {
    fn path(&self) -> String {
        format!("{}/{}", self.dir, self.name)
    }

    fn lost(&self) -> Error {
        Error::LeaseLost {
            resource: self.request.resource.clone(),
            token: self.token,
        }
    }
}

/// A lock node as read back: its name, creation zxid and data.
struct LockNode {
    name: String,
    czxid: i64,
    data: Vec<u8>,
}

impl ZkIssuer {
    /// Connects to ZooKeeper (`host:port[,host:port…]`), learns the
    /// server's session-timeout bounds and creates the prefix znode.
    ///
    /// # Errors
    /// A retryable [`Error::Backend`] if no server answers.
    pub async fn connect(connect_string: &str) -> Result<Self> {
        Self::connect_with(connect_string, DEFAULT_PREFIX, TokenSource::default()).await
    }

    /// Like [`connect`](Self::connect), with a prefix znode (e.g.
    /// `"/locks"`) and a [`TokenSource`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad prefix; a retryable
    /// [`Error::Backend`] if no server answers.
    pub async fn connect_with(
        connect_string: &str,
        prefix: &str,
        token_source: TokenSource,
    ) -> Result<Self> {
        let prefix = normalize_prefix(prefix)?;
        let timeout = DEFAULT_OPERATION_TIMEOUT;
        // Ask for an hour: the server answers with its maxSessionTimeout.
        let client = session(connect_string, Duration::from_secs(3600), timeout).await?;
        let max_session = client.session_timeout();
        let min_session = probe_min_session(connect_string, max_session).await;
        let issuer = Self {
            inner: Arc::new(Inner {
                connect_string: connect_string.to_owned(),
                client: Mutex::new(client),
                prefix,
                token_source,
                min_session,
                max_session,
                operation_timeout: timeout,
                held: Mutex::new(HashMap::new()),
            }),
        };
        issuer.mkdir(&issuer.client(), &issuer.inner.prefix).await?;
        Ok(issuer)
    }

    /// The connect string (`host:port[,host:port…]`).
    pub(crate) fn connect_string(&self) -> &str {
        &self.inner.connect_string
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
        (self.inner.min_session, self.inner.max_session)
    }

    /// The issuer's own ZooKeeper client (not a lease's session).
    pub fn client(&self) -> zk::Client {
        self.inner.client.lock().expect("poisoned").clone()
    }

    /// The issuer's own client, with a new session if the old one ended.
    async fn live_main_client(&self) -> Result<zk::Client> {
        let current = self.client();
        if !matches!(
            current.state(),
            zk::SessionState::Expired | zk::SessionState::Closed | zk::SessionState::AuthFailed
        ) {
            return Ok(current);
        }
        let fresh = session(
            &self.inner.connect_string,
            Duration::from_secs(3600),
            self.inner.operation_timeout,
        )
        .await?;
        *self.inner.client.lock().expect("poisoned") = fresh.clone();
        Ok(fresh)
    }

    /// The znode of a resource: `{prefix}/{escaped resource}`.
    pub fn resource_path(&self, resource: &str) -> String {
        format!("{}/{}", self.inner.prefix, escape_component(resource))
    }

    async fn timed<T>(&self, call: impl Future<Output = ZkResult<T>>) -> ZkResult<T> {
        tokio::time::timeout(self.inner.operation_timeout, call)
            .await
            .unwrap_or(Err(zk::Error::Timeout))
    }

    /// Creates `path` and its parents as persistent znodes (never deleted).
    async fn mkdir(&self, client: &zk::Client, path: &str) -> Result<()> {
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match self.timed(client.mkdir(path, &options)).await {
            Ok(()) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(map_error(e, Op::read("create the resource znode"))),
        }
    }

    /// Opens a session for a lease and creates its lock node.
    async fn enqueue(&self, request: &LeaseRequest) -> Result<Queued> {
        request.validate(self.inner.min_session)?;
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
        let wanted = Duration::from_millis(millis)
            .max(self.inner.min_session)
            .min(self.inner.max_session);
        let client = session(
            &self.inner.connect_string,
            wanted,
            self.inner.operation_timeout,
        )
        .await?;
        let mut request = request.clone();
        request.ttl = request.ttl.min(client.session_timeout());
        let dir = self.resource_path(&request.resource);
        let prefix = format!("{dir}/{LOCK_PREFIX}");
        let holder = request.holder.as_str().as_bytes();
        let mut created = self.create_lock_node(&client, &dir, &prefix, holder).await;
        if created.as_ref().err() == Some(&zk::Error::NoNode) {
            self.mkdir(&client, &dir).await?;
            created = self.create_lock_node(&client, &dir, &prefix, holder).await;
        }
        // On any failure the session is dropped here, closing it: a node it
        // may have created goes with it.
        let (name, czxid, cversion, offset) =
            created.map_err(|e| map_error(e, Op::create("create the lock node")))?;
        let token = match self.inner.token_source {
            TokenSource::Czxid => with_offset(czxid_token(czxid)?, offset)?,
            TokenSource::ParentCversion => {
                let token = with_offset(cversion_token(cversion)?, offset)?;
                // Record the token in the node, for `holder`.
                let data = format!("{}\n{token}", request.holder);
                self.timed(client.set_data(&format!("{dir}/{name}"), data.as_bytes(), Some(0)))
                    .await
                    .map_err(|e| map_error(e, Op::read("record the token in the lock node")))?;
                token
            }
        };
        Ok(Queued {
            client,
            dir,
            name,
            token,
            request,
        })
    }

    /// Creates `{dir}/lock-NNNNNNNNNN` (ephemeral, sequential) in `client`'s
    /// session, in one transaction with a write of the resource znode's
    /// data (its floor offset, unchanged) at the version just read: so every
    /// create bumps that version, a floor can be raised only when no create
    /// came between (see [`TokenIssuer::raise_floor`]), and the transaction
    /// answers with the resource znode's `cversion` right after our create
    /// and its new `mzxid`, which is our node's czxid (one transaction, one
    /// zxid). Returns the node's name, its czxid, that cversion and the
    /// offset.
    async fn create_lock_node(
        &self,
        client: &zk::Client,
        dir: &str,
        prefix: &str,
        holder: &[u8],
    ) -> ZkResult<(String, i64, i32, u64)> {
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        for attempt in 0..CREATE_ATTEMPTS {
            let (data, stat) = self.timed(client.get_data(dir)).await?;
            let offset = parse_offset(&data)?;
            let mut writer = client.new_multi_writer();
            writer.add_create(prefix, holder, &options)?;
            writer.add_set_data(dir, &data, Some(stat.version))?;
            let committed = self
                .timed(async { writer.commit().await.map_err(zk::Error::from) })
                .await;
            let results = match committed {
                Ok(results) => results,
                Err(zk::Error::BadVersion) => {
                    // Another create (or a floor) came first: read again.
                    tokio::time::sleep(Duration::from_millis(2 * u64::from(attempt))).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            // One transaction, one zxid: the resource znode's new mzxid is
            // our node's czxid. (ZooKeeper 3.8 answers a create inside a
            // multi with an invalid stat, ZOOKEEPER-4026.)
            let mut created = None;
            let mut parent = None;
            for result in results {
                match result {
                    zk::MultiWriteResult::Create { path, .. } => created = Some(path),
                    zk::MultiWriteResult::SetData { stat } => {
                        parent = Some((stat.mzxid, stat.cversion));
                    }
                    _ => {}
                }
            }
            return match (created, parent) {
                (Some(path), Some((czxid, cversion))) => {
                    let name = path.rsplit('/').next().unwrap_or_default().to_owned();
                    Ok((name, czxid, cversion, offset))
                }
                _ => Err(zk::Error::UnexpectedError(
                    "a lock-node transaction answered without its results".into(),
                )),
            };
        }
        Err(zk::Error::Throttled)
    }

    /// The lock nodes under `dir`, read through `client`, in creation order
    /// (by `czxid`: the sequence suffix wraps).
    /// With them, the resource's floor offset (read in the same multi-read
    /// as the nodes' data: every node there was created with it).
    async fn lock_nodes(&self, client: &zk::Client, dir: &str) -> ZkResult<(u64, Vec<LockNode>)> {
        let children = match self.timed(client.list_children(dir)).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Ok((0, Vec::new())),
            Err(e) => return Err(e),
        };
        let names: Vec<String> = children
            .into_iter()
            .filter(|c| c.starts_with(LOCK_PREFIX))
            .collect();
        if names.is_empty() {
            return Ok((0, Vec::new()));
        }
        let mut reader = client.new_multi_reader();
        reader.add_get_data(dir)?;
        for name in &names {
            reader.add_get_data(&format!("{dir}/{name}"))?;
        }
        let mut results = self.timed(reader.commit()).await?.into_iter();
        let offset = match results.next() {
            Some(zk::MultiReadResult::Data { data, .. }) => parse_offset(&data)?,
            _ => return Ok((0, Vec::new())),
        };
        let mut nodes: Vec<LockNode> = names
            .into_iter()
            .zip(results)
            .filter_map(|(name, result)| match result {
                zk::MultiReadResult::Data { data, stat } => Some(LockNode {
                    name,
                    czxid: stat.czxid,
                    data,
                }),
                _ => None, // deleted since the listing
            })
            .collect();
        nodes.sort_by_key(|n| n.czxid);
        Ok((offset, nodes))
    }

    /// Where our node stands: `Ok(None)` if first, else the node ahead.
    async fn ahead_of(&self, q: &Queued) -> Result<Option<String>> {
        let (_, nodes) = self.lock_nodes(&q.client, &q.dir).await.map_err(|e| {
            map_error(
                e,
                Op::read("list the lock nodes").on_lease(&q.request.resource, q.token),
            )
        })?;
        let Some(index) = nodes.iter().position(|n| n.name == q.name) else {
            // Our node is gone: the session expired (or was closed).
            return Err(q.lost());
        };
        Ok(index.checked_sub(1).map(|i| nodes[i].name.clone()))
    }

    /// Makes a queued node a held lease, whose session the watchdog closes
    /// at the deadline unless renewed.
    fn hold(&self, q: Queued, alive_at: Instant) -> Lease {
        let lease = Lease::new(&q.request, q.token, alive_at);
        let held = Arc::new(Held {
            path: q.path(),
            holder: q.request.holder.clone(),
            session: q.client.session_id(),
            ttl: q.request.ttl,
            state: Mutex::new(HeldState {
                client: Some(q.client),
                deadline: lease.deadline(),
            }),
            watchdog: Mutex::new(None),
        });
        let watched = Arc::downgrade(&held);
        let watchdog = tokio::spawn(async move {
            loop {
                let Some(held) = watched.upgrade() else {
                    return;
                };
                let deadline = held.state.lock().expect("poisoned").deadline;
                drop(held);
                tokio::time::sleep_until(deadline.into()).await;
                let Some(held) = watched.upgrade() else {
                    return;
                };
                let mut state = held.state.lock().expect("poisoned");
                if Instant::now() >= state.deadline {
                    // Not renewed in time: end the session, and the node.
                    state.client = None;
                    return;
                }
            }
        });
        *held.watchdog.lock().expect("poisoned") = Some(watchdog);
        let mut map = self.inner.held.lock().expect("poisoned");
        map.retain(|_, h| h.state.lock().expect("poisoned").client.is_some());
        map.insert((lease.resource().to_owned(), lease.token().get()), held);
        lease
    }

    fn take_held(&self, lease: &Lease) -> Option<Arc<Held>> {
        let mut map = self.inner.held.lock().expect("poisoned");
        let key = (lease.resource().to_owned(), lease.token().get());
        if map.get(&key)?.holder != *lease.holder() {
            return None;
        }
        map.remove(&key)
    }

    fn held(&self, lease: &Lease) -> Option<Arc<Held>> {
        self.inner
            .held
            .lock()
            .expect("poisoned")
            .get(&(lease.resource().to_owned(), lease.token().get()))
            .filter(|held| held.holder == *lease.holder())
            .cloned()
    }

    /// Waits for the node ahead to go, re-reading the queue after each
    /// change; returns when our node was seen first (the session was alive
    /// then).
    async fn wait_turn(&self, q: &Queued, give_up: Instant, started: Instant) -> Result<Instant> {
        let timeout = || Error::Timeout {
            operation: format!("acquire {:?}", q.request.resource),
            after: started.elapsed(),
        };
        loop {
            let sent = Instant::now();
            let ahead = match self.ahead_of(q).await {
                Ok(ahead) => ahead,
                Err(e) if e.is_retryable() && Instant::now() < give_up => {
                    tracing::debug!(error = %e, "reading the lock queue failed; trying again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                Err(e) if e.is_retryable() => return Err(timeout()),
                Err(e) => return Err(e),
            };
            let Some(ahead) = ahead else { return Ok(sent) };
            let path = format!("{}/{ahead}", q.dir);
            let watch = self.timed(q.client.check_and_watch_stat(&path)).await;
            match watch {
                Ok((None, _)) => continue,
                Ok((Some(_), watcher)) => {
                    tokio::select! {
                        _ = watcher.changed() => continue,
                        () = tokio::time::sleep_until(give_up.into()) => return Err(timeout()),
                    }
                }
                Err(e) => {
                    let e = map_error(
                        e,
                        Op::read("watch the node ahead").on_lease(&q.request.resource, q.token),
                    );
                    if !e.is_retryable() {
                        return Err(e);
                    }
                    if Instant::now() >= give_up {
                        return Err(timeout());
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
    }
}

#[async_trait]
impl TokenIssuer for ZkIssuer {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn min_ttl(&self) -> Duration {
        self.inner.min_session
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
        let q = self.enqueue(request).await?;
        let sent = Instant::now();
        match self.ahead_of(&q).await? {
            None => Ok(Some(self.hold(q, sent))),
            Some(_) => {
                // Held by someone else: leave the queue (closing the session
                // would remove the node too, but not at once).
                if let Err(e) = self.timed(q.client.delete(&q.path(), None)).await {
                    tracing::debug!(error = %e, "deleting a refused lock node failed; closing its session removes it");
                }
                Ok(None)
            }
        }
    }

    async fn acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Lease> {
        let started = Instant::now();
        let q = self.enqueue(request).await?;
        // On an error the session is dropped, closing it and its node.
        let alive_at = self.wait_turn(&q, started + wait, started).await?;
        Ok(self.hold(q, alive_at))
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let lost = || Error::LeaseLost {
            resource: lease.resource().to_owned(),
            token: lease.token(),
        };
        let held = self.held(lease).ok_or_else(lost)?;
        let sent = Instant::now();
        let client = held.live_client().ok_or_else(lost)?;
        let stat = self
            .timed(client.check_stat(&held.path))
            .await
            .map_err(|e| {
                map_error(
                    e,
                    Op::read("check the lock node").on_lease(lease.resource(), lease.token()),
                )
            })?;
        match stat {
            Some(stat) if stat.ephemeral_owner == held.session.0 => {
                let mut state = held.state.lock().expect("poisoned");
                if state.client.is_none() {
                    return Err(lost());
                }
                state.deadline = sent + held.ttl;
                Ok(lease.renewed(sent))
            }
            _ => {
                held.close();
                Err(lost())
            }
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let lost = || Error::LeaseLost {
            resource: lease.resource().to_owned(),
            token: lease.token(),
        };
        let held = self.take_held(lease).ok_or_else(lost)?;
        let Some(client) = held.live_client() else {
            held.close();
            return Err(lost());
        };
        match self.timed(client.delete(&held.path, None)).await {
            Ok(()) => {
                held.close();
                Ok(())
            }
            Err(e) => {
                let e = map_error(
                    e,
                    Op::read("delete the lock node").on_lease(lease.resource(), lease.token()),
                );
                if e.is_retryable() {
                    // Still ours: keep it so the caller can try again.
                    self.inner
                        .held
                        .lock()
                        .expect("poisoned")
                        .insert((lease.resource().to_owned(), lease.token().get()), held);
                } else {
                    held.close();
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
    /// [`Error::InvalidInput`] while the resource is held or waited for.
    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        let client = self.live_main_client().await?;
        let dir = self.resource_path(resource);
        self.mkdir(&client, &dir).await?;
        let read = |e| map_error(e, Op::read("read the resource znode"));
        for _ in 0..CREATE_ATTEMPTS {
            let mut reader = client.new_multi_reader();
            reader.add_get_data(&dir).map_err(read)?;
            reader.add_get_children(&dir).map_err(read)?;
            let mut results = self.timed(reader.commit()).await.map_err(read)?.into_iter();
            let (
                Some(zk::MultiReadResult::Data { data, stat }),
                Some(zk::MultiReadResult::Children { children }),
            ) = (results.next(), results.next())
            else {
                return Err(Error::backend(
                    BACKEND,
                    true,
                    format!("could not read {dir}"),
                ));
            };
            if children.iter().any(|c| c.starts_with(LOCK_PREFIX)) {
                return Err(Error::invalid_input(format!(
                    "{resource:?} is held or waited for; raise its floor while it is free"
                )));
            }
            let offset = parse_offset(&data).map_err(read)?;
            // The next create's token source is above what this snapshot shows.
            let below_next = match self.inner.token_source {
                TokenSource::Czxid => stat.czxid.max(stat.mzxid).max(stat.pzxid),
                TokenSource::ParentCversion => i64::from(stat.cversion),
            };
            let below_next = u64::try_from(below_next).unwrap_or(0);
            let needed = floor.get().saturating_sub(below_next);
            if needed <= offset {
                return Ok(());
            }
            if needed > MAX_OFFSET {
                return Err(Error::TokenOutOfRange {
                    token: floor,
                    max: FencingToken::new(below_next.saturating_add(MAX_OFFSET)),
                });
            }
            match self
                .timed(client.set_data(&dir, needed.to_string().as_bytes(), Some(stat.version)))
                .await
            {
                Ok(_) => return Ok(()),
                Err(zk::Error::BadVersion) => {} // a create came first: look again
                Err(e) => return Err(map_error(e, Op::read("write the floor"))),
            }
        }
        Err(Error::Contention {
            key: dir,
            attempts: CREATE_ATTEMPTS,
        })
    }

    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        let dir = self.resource_path(resource);
        let client = self.live_main_client().await?;
        let (offset, nodes) = self
            .lock_nodes(&client, &dir)
            .await
            .map_err(|e| map_error(e, Op::read("list the lock nodes")))?;
        let Some(first) = nodes.into_iter().next() else {
            return Ok(None);
        };
        let unreadable = || {
            Error::backend(
                BACKEND,
                true,
                format!("lock node {dir}/{} holds no holder id (yet)", first.name),
            )
        };
        let data = std::str::from_utf8(&first.data).map_err(|_| unreadable())?;
        let (holder, token) = match self.inner.token_source {
            TokenSource::Czxid => (data, with_offset(czxid_token(first.czxid)?, offset)?),
            TokenSource::ParentCversion => {
                // `holder\ntoken`, written right after the create.
                let (holder, token) = data.rsplit_once('\n').ok_or_else(unreadable)?;
                (
                    holder,
                    token.parse::<FencingToken>().map_err(|_| unreadable())?,
                )
            }
        };
        let holder = HolderId::new(holder).map_err(|_| unreadable())?;
        Ok(Some(Holding { holder, token }))
    }
}

/// Asks for a 250 ms session: the server answers with its
/// minSessionTimeout (if that is below 250 ms we learn 250 ms, which only
/// errs on the long side). The client gives a session that long to be
/// established, so a busy server may miss it: try three times, then assume
/// ZooKeeper's default ratio (min = max / 10, i.e. 2 and 20 ticks).
async fn probe_min_session(connect_string: &str, max_session: Duration) -> Duration {
    for _ in 0..3 {
        if let Ok(probe) = session(
            connect_string,
            Duration::from_millis(250),
            Duration::from_secs(2),
        )
        .await
        {
            return probe.session_timeout();
        }
    }
    max_session / 10
}

/// Opens a session asking for `timeout`.
async fn session(
    connect_string: &str,
    timeout: Duration,
    operation_timeout: Duration,
) -> Result<zk::Client> {
    let connecting = zk::Client::connector()
        .with_session_timeout(timeout)
        .with_connection_timeout(
            operation_timeout
                .min(Duration::from_secs(2))
                .max(timeout * 2 / 5),
        )
        .with_fail_eagerly()
        .connect(connect_string);
    match tokio::time::timeout(operation_timeout, connecting).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(map_error(e, Op::read("open a session"))),
        Err(_) => Err(map_error(zk::Error::Timeout, Op::read("open a session"))),
    }
}

/// A resource znode's data: its floor offset, empty for none.
fn parse_offset(data: &[u8]) -> ZkResult<u64> {
    if data.is_empty() {
        return Ok(0);
    }
    std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| {
            zk::Error::UnexpectedError("a resource znode's data is not a floor offset".into())
        })
}

/// The largest floor offset `raise_floor` writes: a czxid (an `i64`; a
/// cversion is an `i32`) plus it still fits a `u64` token, so an accepted
/// floor can never make a later grant overflow.
const MAX_OFFSET: u64 = u64::MAX - i64::MAX as u64;

/// ZooKeeper's session timeout is an `i32` of milliseconds.
const MAX_SESSION_MILLIS: u64 = i32::MAX as u64;

/// A token plus the resource's floor offset. It cannot overflow for an
/// offset `raise_floor` wrote (at most [`MAX_OFFSET`]); a larger one (an
/// older version, a hand edit) is refused.
fn with_offset(token: FencingToken, offset: u64) -> Result<FencingToken> {
    token
        .get()
        .checked_add(offset)
        .map(FencingToken::new)
        .ok_or(Error::TokenOutOfRange {
            token: FencingToken::new(offset),
            max: FencingToken::new(MAX_OFFSET),
        })
}

fn czxid_token(czxid: i64) -> Result<FencingToken> {
    u64::try_from(czxid)
        .map(FencingToken::new)
        .map_err(|_| Error::backend(BACKEND, false, format!("negative czxid {czxid}")))
}

/// The resource znode's cversion after our create; it is a signed 32-bit
/// counter, and a value that wrapped would let tokens go backwards.
fn cversion_token(cversion: i32) -> Result<FencingToken> {
    match u64::try_from(cversion) {
        Ok(c) if c > 0 => Ok(FencingToken::new(c)),
        _ => Err(Error::UnsafeConfiguration {
            backend: BACKEND,
            reason: format!(
                "the resource znode's cversion wrapped ({cversion}; a signed 32-bit counter): its tokens would go \
                 backwards; use TokenSource::Czxid or a new resource name"
            ),
        }),
    }
}

/// `/fencing`, `fencing` and `/fencing/` all mean `/fencing`.
fn normalize_prefix(prefix: &str) -> Result<String> {
    let trimmed = prefix.trim_matches('/');
    let bad = trimmed.is_empty()
        || trimmed
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == ".." || c.chars().any(needs_escape))
        || trimmed == "zookeeper"
        || trimmed.starts_with("zookeeper/");
    if bad {
        return Err(Error::invalid_input(format!(
            "bad ZooKeeper prefix {prefix:?}"
        )));
    }
    Ok(format!("/{trimmed}"))
}

/// Characters ZooKeeper refuses in a path, or that would make a resource
/// name more than one path component.
fn needs_escape(c: char) -> bool {
    matches!(c, '%' | '/' | '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
}

/// A resource name as one znode name: `%`, `/` and the characters
/// ZooKeeper refuses are percent-escaped (`jobs/a` → `jobs%2Fa`), so
/// resource `a` and resource `a/b` are siblings, never parent and child;
/// `.` and `..` become `%2E` and `%2E%2E`.
fn escape_component(resource: &str) -> String {
    if resource == "." || resource == ".." {
        return resource.replace('.', "%2E");
    }
    let mut out = String::with_capacity(resource.len());
    for c in resource.chars() {
        if needs_escape(c) {
            let mut buf = [0; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_are_one_component() {
        assert_eq!(escape_component("jobs/nightly"), "jobs%2Fnightly");
        assert_eq!(escape_component("50%"), "50%25");
        assert_eq!(escape_component(".."), "%2E%2E");
        assert_eq!(escape_component("a.b"), "a.b");
        assert_eq!(escape_component("tab\there"), "tab%09here");
        assert!(!escape_component("a/b").contains('/'));
    }

    #[test]
    fn prefixes_are_normalized_and_checked() {
        assert_eq!(normalize_prefix("fencing").unwrap(), "/fencing");
        assert_eq!(normalize_prefix("/a/b/").unwrap(), "/a/b");
        for bad in ["", "/", "a//b", "/zookeeper", "a/../b", "a%b"] {
            assert!(normalize_prefix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_czxid_plus_the_largest_offset_fits() {
        let top = czxid_token(i64::MAX).unwrap();
        assert_eq!(
            with_offset(top, MAX_OFFSET).unwrap(),
            FencingToken::new(u64::MAX)
        );
        assert!(matches!(
            with_offset(top, MAX_OFFSET + 1),
            Err(Error::TokenOutOfRange { .. })
        ));
    }

    #[test]
    fn cversion_tokens_refuse_a_wrapped_counter() {
        assert_eq!(cversion_token(1).unwrap(), FencingToken::new(1));
        assert_eq!(
            cversion_token(i32::MAX).unwrap(),
            FencingToken::new(2_147_483_647)
        );
        assert!(matches!(
            cversion_token(i32::MIN),
            Err(Error::UnsafeConfiguration { .. })
        ));
        assert!(cversion_token(0).is_err());
    }
}
