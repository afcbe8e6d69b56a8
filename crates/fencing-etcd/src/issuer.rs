//! The etcd issuer: the etcd concurrency-mutex algorithm, with the lock
//! key's `create_revision` as the fencing token.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, GetResponse, KeyValue,
    PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, WatchFilterType, WatchOptions,
};
use fencing_core::{
    Error, FencingToken, HolderId, Holding, Lease, LeaseRequest, Result, TokenIssuer,
};

use crate::error::{BACKEND, Failure, Op, lease_not_found, map_error, never_sent};
use crate::keep_alive::KeepAlive;

/// The key prefix when none is given.
pub const DEFAULT_PREFIX: &str = "fencing/";

/// The shortest lease etcd grants with its default timing: the server
/// raises any TTL to 1.5 × its election timeout (1 s by default), rounded
/// up to whole seconds.
pub const DEFAULT_MIN_TTL: Duration = Duration::from_secs(2);

const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait before trying again after a failed call while queued.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// A [`TokenIssuer`] on etcd.
///
/// Acquiring grants an etcd lease with the request's TTL (rounded up to
/// whole seconds) and creates the key `{prefix}{resource}/{lease_id:016x}`
/// in a transaction, only if absent, with the lease attached. The holder is
/// the key with the lowest `create_revision` under `{prefix}{resource}/`;
/// a waiting acquirer watches the deletion of the key just ahead of it (no
/// herd, no polling) and keeps its own lease alive while it waits.
/// **The fencing token is the lock key's `create_revision`**: cluster-wide,
/// monotonic across leader elections, strictly increasing in grant order.
///
/// In the resource name `/` is written `%2F` and `%` is written `%25`, so
/// the keys of resource `a` can never fall under the prefix of `a/b`.
///
/// **Renewal is the caller's.** A granted lease is *not* kept alive in the
/// background: [`renew`](TokenIssuer::renew) sends one keep-alive, and a
/// holder that stops renewing loses the lease after its TTL, as the
/// [`TokenIssuer`] contract says. For a background keep-alive, ask for one
/// with [`EtcdIssuer::keep_alive`].
///
/// Cheap to clone: clones share the client.
#[derive(Clone)]
pub struct EtcdIssuer {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    /// The endpoints given to [`EtcdIssuer::connect`] (empty for a caller's
    /// own client): `verify` checks they all belong to one cluster.
    endpoints: Vec<String>,
    prefix: String,
    min_ttl: Duration,
    operation_timeout: Duration,
    /// `(resource, token)` of leases whose background keep-alive gave up:
    /// renew refuses them even if etcd would still extend the lease. Keyed
    /// by resource too: a floor can give two resources the same token.
    abandoned: Mutex<HashSet<(String, u64)>>,
}

impl fmt::Debug for EtcdIssuer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdIssuer")
            .field("prefix", &self.inner.prefix)
            .field("min_ttl", &self.inner.min_ttl)
            .field("operation_timeout", &self.inner.operation_timeout)
            .finish_non_exhaustive()
    }
}

/// A lock key this process created and keeps alive while it waits.
struct Queued {
    lease_id: i64,
    key: String,
    revision: i64,
    /// The resource's floor offset when the key was created.
    offset: u64,
    /// When the grant request was sent: the lease lives at least the TTL
    /// from here.
    granted_at: Instant,
}

impl Queued {
    fn token(&self) -> FencingToken {
        token_of(self.revision, self.offset)
    }
}

impl EtcdIssuer {
    /// Connects to etcd at `endpoints` (e.g. `["http://127.0.0.1:2379"]`)
    /// and checks that the cluster answers a linearizable read.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed endpoint; a retryable
    /// [`Error::Backend`] if etcd does not answer.
    pub async fn connect<E: AsRef<str>>(endpoints: &[E]) -> Result<Self> {
        if endpoints.is_empty() {
            return Err(Error::invalid_input("no etcd endpoint given"));
        }
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true)
            .with_require_leader(true);
        let client = Client::connect(endpoints, Some(options))
            .await
            .map_err(|e| map_error(e.into(), Op::read("connect")))?;
        let mut issuer = Self::new(client);
        issuer.rebuild_in_place(|inner| {
            inner.endpoints = endpoints.iter().map(|e| e.as_ref().to_owned()).collect();
        });
        issuer.ping().await?;
        Ok(issuer)
    }

    /// An issuer on the caller's own client, with the default prefix
    /// [`DEFAULT_PREFIX`].
    pub fn new(client: Client) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                endpoints: Vec::new(),
                prefix: DEFAULT_PREFIX.to_owned(),
                min_ttl: DEFAULT_MIN_TTL,
                operation_timeout: DEFAULT_OPERATION_TIMEOUT,
                abandoned: Mutex::new(HashSet::new()),
            }),
        }
    }

    /// Puts every key under `prefix` instead of [`DEFAULT_PREFIX`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty prefix or one with a NUL byte.
    pub fn with_prefix(self, prefix: impl Into<String>) -> Result<Self> {
        let prefix = prefix.into();
        if prefix.is_empty() || prefix.contains('\0') {
            return Err(Error::invalid_input(format!(
                "bad etcd key prefix {prefix:?}"
            )));
        }
        Ok(self.rebuild(|inner| inner.prefix = prefix))
    }

    /// Sets the shortest TTL accepted, for a server whose election timeout
    /// differs from the default (etcd's minimum lease TTL is 1.5 × the
    /// election timeout). Whole seconds are granted in any case.
    #[must_use]
    pub fn with_min_ttl(self, min_ttl: Duration) -> Self {
        self.rebuild(|inner| inner.min_ttl = min_ttl)
    }

    /// How long one call to etcd may take before it counts as failed
    /// (default 5 s). A write that runs out of time is
    /// [`Error::OutcomeUnknown`].
    #[must_use]
    pub fn with_operation_timeout(self, timeout: Duration) -> Self {
        self.rebuild(|inner| inner.operation_timeout = timeout)
    }

    fn rebuild(mut self, change: impl FnOnce(&mut Inner)) -> Self {
        self.rebuild_in_place(change);
        self
    }

    fn rebuild_in_place(&mut self, change: impl FnOnce(&mut Inner)) {
        let mut inner = Inner {
            client: self.inner.client.clone(),
            endpoints: self.inner.endpoints.clone(),
            prefix: self.inner.prefix.clone(),
            min_ttl: self.inner.min_ttl,
            operation_timeout: self.inner.operation_timeout,
            abandoned: Mutex::new(self.inner.abandoned.lock().expect("poisoned").clone()),
        };
        change(&mut inner);
        self.inner = Arc::new(inner);
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The endpoints given to [`connect`](Self::connect); empty for an
    /// issuer on the caller's own client.
    pub(crate) fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    /// The etcd client, for anything this crate does not do.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// Keeps `lease` alive in the background, renewing at a third of its
    /// TTL, until the returned handle is dropped or
    /// [`stopped`](KeepAlive::stop).
    ///
    /// If a renewal finds the lease gone, or renewals keep failing until the
    /// lease's local deadline passes, the handle reports the lease lost, the
    /// lease is revoked if etcd still has it, and [`renew`](TokenIssuer::renew)
    /// refuses it with [`Error::LeaseLost`] from then on.
    ///
    /// Needs a Tokio runtime.
    pub fn keep_alive(&self, lease: &Lease) -> KeepAlive {
        KeepAlive::spawn(self.clone(), lease.clone())
    }

    pub(crate) fn abandon(&self, lease: &Lease) {
        self.inner
            .abandoned
            .lock()
            .expect("poisoned")
            .insert(abandoned_key(lease));
    }

    fn is_abandoned(&self, lease: &Lease) -> bool {
        self.inner
            .abandoned
            .lock()
            .expect("poisoned")
            .contains(&abandoned_key(lease))
    }

    /// Forgets an abandoned lease once it is certainly gone from etcd
    /// (revoked, or its key not found), so the set does not grow forever.
    fn forget_abandoned(&self, lease: &Lease) {
        self.inner
            .abandoned
            .lock()
            .expect("poisoned")
            .remove(&abandoned_key(lease));
    }

    fn dir(&self, resource: &str) -> String {
        resource_dir(&self.inner.prefix, resource)
    }

    /// Runs one call with the operation timeout, on a clone of the client.
    /// A call that never left this process (no connection to the member
    /// the balancer picked, e.g. a killed leader) is tried again, up to
    /// four times: the balancer then picks another member.
    pub(crate) async fn call<T, F, Fut>(&self, mut call: F) -> std::result::Result<T, Failure>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let mut attempt = 0_u32;
        loop {
            let client = self.inner.client.clone();
            match tokio::time::timeout(self.inner.operation_timeout, call(client)).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) if attempt < 4 && never_sent(&e) => {
                    attempt += 1;
                    tracing::debug!(attempt, error = %e, "etcd call not sent; trying again");
                    tokio::time::sleep(Duration::from_millis(25) * attempt).await;
                }
                Ok(Err(e)) => return Err(Failure::Etcd(e)),
                Err(_) => return Err(Failure::Elapsed(self.inner.operation_timeout)),
            }
        }
    }

    async fn get(
        &self,
        key: String,
        options: GetOptions,
    ) -> std::result::Result<GetResponse, Failure> {
        self.call(|mut c| {
            let (key, options) = (key.clone(), options.clone());
            async move { c.get(key, Some(options)).await }
        })
        .await
    }

    async fn txn(&self, txn: Txn) -> std::result::Result<etcd_client::TxnResponse, Failure> {
        self.call(|mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await
    }

    async fn grant(&self, ttl: i64) -> std::result::Result<i64, Failure> {
        self.call(|mut c| async move { c.lease_grant(ttl, None).await.map(|g| g.id()) })
            .await
    }

    async fn revoke(&self, lease_id: i64) -> std::result::Result<(), Failure> {
        self.call(|mut c| async move { c.lease_revoke(lease_id).await.map(drop) })
            .await
    }

    async fn watch(
        &self,
        key: Vec<u8>,
        options: WatchOptions,
    ) -> std::result::Result<etcd_client::WatchStream, Failure> {
        self.call(|mut c| {
            let (key, options) = (key.clone(), options.clone());
            async move { c.watch(key, Some(options)).await }
        })
        .await
    }

    async fn ping(&self) -> Result<()> {
        let options = GetOptions::new().with_prefix().with_count_only();
        self.get(self.inner.prefix.clone(), options)
            .await
            .map(drop)
            .map_err(|e| map_error(e, Op::read("read")))
    }

    /// Grants a lease and creates the lock key in one transaction; says
    /// whether the key is the lowest under the resource (the holder).
    async fn enqueue(&self, request: &LeaseRequest) -> Result<(Queued, bool)> {
        request.validate(self.inner.min_ttl)?;
        let ttl = whole_seconds(request)?;
        let dir = self.dir(&request.resource);
        let granted_at = Instant::now();
        // An orphan lease (its grant answer lost) has no key and expires by
        // itself, so an unknown grant is merely retryable.
        let lease_id = self
            .grant(ttl)
            .await
            .map_err(|e| map_error(e, Op::read("grant lease")))?;
        let key = format!("{dir}{lease_id:016x}");
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(
                    key.clone(),
                    request.holder.as_str(),
                    Some(PutOptions::new().with_lease(lease_id)),
                ),
                TxnOp::get(key.clone(), None),
                TxnOp::get(dir, Some(first_created())),
                TxnOp::get(self.floor_key(&request.resource), None),
            ]);
        let response = match self.txn(txn).await {
            Ok(response) => response,
            Err(e) => {
                // The key may exist: revoking the lease removes it either way.
                self.revoke_quietly(lease_id).await;
                return Err(map_error(e, Op::write("create lock key")));
            }
        };
        let mut gets = response.op_responses().into_iter().filter_map(|r| match r {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        });
        let (own, first, floor) = (gets.next(), gets.next(), gets.next());
        let own = own
            .as_ref()
            .and_then(|g| g.kvs().first())
            .map(KeyValue::create_revision);
        let first = first
            .as_ref()
            .and_then(|g| g.kvs().first())
            .map(KeyValue::create_revision);
        let (Some(revision), true) = (own, response.succeeded()) else {
            self.revoke_quietly(lease_id).await;
            return Err(Error::backend(
                BACKEND,
                true,
                format!("lock key {key:?} of a fresh lease already existed or was not read back"),
            ));
        };
        let offset = match parse_floor(floor.as_ref()) {
            Ok(offset) => offset,
            Err(e) => {
                self.revoke_quietly(lease_id).await;
                return Err(e);
            }
        };
        // `raise_floor` keeps offsets at most MAX_OFFSET, so this holds
        // unless an older version wrote a larger one.
        if u64::try_from(revision)
            .ok()
            .and_then(|r| r.checked_add(offset))
            .is_none()
        {
            self.revoke_quietly(lease_id).await;
            return Err(Error::TokenOutOfRange {
                token: FencingToken::new(offset),
                max: FencingToken::new(MAX_OFFSET),
            });
        }
        let queued = Queued {
            lease_id,
            key,
            revision,
            offset,
            granted_at,
        };
        Ok((queued, first == Some(revision)))
    }

    /// Waits until every key ahead of ours is gone, keeping our lease alive;
    /// then checks, after a fresh keep-alive, that our key still exists
    /// with our lease. Returns when that keep-alive was sent.
    async fn wait_turn(
        &self,
        q: &Queued,
        request: &LeaseRequest,
        give_up: Instant,
        started: Instant,
    ) -> Result<Instant> {
        let dir = self.dir(&request.resource);
        let lost = || Error::LeaseLost {
            resource: request.resource.clone(),
            token: q.token(),
        };
        let timeout = || Error::Timeout {
            operation: format!("acquire {:?}", request.resource),
            after: started.elapsed(),
        };
        let interval = (request.ttl / 3).max(Duration::from_millis(100));
        // The lease is alive at least until `alive_since + ttl`.
        let mut alive_since = q.granted_at;
        let mut next_refresh = alive_since + interval;
        let mut last_error: Option<Error> = None;

        'recheck: loop {
            if Instant::now() >= give_up {
                return Err(last_error.map_or_else(timeout, |e| {
                    tracing::debug!(error = %e, "acquire gave up after a failing call");
                    timeout()
                }));
            }
            // The key just ahead of ours, if any.
            let options = GetOptions::new()
                .with_prefix()
                .with_max_create_revision(q.revision - 1)
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(1)
                .with_keys_only();
            let ahead: GetResponse = match self.get(dir.clone(), options).await {
                Ok(r) => r,
                Err(e) => {
                    last_error = Some(map_error(e, Op::read("find the key ahead")));
                    self.pause_keeping_alive(
                        q,
                        request,
                        &mut alive_since,
                        &mut next_refresh,
                        give_up,
                        interval,
                    )
                    .await
                    .map_err(|()| lost())?;
                    continue 'recheck;
                }
            };
            let Some(predecessor) = ahead.kvs().first() else {
                break 'recheck;
            };
            let from = ahead.header().map_or(0, |h| h.revision()) + 1;
            let watch_options = WatchOptions::new()
                .with_start_revision(from)
                .with_filters([WatchFilterType::NoPut]);
            let stream = self
                .watch(predecessor.key().to_vec(), watch_options.clone())
                .await;
            let mut stream = match stream {
                Ok(s) => s,
                Err(e) => {
                    last_error = Some(map_error(e, Op::read("watch the key ahead")));
                    self.pause_keeping_alive(
                        q,
                        request,
                        &mut alive_since,
                        &mut next_refresh,
                        give_up,
                        interval,
                    )
                    .await
                    .map_err(|()| lost())?;
                    continue 'recheck;
                }
            };
            // Our own key too: if our lease ends while we wait, stop at once.
            if let Err(e) = stream.watch(q.key.clone(), Some(watch_options)).await {
                last_error = Some(map_error(e.into(), Op::read("watch our key")));
                continue 'recheck;
            }
            loop {
                tokio::select! {
                    message = stream.message() => match message {
                        Ok(Some(response)) => {
                            let ours_gone = response.events().iter().any(|e| {
                                e.event_type() == EventType::Delete
                                    && e.kv().is_some_and(|kv| kv.key() == q.key.as_bytes())
                            });
                            if ours_gone {
                                return Err(lost());
                            }
                            if response.canceled() || !response.events().is_empty() {
                                continue 'recheck;
                            }
                        }
                        Ok(None) => continue 'recheck,
                        Err(e) => {
                            last_error = Some(map_error(e.into(), Op::read("watch the key ahead")));
                            tokio::time::sleep(RETRY_PAUSE.min(give_up.saturating_duration_since(Instant::now()))).await;
                            continue 'recheck;
                        }
                    },
                    () = tokio::time::sleep_until(next_refresh.into()) => {
                        self.refresh_while_queued(q, request, &mut alive_since, &mut next_refresh, interval)
                            .await
                            .map_err(|()| lost())?;
                    }
                    () = tokio::time::sleep_until(give_up.into()) => return Err(timeout()),
                }
            }
        }

        // Our turn. Never report a grant on a lease that ended while we
        // were queued (etcd#11456): a fresh keep-alive proves the lease is
        // alive, then one transaction proves our key still carries it.
        loop {
            let sent = Instant::now();
            match self.keep_alive_once(q.lease_id).await {
                Ok(()) => {
                    let txn = Txn::new().when([
                        Compare::create_revision(q.key.clone(), CompareOp::Equal, q.revision),
                        Compare::lease(q.key.clone(), CompareOp::Equal, q.lease_id),
                    ]);
                    match self.txn(txn).await {
                        Ok(r) if r.succeeded() => return Ok(sent),
                        Ok(_) => return Err(lost()),
                        Err(e) => last_error = Some(map_error(e, Op::read("check our key"))),
                    }
                }
                Err(e) if lease_not_found(&e) => return Err(lost()),
                Err(e) => last_error = Some(map_error(e, Op::read("keep our lease alive"))),
            }
            let now = Instant::now();
            if now >= alive_since + request.ttl {
                return Err(lost());
            }
            if now >= give_up {
                tracing::debug!(error = ?last_error, "acquire gave up in its final check");
                return Err(timeout());
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// Sleeps a little after a failed call, still keeping the lease alive.
    /// `Err(())` if the lease is lost.
    async fn pause_keeping_alive(
        &self,
        q: &Queued,
        request: &LeaseRequest,
        alive_since: &mut Instant,
        next_refresh: &mut Instant,
        give_up: Instant,
        interval: Duration,
    ) -> std::result::Result<(), ()> {
        let until = (Instant::now() + RETRY_PAUSE).min(give_up);
        if *next_refresh <= until {
            tokio::time::sleep_until((*next_refresh).into()).await;
            self.refresh_while_queued(q, request, alive_since, next_refresh, interval)
                .await?;
        }
        tokio::time::sleep_until(until.into()).await;
        Ok(())
    }

    /// One keep-alive of a queued key's lease. `Err(())` if the lease is
    /// gone, or could not be refreshed before its TTL ran out.
    async fn refresh_while_queued(
        &self,
        q: &Queued,
        request: &LeaseRequest,
        alive_since: &mut Instant,
        next_refresh: &mut Instant,
        interval: Duration,
    ) -> std::result::Result<(), ()> {
        let sent = Instant::now();
        match self.keep_alive_once(q.lease_id).await {
            Ok(()) => {
                *alive_since = sent;
                *next_refresh = sent + interval;
                Ok(())
            }
            Err(e) if lease_not_found(&e) => Err(()),
            Err(e) => {
                tracing::debug!(error = ?e, "keep-alive of a queued lease failed");
                if Instant::now() >= *alive_since + request.ttl {
                    return Err(());
                }
                *next_refresh = Instant::now() + RETRY_PAUSE;
                Ok(())
            }
        }
    }

    /// One keep-alive: `Ok` if etcd extended the lease.
    async fn keep_alive_once(&self, lease_id: i64) -> std::result::Result<(), Failure> {
        let (_keeper, _stream) = self
            .call(|mut c| async move { c.lease_keep_alive(lease_id).await })
            .await?;
        Ok(())
    }

    /// Revokes a lease, ignoring failures (it expires by itself).
    async fn revoke_quietly(&self, lease_id: i64) {
        if let Err(e) = self.revoke(lease_id).await {
            tracing::debug!(lease_id, error = ?e, "revoking a lease failed; it will expire by itself");
        }
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
    /// nothing else, even if the key is gone by the time we use it.
    async fn find_key(&self, lease: &Lease, op: &str) -> Result<Option<KeyValue>> {
        let (offset, keys) = self
            .floor_and(lease.resource(), GetOptions::new().with_prefix())
            .await
            .map_err(|e| map_error(e, Op::read(op)))?;
        Ok(keys.into_iter().find(|kv| {
            token_of(kv.create_revision(), offset) == lease.token()
                && kv.value() == lease.holder().as_str().as_bytes()
        }))
    }

    /// `{prefix}%floor/{escaped resource}`: the resource's floor offset,
    /// added to every create revision. (No resource directory can contain
    /// it: escaped names have `%` only in `%25` and `%2F`.)
    fn floor_key(&self, resource: &str) -> String {
        format!("{}%floor/{}", self.inner.prefix, escape(resource))
    }

    /// The resource's floor offset and its lock keys (as `options` select
    /// them), read in one transaction.
    async fn floor_and(
        &self,
        resource: &str,
        options: GetOptions,
    ) -> std::result::Result<(u64, Vec<KeyValue>), Failure> {
        let txn = Txn::new().and_then([
            TxnOp::get(self.floor_key(resource), None),
            TxnOp::get(self.dir(resource), Some(options)),
        ]);
        let response = self.txn(txn).await?;
        let mut gets = response.op_responses().into_iter().filter_map(|r| match r {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        });
        let (floor, mut keys) = (gets.next(), gets.next());
        let offset = parse_floor(floor.as_ref())
            .map_err(|e| Failure::Etcd(etcd_client::Error::InvalidArgs(e.to_string())))?;
        Ok((
            offset,
            keys.as_mut().map(GetResponse::take_kvs).unwrap_or_default(),
        ))
    }
}

/// Removes the lock key of an acquire that did not finish (an error, a
/// timeout, or a caller that dropped the future), so it never becomes a
/// holder nobody knows about.
struct RevokeOnDrop {
    issuer: EtcdIssuer,
    lease_id: Option<i64>,
}

impl RevokeOnDrop {
    async fn revoke(mut self) {
        if let Some(id) = self.lease_id.take() {
            self.issuer.revoke_quietly(id).await;
        }
    }

    fn disarm(mut self) {
        self.lease_id = None;
    }
}

impl Drop for RevokeOnDrop {
    fn drop(&mut self) {
        if let (Some(id), Ok(runtime)) = (self.lease_id, tokio::runtime::Handle::try_current()) {
            let issuer = self.issuer.clone();
            runtime.spawn(async move { issuer.revoke_quietly(id).await });
        }
    }
}

#[async_trait]
impl TokenIssuer for EtcdIssuer {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn min_ttl(&self) -> Duration {
        self.inner.min_ttl
    }

    /// The generic probe, plus etcd's membership: how many members vote
    /// (one is a warning: no failover), each member's status and health on
    /// its own connection (unreachable is a warning: raft keeps tokens
    /// safe, grants only wait), one agreed leader, the connect endpoints
    /// all in one cluster (two clusters are unsafe: unrelated revisions),
    /// and etcd's alarms (`CORRUPT` is unsafe, `NOSPACE` a warning). Not
    /// checked: auto-compaction, which cannot hurt tokens (a live key keeps
    /// its create revision; a waiter's watch starts from a fresh read).
    async fn verify(&self) -> Result<Vec<fencing_core::safety::SafetyCheck>> {
        crate::verify::verify(self).await
    }

    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
        let (queued, first) = self.enqueue(request).await?;
        let guard = RevokeOnDrop {
            issuer: self.clone(),
            lease_id: Some(queued.lease_id),
        };
        if first {
            guard.disarm();
            return Ok(Some(Lease::new(request, queued.token(), queued.granted_at)));
        }
        // Someone holds it: take our key out of the queue again. (Should
        // this future be dropped meanwhile, the guard revokes in the
        // background.)
        self.revoke(queued.lease_id)
            .await
            .map_err(|e| map_error(e, Op::write("revoke the lease of a refused try")))?;
        guard.disarm();
        Ok(None)
    }

    async fn acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Lease> {
        let started = Instant::now();
        let give_up = started + wait;
        let (queued, first) = self.enqueue(request).await?;
        let guard = RevokeOnDrop {
            issuer: self.clone(),
            lease_id: Some(queued.lease_id),
        };
        if first {
            guard.disarm();
            return Ok(Lease::new(request, queued.token(), queued.granted_at));
        }
        match self.wait_turn(&queued, request, give_up, started).await {
            Ok(alive_at) => {
                guard.disarm();
                Ok(Lease::new(request, queued.token(), alive_at))
            }
            Err(e) => {
                guard.revoke().await;
                Err(e)
            }
        }
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let lost = || Error::LeaseLost {
            resource: lease.resource().to_owned(),
            token: lease.token(),
        };
        if self.is_abandoned(lease) {
            return Err(lost());
        }
        let Some(key) = self.find_key(lease, "find our lock key").await? else {
            return Err(lost());
        };
        let sent = Instant::now();
        self.keep_alive_once(key.lease()).await.map_err(|e| {
            map_error(
                e,
                Op::read("keep the lease alive").on_lease(lease.resource(), lease.token()),
            )
        })?;
        Ok(lease.renewed(sent))
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let Some(key) = self.find_key(lease, "find our lock key").await? else {
            // Our key is gone for good (keys are never re-created with a
            // past create revision).
            self.forget_abandoned(lease);
            return Err(Error::LeaseLost {
                resource: lease.resource().to_owned(),
                token: lease.token(),
            });
        };
        let revoked = self.revoke(key.lease()).await.map_err(|e| {
            map_error(
                e,
                Op::write("revoke the lease").on_lease(lease.resource(), lease.token()),
            )
        });
        // Keep an abandoned lease refused while etcd may still have it.
        if !matches!(&revoked, Err(e) if e.is_retryable()) {
            self.forget_abandoned(lease);
        }
        revoked
    }

    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        let (offset, keys) = self
            .floor_and(resource, first_created())
            .await
            .map_err(|e| map_error(e, Op::read("find the holder")))?;
        let Some(first) = keys.into_iter().next() else {
            return Ok(None);
        };
        let holder = first
            .value_str()
            .ok()
            .and_then(|v| HolderId::new(v).ok())
            .ok_or_else(|| {
                Error::backend(
                    BACKEND,
                    false,
                    format!(
                        "lock key {:?} does not hold a holder id",
                        String::from_utf8_lossy(first.key())
                    ),
                )
            })?;
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
    /// [`Error::InvalidInput`] while the resource is held or waited for.
    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        let floor_key = self.floor_key(resource);
        let op = Op::write("raise the floor");
        for _ in 0..20 {
            let response = self
                .get(floor_key.clone(), GetOptions::new())
                .await
                .map_err(|e| map_error(e, Op::read("read the floor")))?;
            let offset = parse_floor(Some(&response))?;
            let version = response.kvs().first().map_or(0, KeyValue::mod_revision);
            let revision =
                u64::try_from(response.header().map_or(0, |h| h.revision())).unwrap_or(0);
            // The next key's revision is above `revision`.
            let needed = floor.get().saturating_sub(revision);
            if needed <= offset {
                return Ok(());
            }
            if needed > MAX_OFFSET {
                return Err(Error::TokenOutOfRange {
                    token: floor,
                    max: FencingToken::new(revision.saturating_add(MAX_OFFSET)),
                });
            }
            let txn = Txn::new()
                .when([
                    Compare::create_revision(self.dir(resource), CompareOp::Equal, 0).with_prefix(),
                    Compare::mod_revision(floor_key.clone(), CompareOp::Equal, version),
                ])
                .and_then([TxnOp::put(floor_key.clone(), needed.to_string(), None)])
                .or_else([TxnOp::get(
                    self.dir(resource),
                    Some(GetOptions::new().with_prefix().with_count_only()),
                )]);
            let response = self.txn(txn).await.map_err(|e| map_error(e, op))?;
            if response.succeeded() {
                return Ok(());
            }
            let busy = response
                .op_responses()
                .into_iter()
                .any(|r| matches!(r, TxnOpResponse::Get(g) if g.count() > 0));
            if busy {
                return Err(Error::invalid_input(format!(
                    "{resource:?} is held or waited for; raise its floor while it is free"
                )));
            }
            // The floor moved under us: read it again.
        }
        Err(Error::Contention {
            key: floor_key,
            attempts: 20,
        })
    }
}

/// `{prefix}{escaped resource}/`: every lock key of the resource, and only
/// its keys, start with this (`/` is escaped as `%2F`, `%` as `%25`).
fn resource_dir(prefix: &str, resource: &str) -> String {
    format!("{prefix}{}/", escape(resource))
}

/// A resource name with `%` and `/` escaped.
fn escape(resource: &str) -> String {
    let mut dir = String::with_capacity(resource.len());
    for c in resource.chars() {
        match c {
            '%' => dir.push_str("%25"),
            '/' => dir.push_str("%2F"),
            c => dir.push(c),
        }
    }
    dir
}

/// The key under a prefix with the lowest create revision.
fn first_created() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1)
}

/// The largest floor offset `raise_floor` writes: any etcd revision (an
/// `i64`) plus it still fits a `u64` token, so a floor can never make a
/// later grant overflow. A floor above `revision + MAX_OFFSET` is refused
/// with [`Error::TokenOutOfRange`].
const MAX_OFFSET: u64 = u64::MAX - i64::MAX as u64;

/// A lease's entry in the abandoned set.
fn abandoned_key(lease: &Lease) -> (String, u64) {
    (lease.resource().to_owned(), lease.token().get())
}

/// A token: the create revision plus the resource's floor offset
/// (checked for room when the key is created). etcd revisions start at 1
/// and never go negative.
fn token_of(revision: i64, offset: u64) -> FencingToken {
    FencingToken::new(u64::try_from(revision).unwrap_or(0).saturating_add(offset))
}

/// The floor offset stored at a floor key: 0 if absent.
fn parse_floor(response: Option<&GetResponse>) -> Result<u64> {
    let Some(kv) = response.and_then(|r| r.kvs().first()) else {
        return Ok(0);
    };
    kv.value_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            Error::backend(
                BACKEND,
                false,
                format!(
                    "floor key {:?} holds no number",
                    String::from_utf8_lossy(kv.key())
                ),
            )
        })
}

/// A TTL in whole etcd seconds, rounded up: rounding down would let etcd
/// end the lease before the holder's local deadline.
fn whole_seconds(request: &LeaseRequest) -> Result<i64> {
    // `ttl_secs_ceil` overflows near `Duration::MAX`: refuse such TTLs first.
    fencing_core::check_ttl(request.ttl)?;
    i64::try_from(request.ttl_secs_ceil())
        .map_err(|_| Error::invalid_input(format!("ttl {:?} is too long for etcd", request.ttl)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_to_whole_seconds() {
        let secs = |ttl| whole_seconds(&LeaseRequest::new("r", ttl));
        assert_eq!(secs(Duration::from_secs(2)).unwrap(), 2);
        assert_eq!(secs(Duration::from_millis(2001)).unwrap(), 3);
        assert_eq!(secs(Duration::from_millis(2500)).unwrap(), 3);
        assert_eq!(secs(Duration::from_millis(1)).unwrap(), 1);
        assert!(secs(Duration::MAX).is_err());
    }

    #[test]
    fn every_revision_plus_the_largest_offset_fits() {
        assert_eq!(token_of(i64::MAX, MAX_OFFSET), FencingToken::new(u64::MAX));
        assert!(
            u64::try_from(i64::MAX)
                .unwrap()
                .checked_add(MAX_OFFSET)
                .is_some()
        );
    }

    #[test]
    fn no_resource_dir_is_a_prefix_of_another() {
        assert_eq!(resource_dir("fencing/", "jobs/a"), "fencing/jobs%2Fa/");
        assert_eq!(resource_dir("p/", "50%/x"), "p/50%25%2Fx/");
        let a = resource_dir("p/", "a");
        for other in ["a/b", "a%2Fb", "a/", "a%"] {
            assert!(!resource_dir("p/", other).starts_with(&a), "{other}");
        }
    }
}
