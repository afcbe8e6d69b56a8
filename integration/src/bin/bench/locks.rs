//! Lock services: acquire + release through the issuer against the
//! fewest raw calls the backend needs for a lock, through the same kind of
//! client on the same server.

use std::time::Duration;

use fencing_etcd::etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use fencing_etcd::{EtcdConfig, EtcdIssuer};
use fencing_redis::{RedisConfig, RedisIssuer};
use fencing_tokens::{HolderId, LeaseRequest, TokenIssuer};
use fencing_zookeeper::zookeeper_client as zk;
use fencing_zookeeper::{TokenSource, ZkConfig, ZkIssuer};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::BoxResult;

/// One acquire through `issuer`, then its release.
async fn fenced_lock(issuer: &dyn TokenIssuer, resource: &str, ttl: Duration) -> BoxResult<()> {
    let lease = issuer
        .try_acquire(&LeaseRequest::new(resource, ttl))
        .await?
        .ok_or("the fenced side's resource was held")?;
    Ok(issuer.release(&lease).await?)
}

/// etcd: the issuer against lease grant + a transaction that creates the
/// key only if absent, with the lease + revoke.
#[derive(Debug)]
pub(crate) struct Etcd {
    issuer: EtcdIssuer,
    prefix: String,
}

impl Etcd {
    /// The TTL of both sides: etcd's shortest (whole seconds).
    const TTL: Duration = Duration::from_secs(2);

    pub(crate) async fn connect(endpoint: &str, prefix: &str) -> BoxResult<Self> {
        let issuer = EtcdConfig::new([endpoint])
            .with_prefix(format!("{prefix}/"))
            .connect_issuer()
            .await?;
        Ok(Self {
            issuer,
            prefix: prefix.to_owned(),
        })
    }

    pub(crate) async fn fenced(&self) -> BoxResult<()> {
        fenced_lock(&self.issuer, "lock", Self::TTL).await
    }

    /// The raw calls, on the issuer's own client.
    pub(crate) async fn raw(&self) -> BoxResult<()> {
        self.raw_lock(false).await
    }

    /// The raw calls, plus the read the issuer's release makes before it
    /// revokes (one transaction: the resource's floor key and its lock
    /// keys).
    pub(crate) async fn raw_with_lookup(&self) -> BoxResult<()> {
        self.raw_lock(true).await
    }

    async fn raw_lock(&self, lookup: bool) -> BoxResult<()> {
        let mut client = self.issuer.client().clone();
        let ttl = i64::try_from(Self::TTL.as_secs())?;
        let lease = client.lease_grant(ttl, None).await?.id();
        let key = format!("{}/raw/{lease:016x}", self.prefix);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key,
                "holder",
                Some(PutOptions::new().with_lease(lease)),
            )]);
        if !client.txn(txn).await?.succeeded() {
            return Err("the raw lock key existed".into());
        }
        if lookup {
            let read = Txn::new().and_then([
                TxnOp::get(format!("{}/%floor/raw", self.prefix), None),
                TxnOp::get(
                    format!("{}/raw/", self.prefix),
                    Some(GetOptions::new().with_prefix()),
                ),
            ]);
            client.txn(read).await?;
        }
        client.lease_revoke(lease).await?;
        Ok(())
    }

    /// etcd's own lock service (v3lock, what `etcdctl lock` and the Go
    /// `concurrency.Mutex` do): lease grant, `Lock` on the lease, `Unlock`,
    /// lease revoke.
    pub(crate) async fn v3lock(&self) -> BoxResult<()> {
        let mut client = self.issuer.client().clone();
        let ttl = i64::try_from(Self::TTL.as_secs())?;
        let lease = client.lease_grant(ttl, None).await?.id();
        let options = fencing_etcd::etcd_client::LockOptions::new().with_lease(lease);
        let locked = client
            .lock(format!("{}/v3lock", self.prefix), Some(options))
            .await?;
        client.unlock(locked.key()).await?;
        client.lease_revoke(lease).await?;
        Ok(())
    }

    pub(crate) async fn version(&self) -> BoxResult<String> {
        let status = self.issuer.client().clone().status().await?;
        Ok(format!("etcd {}", status.version()))
    }
}

/// ZooKeeper: the issuer (its leases of one TTL share a session) against
/// create ephemeral sequential + delete on a session that is already open;
/// and two issuers taking turns on one resource (neither knows the
/// resource znode's version the other left) against the same raw calls.
#[derive(Debug)]
pub(crate) struct ZooKeeper {
    issuer: ZkIssuer,
    other: ZkIssuer,
    turn: std::sync::atomic::AtomicBool,
    session: zk::Client,
    dir: String,
}

impl ZooKeeper {
    /// The TTL of the fenced side and the session timeout of the raw one.
    const TTL: Duration = Duration::from_secs(4);

    pub(crate) async fn connect(addr: &str, prefix: &str) -> BoxResult<Self> {
        let root = format!("/{prefix}");
        let connect = async || {
            ZkConfig::new(addr)
                .with_prefix(&root)
                .with_token_source(TokenSource::Czxid)
                .connect_issuer()
                .await
        };
        let (issuer, other) = (connect().await?, connect().await?);
        let session = Self::session(addr).await?;
        let dir = format!("{root}-raw/lock");
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match session.mkdir(&dir, &options).await {
            Ok(()) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(Self {
            issuer,
            other,
            turn: std::sync::atomic::AtomicBool::new(false),
            session,
            dir,
        })
    }

    async fn session(addr: &str) -> BoxResult<zk::Client> {
        Ok(zk::Client::connector()
            .with_session_timeout(Self::TTL)
            .connect(addr)
            .await?)
    }

    pub(crate) async fn fenced(&self) -> BoxResult<()> {
        fenced_lock(&self.issuer, "lock", Self::TTL).await
    }

    /// Acquire + release by one of two issuers, in turn, on one resource.
    pub(crate) async fn fenced_in_turn(&self) -> BoxResult<()> {
        let turn = self
            .turn
            .fetch_xor(true, std::sync::atomic::Ordering::Relaxed);
        let issuer = if turn { &self.other } else { &self.issuer };
        fenced_lock(issuer, "turns", Self::TTL).await
    }

    /// Create ephemeral sequential + delete on `session`.
    async fn create_delete(&self, session: &zk::Client) -> BoxResult<()> {
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let (_, sequence) = session
            .create(&format!("{}/lock-", self.dir), b"holder", &options)
            .await?;
        session
            .delete(&format!("{}/lock-{sequence}", self.dir), None)
            .await?;
        Ok(())
    }

    /// On the session opened at connect.
    pub(crate) async fn raw(&self) -> BoxResult<()> {
        self.create_delete(&self.session).await
    }

    /// Deletes what the raw side created (the issuer's resource znodes stay:
    /// it never deletes them).
    pub(crate) async fn clean_up(&self) {
        let _ = self.session.delete(&self.dir, None).await;
        let parent = self.dir.trim_end_matches("/lock");
        let _ = self.session.delete(parent, None).await;
    }
}

/// Redis: the issuer's acquire and release scripts against `SET NX PX`,
/// `INCR` and `DEL`, on the append-only server the issuer requires.
#[derive(Clone)]
pub(crate) struct Redis {
    issuer: RedisIssuer,
    raw: ConnectionManager,
    prefix: String,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Redis {
    const TTL: Duration = Duration::from_secs(10);

    pub(crate) async fn connect(url: &str, prefix: &str) -> BoxResult<Self> {
        let issuer = RedisConfig::new(url)
            .with_prefix(format!("{prefix}:"))
            .connect_issuer()
            .await?;
        // The issuer's connection settings.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(5)))
            .set_number_of_retries(2);
        let raw = redis::Client::open(url)?
            .get_connection_manager_with_config(config)
            .await?;
        Ok(Self {
            issuer,
            raw,
            prefix: prefix.to_owned(),
        })
    }

    pub(crate) async fn fenced(&self) -> BoxResult<()> {
        fenced_lock(&self.issuer, "lock", Self::TTL).await
    }

    pub(crate) async fn raw(&self) -> BoxResult<()> {
        if self.raw_on("lock").await? {
            Ok(())
        } else {
            Err("the raw lock key was held".into())
        }
    }

    /// The raw calls on the lock `name`: `false` if it was held. The fence
    /// counter is one per name, as the issuer's is one per resource.
    pub(crate) async fn raw_on(&self, name: &str) -> BoxResult<bool> {
        let mut conn = self.raw.clone();
        let lock = format!("{}:raw:{name}", self.prefix);
        let holder = HolderId::unique();
        let ttl = u64::try_from(Self::TTL.as_millis())?;
        let taken: Option<String> = redis::cmd("SET")
            .arg(&lock)
            .arg(holder.as_str())
            .arg("NX")
            .arg("PX")
            .arg(ttl)
            .query_async(&mut conn)
            .await?;
        if taken.is_none() {
            return Ok(false);
        }
        let _token: u64 = redis::cmd("INCR")
            .arg(format!("{lock}:fence"))
            .query_async(&mut conn)
            .await?;
        let _: u64 = redis::cmd("DEL").arg(&lock).query_async(&mut conn).await?;
        Ok(true)
    }

    pub(crate) async fn version(&self) -> BoxResult<String> {
        let mut conn = self.raw.clone();
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await?;
        let version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
            .to_owned();
        Ok(format!(
            "Redis {version} (appendonly yes, appendfsync always)"
        ))
    }

    /// Deletes the counters and locks of both sides.
    pub(crate) async fn clean_up(&self) {
        let mut conn = self.raw.clone();
        let keys = [
            format!("{}:raw:lock:fence", self.prefix),
            format!("{}:raw:lock", self.prefix),
            format!("{}:lock:fence", self.prefix),
            format!("{}:lock:lock", self.prefix),
        ];
        let _: Result<u64, _> = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await;
    }
}
