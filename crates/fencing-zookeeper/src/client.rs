//! Sessions and calls: the issuer's own session, one shared session per
//! TTL class for its leases, and every call bounded by the operation
//! timeout.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fencing_core::adapter::Call;
use fencing_core::{Error, Result};
use zookeeper_client as zk;

use crate::access::{Access, prefix_permissions};
use crate::error::{Failure, NAME, map_error};
use crate::floor::parse_offset;
use crate::keys::{CZXID_MARK, Znode, keeper_path};
use crate::token::TokenSource;

pub(crate) type ZkResult<T> = std::result::Result<T, zk::Error>;

/// The session timeout the issuer's own session asks for: the server
/// answers with its maxSessionTimeout.
const MAIN_SESSION: Duration = Duration::from_secs(3600);

/// The connect string, how sessions reach it, the issuer's own session
/// and the server's session-timeout bounds.
pub(crate) struct Rpc {
    connect_string: String,
    access: Access,
    timeout: Duration,
    /// The issuer's own session: holder lookups and creating resource
    /// znodes. Replaced when it expires (e.g. after this process stopped).
    main: Mutex<zk::Client>,
    /// The leases' sessions, one per negotiated timeout (in ms): every
    /// lease of one TTL class lives in the same session.
    leases: tokio::sync::Mutex<HashMap<u64, zk::Client>>,
    /// Resource znodes' data and version as our last create left them, so
    /// the next create on one needs no read first.
    resources: Mutex<HashMap<String, Known>>,
    /// Taken by each removal of an idle resource: one at a time.
    removals: tokio::sync::Mutex<()>,
    min_session: Duration,
    max_session: Duration,
}

impl Rpc {
    /// Opens the issuer's own session and learns the server's
    /// session-timeout bounds.
    pub(crate) async fn connect(
        connect_string: &str,
        access: Access,
        timeout: Duration,
    ) -> Result<Self> {
        let main = session(&access, connect_string, MAIN_SESSION, timeout).await?;
        let max_session = main.session_timeout();
        let min_session = probe_min_session(&access, connect_string, max_session).await;
        Ok(Self {
            connect_string: connect_string.to_owned(),
            access,
            timeout,
            main: Mutex::new(main),
            leases: tokio::sync::Mutex::default(),
            resources: Mutex::default(),
            removals: tokio::sync::Mutex::default(),
            min_session,
            max_session,
        })
    }

    pub(crate) fn connect_string(&self) -> &str {
        &self.connect_string
    }

    /// The turn of one removal of an idle resource: they go one at a
    /// time, since each changes the prefix's version and ACL.
    pub(crate) async fn removal_turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.removals.lock().await
    }

    /// How long one call may take.
    pub(crate) fn operation_timeout(&self) -> Duration {
        self.timeout
    }

    /// How sessions reach the servers, and the ACL of our znodes.
    pub(crate) fn access(&self) -> &Access {
        &self.access
    }

    /// The server's `(minSessionTimeout, maxSessionTimeout)`.
    pub(crate) fn session_timeouts(&self) -> (Duration, Duration) {
        (self.min_session, self.max_session)
    }

    /// The issuer's own client (not a lease's session).
    pub(crate) fn main(&self) -> zk::Client {
        self.main.lock().expect("poisoned").clone()
    }

    /// The issuer's own client, with a new session if the old one ended.
    pub(crate) async fn live_main(&self) -> Result<zk::Client> {
        let current = self.main();
        if !has_ended(&current) {
            return Ok(current);
        }
        let fresh = session(
            &self.access,
            &self.connect_string,
            MAIN_SESSION,
            self.timeout,
        )
        .await?;
        *self.main.lock().expect("poisoned") = fresh.clone();
        Ok(fresh)
    }

    /// The session for leases of a TTL class, asking for `timeout` (within
    /// the server's bounds): shared by every lease of that class, opened
    /// on first use and again once it ended (expired while this process
    /// was stopped, or closed with the runtime that opened it).
    pub(crate) async fn lease_session(&self, timeout: Duration) -> Result<zk::Client> {
        let wanted = timeout.max(self.min_session).min(self.max_session);
        let class = u64::try_from(wanted.as_millis()).unwrap_or(u64::MAX);
        let mut sessions = self.leases.lock().await;
        if let Some(client) = sessions.get(&class)
            && !has_ended(client)
        {
            return Ok(client.clone());
        }
        let client = session(&self.access, &self.connect_string, wanted, self.timeout).await?;
        sessions.insert(class, client.clone());
        Ok(client)
    }

    /// The resource znode `znode` (its data and stat, and its children if
    /// asked for) read in one request after the prefix znode (its data,
    /// the mark, and its data version, which counts removals). The prefix
    /// comes first: a write that checks the version read here is refused
    /// if a removal came after it, whatever the rest of the read saw.
    /// `NoNode` if the prefix is gone; `resource` is `None` if the
    /// resource znode is.
    pub(crate) async fn read_resource(
        &self,
        client: &zk::Client,
        znode: &Znode,
        with_children: bool,
    ) -> ZkResult<Snapshot> {
        let mut reader = client.new_multi_reader();
        reader.add_get_data(&znode.prefix)?;
        reader.add_get_data(&znode.dir)?;
        if with_children {
            reader.add_get_children(&znode.dir)?;
        }
        let mut results = self.timed(reader.commit()).await?.into_iter();
        let (mark, prefix) = match results.next() {
            Some(zk::MultiReadResult::Data { data, stat }) => (data, stat),
            Some(zk::MultiReadResult::Error { err }) => return Err(err),
            _ => return Err(unanswered()),
        };
        let (data, stat) = match results.next() {
            Some(zk::MultiReadResult::Data { data, stat }) => (data, stat),
            Some(zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            }) => {
                return Ok(Snapshot {
                    mark,
                    prefix_version: prefix.version,
                    resource: None,
                });
            }
            Some(zk::MultiReadResult::Error { err }) => return Err(err),
            _ => return Err(unanswered()),
        };
        let children = match results.next() {
            Some(zk::MultiReadResult::Children { children }) => children,
            Some(zk::MultiReadResult::Error { err }) => return Err(err),
            None if !with_children => Vec::new(),
            _ => return Err(unanswered()),
        };
        Ok(Snapshot {
            mark,
            prefix_version: prefix.version,
            resource: Some(ResourceRead {
                data,
                stat,
                children,
            }),
        })
    }

    /// A resource znode's data and version as our last create left them.
    pub(crate) fn known_resource(&self, dir: &str) -> Option<Known> {
        self.resources.lock().expect("poisoned").get(dir).cloned()
    }

    /// Remembers a resource znode's data and version (`None`: forget it).
    pub(crate) fn remember_resource(&self, dir: &str, known: Option<Known>) {
        let mut resources = self.resources.lock().expect("poisoned");
        match known {
            Some(known) => {
                if resources.len() >= KNOWN_RESOURCES && !resources.contains_key(dir) {
                    resources.clear(); // bounded; the next creates read again
                }
                resources.insert(dir.to_owned(), known);
            }
            None => {
                resources.remove(dir);
            }
        }
    }

    /// [`reap`] with the operation timeout.
    pub(crate) fn reap(&self, client: zk::Client, target: Reap) {
        reap(client, target, self.timeout);
    }

    /// Runs one call with the operation timeout.
    pub(crate) async fn timed<T>(&self, call: impl Future<Output = ZkResult<T>>) -> ZkResult<T> {
        within(self.timeout, call).await
    }

    /// Creates the prefix znode (and its parents) if needed, letting
    /// nobody delete its children: ZooKeeper checks a delete against the
    /// parent's ACL, and a resource znode deleted (`deleteall`, to clear a
    /// "stuck" lock) would come back with its cversion at 0 and no floor.
    /// With credentials, the prefix is our identity's alone. A prefix an
    /// earlier release created with every permission loses DELETE here
    /// (its other entries stay: `verify` reports one that anyone may
    /// write); if this session may not change its ACL, `verify` says so.
    ///
    /// A `token=czxid` issuer makes it with [`CZXID_MARK`] as its data; a
    /// `token=cversion` issuer refuses a prefix so marked, whose idle
    /// resource znodes may be removed (and with them the cversion its
    /// tokens would count from).
    pub(crate) async fn make_prefix(
        &self,
        client: &zk::Client,
        prefix: &str,
        source: TokenSource,
    ) -> Result<()> {
        // Each step takes "it exists" or "another changed it first" as done,
        // so a lost answer is merely retried.
        let failed = |e| map_error(e, Call::idempotent("create the prefix znode"));
        if let Some((parent, _)) = prefix.rsplit_once('/')
            && !parent.is_empty()
        {
            // The parents are a namespace others may share: open to
            // anyone, as before (they guard nothing of ours: a prefix with
            // resource znodes cannot be deleted, and a sibling is no harm).
            let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            match self.timed(client.mkdir(parent, &options)).await {
                Ok(()) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(failed(e)),
            }
        }
        let acl = self.access.prefix_acl();
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl));
        // A czxid prefix is made with a keeper, as a resource znode is
        // (one transaction: a marked prefix always has it): it can then
        // never be emptied and deleted, and its data version, which counts
        // removals, never starts again.
        let keeper = keeper_path(prefix);
        let keeper_options = zk::CreateMode::Persistent.with_acls(self.access.acls());
        let made = match source {
            TokenSource::Czxid => {
                let both = async {
                    let mut writer = client.new_multi_writer();
                    writer.add_create(prefix, CZXID_MARK, &options)?;
                    writer.add_create(&keeper, b"", &keeper_options)?;
                    writer.commit().await.map_err(zk::Error::from)
                };
                self.timed(both).await.map(drop)
            }
            TokenSource::ParentCversion => self
                .timed(client.create(prefix, b"", &options))
                .await
                .map(drop),
        };
        match made {
            Ok(()) => return Ok(()),
            Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(failed(e)),
        }
        if source == TokenSource::ParentCversion {
            let (data, _) = self.timed(client.get_data(prefix)).await.map_err(failed)?;
            if data == CZXID_MARK {
                return Err(Error::UnsafeConfiguration {
                    backend: NAME,
                    reason: format!(
                        "{prefix} was made by a czxid issuer, which may remove idle resource znodes: a \
                         removed name's cversion would start again at 0, and the tokens of a cversion \
                         issuer (TokenSource::ParentCversion) with it; give it a prefix of its own"
                    ),
                });
            }
        }
        let (acls, stat) = self.timed(client.get_acl(prefix)).await.map_err(failed)?;
        if !deletable(&acls) {
            return Ok(());
        }
        let kept: Vec<zk::Acl> = acls
            .iter()
            .map(|a| zk::Acl::new(a.permission() & prefix_permissions(), a.auth_id().clone()))
            .collect();
        match self
            .timed(client.set_acl(prefix, &kept, Some(stat.aversion)))
            .await
        {
            // BadVersion: another issuer changed it first.
            Ok(_) | Err(zk::Error::BadVersion) => Ok(()),
            Err(zk::Error::NoAuth) => {
                tracing::warn!(
                    prefix,
                    "cannot take DELETE off the prefix znode's ACL: its resource znodes can be deleted"
                );
                Ok(())
            }
            Err(e) => Err(failed(e)),
        }
    }

    /// Whether someone may delete the resource znodes under `prefix`.
    pub(crate) async fn resources_deletable(
        &self,
        client: &zk::Client,
        prefix: &str,
    ) -> Result<bool> {
        let (acls, _) = self
            .timed(client.get_acl(prefix))
            .await
            .map_err(|e| map_error(e, Call::read("read the prefix znode's ACL")))?;
        Ok(deletable(&acls))
    }

    /// Creates the resource znode (persistent, never deleted) with its
    /// keeper in one transaction, and the znodes above it should they be
    /// gone (the prefix as [`make_prefix`](Self::make_prefix) makes it;
    /// those between the prefix and a nested resource's znode, as Curator
    /// and kazoo make a lock path's parents, persistent, with the resource
    /// znodes' ACL, since one may be a resource's too); or, where the znode
    /// exists (made before the keeper was, or by another client: maybe a
    /// container), its keeper alone. A znode made new starts with the floor
    /// of where an earlier release kept the resource ([`Znode::legacy`]).
    pub(crate) async fn make_resource(&self, client: &zk::Client, znode: &Znode) -> Result<()> {
        let dir = znode.dir.as_str();
        let options = zk::CreateMode::Persistent.with_acls(self.access.acls());
        let keeper = keeper_path(dir);
        let floor = self.legacy_floor(client, znode).await?;
        let both = async || {
            let mut writer = client.new_multi_writer();
            writer.add_create(dir, floor.as_bytes(), &options)?;
            writer.add_create(&keeper, b"", &options)?;
            writer.commit().await.map_err(zk::Error::from)
        };
        let mut created = self.timed(both()).await;
        if created.as_ref().err() == Some(&zk::Error::NoNode) {
            self.make_prefix(client, &znode.prefix, znode.source)
                .await?;
            if let Some((parent, _)) = dir.rsplit_once('/')
                && parent != znode.prefix
            {
                // As the prefix, without DELETE: the resource znodes below
                // cannot be deleted either, until one of these is a lock
                // path of ours itself (see `lock_nodes_deletable`).
                let acl = self.access.prefix_acl();
                let between = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl));
                match self.timed(client.mkdir(parent, &between)).await {
                    Ok(()) | Err(zk::Error::NodeExists) => {}
                    // `NodeExists` counts as done: a lost answer is retried.
                    Err(e) => {
                        return Err(map_error(
                            e,
                            Call::idempotent("create the resource znode's parents"),
                        ));
                    }
                }
            }
            created = self.timed(both()).await;
        }
        let existed = created.as_ref().err() == Some(&zk::Error::NodeExists);
        let created = match created {
            Err(zk::Error::NodeExists) => self
                .timed(client.create(&keeper, b"", &options))
                .await
                .map(drop),
            other => other.map(drop),
        };
        // `NodeExists` counts as done (the znode is never deleted), so a
        // lost answer is merely retried.
        match created {
            Ok(()) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(map_error(e, Call::idempotent("create the resource znode"))),
        }
        if existed {
            self.lock_nodes_deletable(client, dir).await?;
        }
        Ok(())
    }

    /// A znode made between the prefix and a nested resource's lets
    /// nobody delete its children; made a resource itself, its lock nodes
    /// must be deletable: it gets the resource znodes' ACL (from then on,
    /// the resource znodes below it can be deleted by whoever may delete
    /// its lock nodes).
    async fn lock_nodes_deletable(&self, client: &zk::Client, dir: &str) -> Result<()> {
        // A versioned ACL change whose `BadVersion` counts as done: a lost
        // answer is merely retried.
        let failed = |e| {
            map_error(
                e,
                Call::idempotent("let the resource znode's lock nodes be deleted"),
            )
        };
        let (acls, stat) = self.timed(client.get_acl(dir)).await.map_err(failed)?;
        if deletable(&acls) {
            return Ok(());
        }
        match self
            .timed(client.set_acl(dir, &self.access.acls(), Some(stat.aversion)))
            .await
        {
            // BadVersion: another issuer changed it first.
            Ok(_) | Err(zk::Error::BadVersion) => Ok(()),
            Err(e) => Err(failed(e)),
        }
    }

    /// The floor offset a resource znode made new starts with: above every
    /// token the znode an earlier release kept the resource at gave (its
    /// floor; with `token=cversion` plus its cversion, the last token it
    /// gave or below). Empty (no floor) if there is none.
    async fn legacy_floor(&self, client: &zk::Client, znode: &Znode) -> Result<String> {
        let Some(legacy) = &znode.legacy else {
            return Ok(String::new());
        };
        let read = |e| {
            map_error(
                e,
                Call::read("read the resource's znode of an earlier release"),
            )
        };
        let (data, stat) = match self.timed(client.get_data(legacy)).await {
            Ok(found) => found,
            Err(zk::Error::NoNode) => return Ok(String::new()),
            Err(e) => return Err(read(e)),
        };
        let offset = parse_offset(&data).map_err(read)?;
        let carried = match znode.source {
            TokenSource::Czxid => offset,
            TokenSource::ParentCversion => {
                offset.saturating_add(u64::try_from(stat.cversion).unwrap_or(0))
            }
        };
        Ok(if carried == 0 {
            String::new()
        } else {
            carried.to_string()
        })
    }
}

/// A resource znode as our last create on it left it.
#[derive(Clone, Debug)]
pub(crate) struct Known {
    pub(crate) data: Vec<u8>,
    pub(crate) version: i32,
    /// The prefix znode's data version when the resource znode was read:
    /// it counts removals, so a resource znode removed and made again
    /// since, whose version may have come back to `version`, is not taken
    /// for this one.
    pub(crate) prefix_version: i32,
    /// Whether to create at this version without reading first: not while
    /// other clients' creates came between ours (a guess that is likely
    /// stale costs a refused transaction, itself a quorum write, on top of
    /// the read).
    pub(crate) trusted: bool,
}

/// What [`Rpc::read_resource`] read.
pub(crate) struct Snapshot {
    /// The prefix znode's data: [`CZXID_MARK`] or not.
    pub(crate) mark: Vec<u8>,
    /// The prefix znode's data version: it counts removals.
    pub(crate) prefix_version: i32,
    /// The resource znode, if it is there.
    pub(crate) resource: Option<ResourceRead>,
}

/// A resource znode as [`Rpc::read_resource`] read it.
pub(crate) struct ResourceRead {
    pub(crate) data: Vec<u8>,
    pub(crate) stat: zk::Stat,
    /// Empty unless asked for.
    pub(crate) children: Vec<String>,
}

fn unanswered() -> zk::Error {
    zk::Error::UnexpectedError("a read of the resource znode answered without its results".into())
}

/// How many resource znodes' versions [`Rpc::known_resource`] keeps.
const KNOWN_RESOURCES: usize = 10_000;

/// How long [`reap`] keeps trying: past any session timeout, so a
/// server that stays unreachable has expired the session (and its nodes)
/// by then.
const REAP_FOR: Duration = Duration::from_secs(600);

/// A lock node to delete: by path, or by the nonce in its name.
#[derive(Debug)]
pub(crate) enum Reap {
    Path(String),
    Nonce { dir: String, nonce: String },
}

/// Deletes one of our lock nodes whatever it takes: a node left behind in
/// a shared session would hold its resource for as long as the process
/// lives. Tries in the background until the node is gone or its session
/// has ended; gives up (loudly) only after [`REAP_FOR`].
pub(crate) fn reap(client: zk::Client, target: Reap, timeout: Duration) {
    tokio::spawn(async move {
        let started = Instant::now();
        let mut pause = Duration::from_millis(100);
        loop {
            if has_ended(&client) {
                return; // its nodes went with it
            }
            match reap_once(&client, &target, timeout).await {
                Ok(()) => return,
                Err(e) if started.elapsed() >= REAP_FOR => {
                    tracing::error!(?target, error = %e, "could not delete a lock node of a shared session: its resource stays held until this process exits");
                    return;
                }
                Err(e) => {
                    tracing::debug!(?target, error = %e, "deleting a lock node failed; trying again");
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    });
}

async fn reap_once(client: &zk::Client, target: &Reap, timeout: Duration) -> ZkResult<()> {
    let path = match target {
        Reap::Path(path) => path.clone(),
        Reap::Nonce { dir, nonce } => {
            // ZooKeeper answers one session's requests in order: this
            // listing comes after the lost create, if it was sent at all.
            let children = match within(timeout, client.list_children(dir)).await {
                Err(zk::Error::NoNode) => return Ok(()),
                children => children?,
            };
            match children.into_iter().find(|c| c.contains(nonce.as_str())) {
                Some(name) => format!("{dir}/{name}"),
                None => return Ok(()), // never created
            }
        }
    };
    match within(timeout, client.delete(&path, None)).await {
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        Err(e) => Err(e),
    }
}

async fn within<T>(timeout: Duration, call: impl Future<Output = ZkResult<T>>) -> ZkResult<T> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or(Err(zk::Error::Timeout))
}

/// Whether a session is over for good (its ephemeral nodes gone).
pub(crate) fn has_ended(client: &zk::Client) -> bool {
    matches!(
        client.state(),
        zk::SessionState::Expired | zk::SessionState::Closed | zk::SessionState::AuthFailed
    )
}

fn deletable(acls: &[zk::Acl]) -> bool {
    acls.iter()
        .any(|a| a.permission().has(zk::Permission::DELETE))
}

/// Asks for a 250 ms session: the server answers with its
/// minSessionTimeout (if that is below 250 ms we learn 250 ms, which only
/// errs on the long side). The client gives a session that long to be
/// established, so a busy server may miss it: try three times, then assume
/// ZooKeeper's default ratio (min = max / 10, i.e. 2 and 20 ticks).
async fn probe_min_session(
    access: &Access,
    connect_string: &str,
    max_session: Duration,
) -> Duration {
    for _ in 0..3 {
        if let Ok(probe) = session(
            access,
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

/// Opens a session asking for `timeout`. If none can be opened for want
/// of a connection, a handshake of our own tells whether TLS is why.
async fn session(
    access: &Access,
    connect_string: &str,
    timeout: Duration,
    operation_timeout: Duration,
) -> Result<zk::Client> {
    let connector = zk::Client::connector()
        .with_session_timeout(timeout)
        .with_connection_timeout(
            operation_timeout
                .min(Duration::from_secs(2))
                .max(timeout * 2 / 5),
        )
        .with_fail_eagerly();
    let connecting = access.connect(connector, connect_string);
    let e = match tokio::time::timeout(operation_timeout, connecting).await {
        Ok(Ok(client)) => return Ok(client),
        Ok(Err(e)) => e,
        Err(_) => zk::Error::Timeout,
    };
    let failure = match e {
        zk::Error::NoHosts | zk::Error::ConnectionLoss | zk::Error::Timeout => access
            .diagnose(connect_string)
            .await
            .unwrap_or(Failure::Zk(e)),
        e => Failure::Zk(e),
    };
    Err(map_error(failure, Call::read("open a session")))
}
