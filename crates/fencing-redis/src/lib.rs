#![doc = include_str!("../README.md")]

mod scripts;

use std::time::{Duration, Instant};

use async_trait::async_trait;
use fencing::{Error, FencingToken, HolderId, Holding, Lease, LeaseRequest, Result, TokenIssuer};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script};

const BACKEND: &str = "redis";

/// Whether to accept a Redis that could lose the fence counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// Refuse unless the server has `appendonly yes`, `appendfsync always`
    /// and a `maxmemory-policy` that cannot evict the counter. The default.
    #[default]
    Required,
    /// Accept any server. After a restart without persistence, an eviction
    /// or a failover to a lagging replica, tokens can go **backwards** and a
    /// zombie's write can be accepted. For tests and demos only.
    AcceptVolatileCounter,
}

/// A [`TokenIssuer`] on Redis with Hazelcast `FencedLock` semantics.
///
/// One Lua script takes the lock (`SET lock NX PX ttl`) and increments the
/// resource's fence counter (`INCR fence`) atomically; a live holder that
/// acquires again gets the **same** token back (as Hazelcast does; Redisson's
/// re-entrant lock increments instead — a fresh token for a lease the holder
/// already has would let its own earlier writes look stale). Renew and
/// release are scripts that check the holder and token. Expiry is Redis's
/// own clock.
///
/// A single Redis node only: with replication, a failover to a replica that
/// missed the last `INCR` re-issues a token. Keep the counter on a
/// primary-only, persistent server.
#[derive(Clone)]
pub struct RedisIssuer {
    connection: ConnectionManager,
    prefix: String,
    acquire: Script,
    renew: Script,
    release: Script,
    raise_floor: Script,
}

impl std::fmt::Debug for RedisIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisIssuer")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisIssuer {
    /// The default key prefix.
    pub const DEFAULT_PREFIX: &'static str = "fencing:";

    /// Connects to `url` (`redis://host:port/db`) and checks durability.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL; [`Error::Backend`] if the
    /// server does not answer; [`Error::UnsafeConfiguration`] if the server
    /// could lose the counter and `durability` is [`Durability::Required`].
    pub async fn connect(url: &str, durability: Durability) -> Result<Self> {
        let client = redis::Client::open(url)
            .map_err(|e| Error::invalid_input(format!("malformed Redis URL {url:?}: {e}")))?;
        // Reconnects on its own after a server restart; bounded waits so a
        // dead server surfaces as an error, not a hang.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(5)))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let connection = client
            .get_connection_manager_with_config(config)
            .await
            .map_err(|e| map_error("connect", false, e))?;
        Self::new(connection, durability).await
    }

    /// Uses an existing connection manager and checks durability.
    ///
    /// # Errors
    /// As [`RedisIssuer::connect`].
    pub async fn new(mut connection: ConnectionManager, durability: Durability) -> Result<Self> {
        if durability == Durability::Required {
            check_durability(&mut connection).await?;
        }
        Ok(Self {
            connection,
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            acquire: Script::new(scripts::ACQUIRE),
            renew: Script::new(scripts::RENEW),
            release: Script::new(scripts::RELEASE),
            raise_floor: Script::new(scripts::RAISE_FLOOR),
        })
    }

    /// Uses another key prefix.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The key prefix in use.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn lock_key(&self, resource: &str) -> String {
        format!("{}{resource}:lock", self.prefix)
    }

    fn fence_key(&self, resource: &str) -> String {
        format!("{}{resource}:fence", self.prefix)
    }
}

/// Refuses a server that could lose the counter: no AOF, AOF without
/// `fsync` on every write (a crash loses the last second of `INCR`s), or an
/// eviction policy that may evict keys without a TTL.
async fn check_durability(conn: &mut ConnectionManager) -> Result<()> {
    let config = |name: &'static str| {
        let mut conn = conn.clone();
        async move {
            let pair: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query_async(&mut conn)
                .await
                .map_err(|e| unsafe_config(format!("cannot read `{name}` with CONFIG GET ({e}); the counter's durability is unknown")))?;
            Ok::<_, Error>(pair.get(1).cloned().unwrap_or_default())
        }
    };
    let appendonly = config("appendonly").await?;
    if appendonly != "yes" {
        return Err(unsafe_config(format!(
            "appendonly is {appendonly:?}: a restart would reset the fence counter and re-issue old tokens; \
             run Redis with `appendonly yes` and `appendfsync always`, or pass Durability::AcceptVolatileCounter"
        )));
    }
    let fsync = config("appendfsync").await?;
    if fsync != "always" {
        return Err(unsafe_config(format!(
            "appendfsync is {fsync:?}: a crash can lose the last `INCR`s and re-issue their tokens; \
             set `appendfsync always`, or pass Durability::AcceptVolatileCounter"
        )));
    }
    let policy = config("maxmemory-policy").await?;
    if policy.starts_with("allkeys") {
        return Err(unsafe_config(format!(
            "maxmemory-policy is {policy:?}: it may evict the fence counter; use noeviction or a volatile-* policy"
        )));
    }
    Ok(())
}

fn unsafe_config(reason: String) -> Error {
    Error::UnsafeConfiguration {
        backend: BACKEND,
        reason,
    }
}

/// Maps a Redis error: an I/O failure once a write was sent is an unknown
/// outcome; refusals and timeouts before sending are retryable.
fn map_error(operation: &str, write: bool, e: redis::RedisError) -> Error {
    if e.is_connection_refusal() {
        Error::backend(BACKEND, true, e)
    } else if write && (e.is_io_error() || e.is_timeout() || e.is_connection_dropped()) {
        Error::outcome_unknown(BACKEND, operation, e)
    } else {
        let retryable = e.is_io_error() || e.is_timeout() || e.is_connection_dropped();
        Error::backend(BACKEND, retryable, e)
    }
}

fn parse_token(raw: &str) -> Result<FencingToken> {
    raw.parse().map_err(|_| {
        Error::invalid_input(format!("Redis fence counter holds {raw:?}, not a token"))
    })
}

fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn lock_value(lease: &Lease) -> String {
    format!("{}:{}", lease.token(), lease.holder())
}

fn lost(lease: &Lease) -> Error {
    Error::LeaseLost {
        resource: lease.resource().to_owned(),
        token: lease.token(),
    }
}

#[async_trait]
impl TokenIssuer for RedisIssuer {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn reentrant(&self) -> bool {
        true
    }

    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
        request.validate(self.min_ttl())?;
        let mut conn = self.connection.clone();
        let sent_at = Instant::now();
        let reply: Vec<String> = self
            .acquire
            .key(self.lock_key(&request.resource))
            .key(self.fence_key(&request.resource))
            .arg(request.holder.as_str())
            .arg(ttl_ms(request.ttl))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| map_error(&format!("acquire {:?}", request.resource), true, e))?;
        match reply.as_slice() {
            [granted, token, ..] if granted == "1" => {
                Ok(Some(Lease::new(request, parse_token(token)?, sent_at)))
            }
            [_, ..] => Ok(None),
            [] => Err(Error::backend(
                BACKEND,
                false,
                "acquire script returned nothing",
            )),
        }
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let mut conn = self.connection.clone();
        let sent_at = Instant::now();
        let renewed: i64 = self
            .renew
            .key(self.lock_key(lease.resource()))
            .arg(lock_value(lease))
            .arg(ttl_ms(lease.ttl()))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| map_error(&format!("renew {:?}", lease.resource()), true, e))?;
        if renewed == 1 {
            Ok(lease.renewed(sent_at))
        } else {
            Err(lost(lease))
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let mut conn = self.connection.clone();
        let released: i64 = self
            .release
            .key(self.lock_key(lease.resource()))
            .arg(lock_value(lease))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| map_error(&format!("release {:?}", lease.resource()), true, e))?;
        if released == 1 {
            Ok(())
        } else {
            Err(lost(lease))
        }
    }

    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        let mut conn = self.connection.clone();
        let counter: String = self
            .raise_floor
            .key(self.fence_key(resource))
            .arg(floor.get().to_string())
            .invoke_async(&mut conn)
            .await
            .map_err(|e| map_error("raise floor", true, e))?;
        parse_token(&counter).map(|_| ())
    }

    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        let mut conn = self.connection.clone();
        let current: Option<String> = conn
            .get(self.lock_key(resource))
            .await
            .map_err(|e| map_error("read holder", false, e))?;
        current
            .map(|value| {
                let (token, holder) = value.split_once(':').ok_or_else(|| {
                    Error::invalid_input(format!("lock key holds {value:?}, not token:holder"))
                })?;
                Ok(Holding {
                    holder: HolderId::new(holder)?,
                    token: parse_token(token)?,
                })
            })
            .transpose()
    }
}
