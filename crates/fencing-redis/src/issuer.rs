//! [`RedisIssuer`]: the lock and the fence counter in one Lua script.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fencing_core::adapter::Call;
use fencing_core::safety::SafetyCheck;
use fencing_core::tls::{TlsMode, TlsOptions};
use fencing_core::{
    Error, FencingToken, HolderId, Holding, Lease, LeaseRequest, Removal, Result, TokenIssuer,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::Layout;
use crate::NAME;
use crate::durability::{Durability, check_durability, inspect};
use crate::error::{connect_error, map_error, parse_token};
use crate::layout::Scripts;
use crate::target::Target;
use crate::wake::{self, Listener};

mod guarded;

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
/// Another client's lock at the lock key (redis-py's `Lock` or
/// node-redlock's random value, a hand-written `SET NX`, Redisson's hash)
/// is held by a foreign holder: no grant while it lasts (`acquire` waits
/// for it to be deleted or expire), [`holder`](TokenIssuer::holder) names
/// it `foreign:…`, and nothing of it is overwritten or deleted.
///
/// A single persistent primary by default: with asynchronous replication a
/// failover to a replica that missed the last `INCR` re-issues a token, so
/// replicas are refused unless [`Durability::Replicated`] is chosen.
///
/// **Waiting** ([`acquire`](TokenIssuer::acquire)): the release script
/// also `PUBLISH`es on `{prefix}released`, and a waiter tries again when
/// its resource's release arrives (one `SUBSCRIBE` connection per issuer,
/// opened with its client), or after a quarter of its TTL (50 ms to 5 s)
/// without one: what notices a crashed holder's expiry, which publishes
/// nothing. The grant is always the acquire script's, so a lost or
/// spurious message costs only time. An issuer on the caller's own
/// connection manager ([`RedisIssuer::new`]) has no client to subscribe
/// with, and polls: 5 ms, doubling up to 100 ms.
#[derive(Clone)]
pub struct RedisIssuer {
    connection: ConnectionManager,
    layout: Layout,
    prefix: String,
    durability: Durability,
    /// The `run_id` of the server process that passed the checks; every
    /// grant sends it and the script refuses on any other process. Empty
    /// when nothing is checked ([`Durability::AcceptVolatileCounter`]).
    checked: Arc<Mutex<String>>,
    scripts: Scripts,
    /// The TLS mode and the `host:port` this issuer connected to; `None`
    /// for the caller's own connection manager ([`RedisIssuer::new`]).
    transport: Option<(TlsMode, String)>,
    /// Release wake-ups, when this issuer has a client of its own.
    wakeups: Option<Arc<Listener>>,
}

impl std::fmt::Debug for RedisIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisIssuer")
            .field("layout", &self.layout)
            .field("prefix", &self.prefix)
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

impl RedisIssuer {
    /// The default key prefix.
    pub const DEFAULT_PREFIX: &'static str = "fencing:";

    /// Connects to `target`, logs in and checks durability: what
    /// [`RedisConfig::connect_issuer`](crate::RedisConfig::connect_issuer) does.
    pub(crate) async fn open(target: &Target, durability: Durability) -> Result<Self> {
        check_durability(durability)?;
        let (client, mode) = target.client()?;
        // `WAIT` holds the reply for up to its timeout: the response timeout
        // must outlast it, or a slow acknowledgement reads as a dead server.
        let wait = match durability {
            Durability::Replicated { timeout, .. } => timeout,
            _ => Duration::ZERO,
        };
        // Reconnects on its own after a server restart; bounded waits so a
        // dead server surfaces as an error, not a hang.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(5).saturating_add(wait)))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let address = target.address();
        let connection = client
            .get_connection_manager_with_config(config)
            .await
            .map_err(|e| connect_error(mode, &address, e))?;
        let issuer = Self {
            transport: Some((mode, address)),
            wakeups: Some(Arc::new(Listener::new(
                client,
                wake::channel(Layout::Fencing, Self::DEFAULT_PREFIX),
            ))),
            ..Self::on(connection, durability)
        };
        issuer.check_server().await?;
        Ok(issuer)
    }

    /// Uses an existing connection manager (its own TLS and login) and
    /// checks durability, with the default key prefix
    /// ([`RedisConfig::issuer_on`](crate::RedisConfig::issuer_on) for
    /// another). With [`Durability::Replicated`], its response timeout must
    /// be longer than the `WAIT` timeout. (By URL:
    /// [`RedisConfig`](crate::RedisConfig), the one builder.)
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a durability that cannot be checked;
    /// [`Error::Backend`] if the server does not answer;
    /// [`Error::UnsafeConfiguration`] if the server could lose or re-issue
    /// the counter under `durability`.
    pub async fn new(connection: ConnectionManager, durability: Durability) -> Result<Self> {
        check_durability(durability)?;
        let issuer = Self::on(connection, durability);
        issuer.check_server().await?;
        Ok(issuer)
    }

    fn on(connection: ConnectionManager, durability: Durability) -> Self {
        Self {
            connection,
            layout: Layout::Fencing,
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            durability,
            checked: Arc::new(Mutex::new(String::new())),
            scripts: Layout::Fencing.scripts(),
            transport: None,
            wakeups: None,
        }
    }

    /// Uses `layout` and key prefix `prefix` (the layout's default if
    /// `None`): set by [`RedisConfig`](crate::RedisConfig).
    pub(crate) fn laid_out(mut self, layout: Layout, prefix: Option<String>) -> Self {
        let prefix = prefix.unwrap_or_else(|| layout.default_prefix().to_owned());
        let channel = wake::channel(layout, &prefix);
        self.wakeups = self.wakeups.map(|w| Arc::new(w.on(channel)));
        self.scripts = layout.scripts();
        self.layout = layout;
        self.prefix = prefix;
        self
    }

    /// Whose lock recipe the keys follow.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The key prefix in use.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The durability this issuer enforces.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// What `fence doctor` says of the transport: plaintext past the
    /// loopback, or TLS without a certificate check, is a warning. For the
    /// caller's own connection manager, what the server says of it.
    async fn transport_check(&self) -> SafetyCheck {
        match &self.transport {
            Some((mode, address)) => TlsOptions::transport_check(*mode, &[address]),
            None => crate::durability::live_transport(&mut self.connection.clone()).await,
        }
    }

    fn lock_key(&self, resource: &str) -> String {
        self.layout.lock_key(&self.prefix, resource)
    }

    fn fence_key(&self, resource: &str) -> String {
        self.layout.fence_key(&self.prefix, resource)
    }
}

#[async_trait]
impl TokenIssuer for RedisIssuer {
    fn name(&self) -> &'static str {
        NAME
    }

    fn reentrant(&self) -> bool {
        true
    }

    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
        request.validate(self.min_ttl())?;
        self.layout.check(&self.prefix, &request.resource)?;
        let operation = format!("acquire {:?}", request.resource);
        let sent_at = Instant::now();
        let (lock, fence) = (
            self.lock_key(&request.resource),
            self.fence_key(&request.resource),
        );
        // Rounded up: the server must not expire the lease before the
        // holder's local deadline (sent_at + ttl) has passed.
        let ttl_ms = request.ttl_millis_ceil();
        let (reply, acked) = self
            .run_guarded(
                &operation,
                |inv| {
                    inv.key(&lock)
                        .key(&fence)
                        .arg(request.holder.as_str())
                        .arg(ttl_ms);
                },
                &self.scripts.acquire,
            )
            .await?;
        let (lease, minted) = match reply.as_slice() {
            [granted, token, minted, ..] if granted == "1" => (
                Lease::new(request, parse_token(token)?, sent_at),
                minted == "1",
            ),
            [code, counter, ..] if code == "-3" => {
                return Err(Error::TokenOutOfRange {
                    token: parse_token(counter)?
                        .checked_next()
                        .unwrap_or(FencingToken::new(u64::MAX)),
                    max: FencingToken::MAX_I64,
                });
            }
            [_, ..] => return Ok(None),
            [] => {
                return Err(Error::backend(
                    NAME,
                    false,
                    "acquire script returned nothing",
                ));
            }
        };
        if let Err(error) = self.acknowledged(
            acked,
            &format!("grant of token {} on {:?}", lease.token(), request.resource),
        ) {
            // A new token the replicas may lack is not handed out: give the
            // lock back so the next grant need not wait for its TTL. A
            // re-entrant grant keeps the lease its holder already has.
            if minted {
                let _ = self.release(&lease).await;
            }
            return Err(error);
        }
        Ok(Some(lease))
    }

    /// Waits for the release's wake-up, or polls (see [`RedisIssuer`]).
    /// The subscription is only asked for once the resource was found
    /// held: an uncontended acquire is one script.
    async fn acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Lease> {
        let started = Instant::now();
        if let Some(lease) = self.try_acquire(request).await? {
            return Ok(lease);
        }
        let wakeups = match &self.wakeups {
            Some(listener) => {
                let budget = wait.saturating_sub(started.elapsed());
                listener.subscribe(budget).await
            }
            None => None,
        };
        let key = self.lock_key(&request.resource);
        wake::acquire_woken(self, request, &key, started, wait, wakeups).await
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        fencing_core::adapter::check_ttl(lease.ttl())?;
        let mut conn = self.connection.clone();
        let sent_at = Instant::now();
        let renewed: i64 = self
            .scripts
            .renew
            .key(self.lock_key(lease.resource()))
            .arg(lease.holder().as_str())
            .arg(lease.token().get().to_string())
            .arg(fencing_core::adapter::ttl_millis_ceil(lease.ttl()))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| map_error(e, Call::write(&format!("renew {:?}", lease.resource()))))?;
        if renewed == 1 {
            Ok(lease.renewed(sent_at))
        } else {
            Err(Error::lease_lost(lease))
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let mut conn = self.connection.clone();
        let mut release = self.scripts.release.key(self.lock_key(lease.resource()));
        release
            .arg(lease.holder().as_str())
            .arg(lease.token().get().to_string())
            .arg(wake::channel(self.layout, &self.prefix));
        if let Some(channel) = self.layout.foreign_channel(&self.prefix, lease.resource()) {
            release.arg(channel);
        }
        let released: i64 = release
            .invoke_async(&mut conn)
            .await
            .map_err(|e| map_error(e, Call::write(&format!("release {:?}", lease.resource()))))?;
        if released == 1 {
            Ok(())
        } else {
            Err(Error::lease_lost(lease))
        }
    }

    /// # Errors
    /// [`Error::TokenOutOfRange`] for a floor of `i64::MAX` or above, before
    /// anything is written: Redis counts in a signed 64-bit integer, so no
    /// grant could follow it.
    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        if floor >= FencingToken::MAX_I64 {
            return Err(Error::TokenOutOfRange {
                token: floor,
                max: FencingToken::new(FencingToken::MAX_I64.get() - 1),
            });
        }
        self.layout.check(&self.prefix, resource)?;
        let fence = self.fence_key(resource);
        let (reply, acked) = self
            .run_guarded(
                &format!("raise the floor of {resource:?}"),
                |inv| {
                    inv.key(&fence).arg(floor.get().to_string());
                },
                &self.scripts.raise_floor,
            )
            .await?;
        let counter = match reply.as_slice() {
            [_, counter, ..] => parse_token(counter)?,
            _ => {
                return Err(Error::backend(
                    NAME,
                    false,
                    "raise_floor script returned nothing",
                ));
            }
        };
        self.acknowledged(
            acked,
            &format!(
                "floor {floor} of {resource:?} (counter {counter}; raising it again is harmless)"
            ),
        )
    }

    /// One script: the counter is deleted if no lock is at the lock key
    /// (ours or another client's), Redis has not touched the counter for
    /// `idle_for` (`OBJECT IDLETIME`, whole seconds, rounded up, and a
    /// second more for its clock's grain: every grant increments it), and
    /// it is at least `idle_for` below Redis's clock in microseconds,
    /// where a later grant starts it again.
    ///
    /// # Errors
    /// [`Error::UnsafeConfiguration`] on the Redisson layout:
    /// `RFencedLock` clients start a missing counter at 1, below every
    /// token it gave. The same on a server whose LFU `maxmemory-policy`
    /// keeps no idle time.
    async fn remove_idle(&self, resource: &str, idle_for: Duration) -> Result<Removal> {
        if self.layout == Layout::Redisson {
            return Err(Error::UnsafeConfiguration {
                backend: NAME,
                reason: format!(
                    "the counter of {resource:?} was kept: on the Redisson layout it is \
                     RFencedLock's own, and Redisson's clients start a missing counter at 1, below \
                     every token it gave"
                ),
            });
        }
        fencing_core::adapter::check_idle(idle_for)?;
        self.layout.check(&self.prefix, resource)?;
        // Whole seconds, rounded up, and one more: Redis counts idle time
        // on a clock of whole seconds, so a counter touched just before a
        // tick reads a second idler than it is.
        let idle_secs = idle_for.as_secs() + u64::from(idle_for.subsec_nanos() > 0) + 1;
        let (lock, fence) = (self.lock_key(resource), self.fence_key(resource));
        let (reply, _) = self
            .run_guarded(
                &format!("remove the idle counter of {resource:?}"),
                |inv| {
                    inv.key(&lock).key(&fence).arg(idle_secs.to_string());
                },
                &self.scripts.remove_idle,
            )
            .await?;
        match reply.first().map(String::as_str) {
            Some("1") => Ok(Removal::Removed),
            Some("0") => Ok(Removal::InUse),
            Some("2") => Ok(Removal::Absent),
            Some("3") => Ok(Removal::Floored),
            Some("-4") => Err(Error::UnsafeConfiguration {
                backend: NAME,
                reason: format!(
                    "the counter of {resource:?} was kept: this server keeps no idle time ({}); \
                     an LFU maxmemory-policy tracks use counts instead",
                    reply.get(1).map_or("", String::as_str)
                ),
            }),
            _ => Err(Error::backend(
                NAME,
                false,
                format!("the remove_idle script answered {reply:?}"),
            )),
        }
    }

    /// Another client's lock at the key (redis-py's or node-redlock's
    /// value, a hand-written `SET NX`, Redisson's hash) is a holder whose
    /// id starts with `foreign:` and says what was found, never the value
    /// itself (for redis-py and redlock, the capability to release it),
    /// with token 0: no token of ours was granted to it.
    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        self.layout.check(&self.prefix, resource)?;
        let mut conn = self.connection.clone();
        let found: Vec<String> = self
            .scripts
            .holder
            .key(self.lock_key(resource))
            .key(self.fence_key(resource))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| map_error(e, Call::read("read holder")))?;
        let foreign = |what: &str| -> Result<Option<Holding>> {
            Ok(Some(Holding {
                holder: HolderId::new(what)?,
                token: FencingToken::ZERO,
            }))
        };
        match found.as_slice() {
            [] => Ok(None),
            [kind, token, holder] if kind == "ours" => match HolderId::new(holder.as_str()) {
                Ok(holder) => Ok(Some(Holding {
                    holder,
                    token: parse_token(token)?,
                })),
                Err(_) => foreign("foreign:a string whose holder is no holder id"),
            },
            [kind, what] if kind == "foreign" => foreign(what),
            other => Err(Error::backend(
                NAME,
                false,
                format!("holder script answered {other:?}"),
            )),
        }
    }

    /// The generic probe (two grants, the second above the first) plus one
    /// check per setting that decides whether a token can be re-issued:
    /// `appendonly`, `appendfsync`, `no-appendfsync-on-rewrite`,
    /// `maxmemory-policy`, `role` and `connected replicas`, each judged
    /// under this issuer's [`Durability`] (under
    /// [`Durability::AcceptVolatileCounter`], as the default would judge it),
    /// and `transport` (plaintext past the loopback, or TLS without a
    /// certificate check, is a warning).
    async fn verify(&self) -> Result<Vec<SafetyCheck>> {
        let server = inspect(&mut self.connection.clone(), self.durability).await?;
        let mut checks = match fencing_core::safety::probe_issuer(self).await {
            Ok(checks) => checks,
            // The issuer refused to grant: report why instead of failing.
            Err(Error::UnsafeConfiguration { reason, .. }) => {
                vec![SafetyCheck::unsafe_(
                    "tokens rise",
                    format!("no grant: {reason}"),
                )]
            }
            Err(e) => return Err(e),
        };
        checks.extend(
            server
                .findings
                .into_iter()
                .map(|f| SafetyCheck::new(f.name, f.verdict, f.detail)),
        );
        checks.push(SafetyCheck::pass(
            "deleted counter",
            "a counter deleted by hand (DEL, FLUSHDB) is made again at Redis's TIME in \
             microseconds by the next grant, above every token it gave",
        ));
        checks.push(self.transport_check().await);
        Ok(checks)
    }
}
