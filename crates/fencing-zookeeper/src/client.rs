//! Sessions and calls: the issuer's own session, a session per lease, and
//! every call bounded by the operation timeout.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use fencing_core::Result;
use fencing_core::adapter::Call;
use zookeeper_client as zk;

use crate::access::{Access, prefix_permissions};
use crate::error::{Failure, map_error};

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
            min_session,
            max_session,
        })
    }

    pub(crate) fn connect_string(&self) -> &str {
        &self.connect_string
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
        if !matches!(
            current.state(),
            zk::SessionState::Expired | zk::SessionState::Closed | zk::SessionState::AuthFailed
        ) {
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

    /// A session of its own for a lease, asking for `timeout` (within the
    /// server's bounds).
    pub(crate) async fn lease_session(&self, timeout: Duration) -> Result<zk::Client> {
        let wanted = timeout.max(self.min_session).min(self.max_session);
        session(&self.access, &self.connect_string, wanted, self.timeout).await
    }

    /// Runs one call with the operation timeout.
    pub(crate) async fn timed<T>(&self, call: impl Future<Output = ZkResult<T>>) -> ZkResult<T> {
        tokio::time::timeout(self.timeout, call)
            .await
            .unwrap_or(Err(zk::Error::Timeout))
    }

    /// Creates the prefix znode (and its parents) if needed, letting
    /// nobody delete its children: ZooKeeper checks a delete against the
    /// parent's ACL, and a resource znode deleted (`deleteall`, to clear a
    /// "stuck" lock) would come back with its cversion at 0 and no floor.
    /// With credentials, the prefix is our identity's alone. A prefix an
    /// earlier release created with every permission loses DELETE here
    /// (its other entries stay: `verify` reports one that anyone may
    /// write); if this session may not change its ACL, `verify` says so.
    pub(crate) async fn make_prefix(&self, client: &zk::Client, prefix: &str) -> Result<()> {
        let failed = |e| map_error(e, Call::read("create the prefix znode"));
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
        match self.timed(client.create(prefix, b"", &options)).await {
            Ok(_) => return Ok(()),
            Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(failed(e)),
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

    /// Creates the resource znode `dir` (persistent, never deleted), and
    /// the prefix above it should it be gone.
    pub(crate) async fn make_resource(&self, client: &zk::Client, dir: &str) -> Result<()> {
        let options = zk::CreateMode::Persistent.with_acls(self.access.acls());
        let mut created = self.timed(client.create(dir, b"", &options)).await;
        if created.as_ref().err() == Some(&zk::Error::NoNode)
            && let Some((prefix, _)) = dir.rsplit_once('/')
        {
            self.make_prefix(client, prefix).await?;
            created = self.timed(client.create(dir, b"", &options)).await;
        }
        match created {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(map_error(e, Call::read("create the resource znode"))),
        }
    }
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
