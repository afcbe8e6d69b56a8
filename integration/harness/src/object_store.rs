//! What the S3, GCS and Azure emulator tests share: this run's bucket, its
//! set-up against a server that may be missing, and the cases every object
//! store runs the same way (a refused connection, a lost answer, objects
//! written without fencing, a foreign overwrite, a missing bucket) and the
//! bucket issuer's own ([`bucket_issuer_cases`]), each adapter supplying
//! only its SDK's calls (an [`Emulator`]).

use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use std::time::{Duration, Instant, SystemTime};

use fencing_core::adapter::blob::{BlobBackend, BlobIssuer, BlobMeta, BlobStore, LeaseExpiry};
use fencing_core::{Error, FencedStore, FencingToken, LeaseRequest, Result, TokenIssuer};
use fencing_testkit::blob::{AfterTampering, tampering_cannot_lower_the_mark};

use crate::env::Server;
use crate::error_chain;
use crate::proxy::{AnswerDroppingProxy, DateShiftingProxy};

/// Token `n`.
pub fn t(n: u64) -> FencingToken {
    FencingToken::new(n)
}

/// This run's bucket (or container) name for `store`: `ft-3f9a0c1b-s3`,
/// the same for every test of this binary.
pub fn run_bucket(store: &str) -> String {
    static PREFIX: OnceLock<String> = OnceLock::new();
    let prefix = PREFIX.get_or_init(fencing_testkit::unique_prefix);
    format!("{prefix}-{store}")
}

/// Runs `setup(endpoint, bucket)` with `server`'s endpoint and
/// [`run_bucket(store)`](run_bucket) (to create this run's bucket, say):
/// `None` when the run asked to skip the server; a retryable error (nothing
/// answering) fails naming the server and how to start it; any other error
/// fails naming the bucket.
pub async fn set_up<T>(
    server: &Server,
    store: &str,
    setup: impl AsyncFnOnce(&str, &str) -> Result<T>,
) -> Option<T> {
    if server.skipped() {
        return None;
    }
    let bucket = run_bucket(store);
    match setup(&server.endpoint(), &bucket).await {
        Ok(done) => Some(done),
        Err(e) if e.is_retryable() => server.unavailable(&error_chain(&e)),
        Err(e) => panic!("cannot set up {bucket}: {}", error_chain(&e)),
    }
}

/// One object store's emulator as its tests reach it: the SDK calls the
/// shared cases below need.
pub trait Emulator {
    /// The adapter's backend.
    type Backend: BlobBackend + Clone + 'static;
    /// The server, as [`crate::env`] finds it.
    const SERVER: Server;
    /// The backend's name (in its errors) and this run's bucket's suffix.
    const NAME: &'static str;
    /// Whether a read tells when the object was last written
    /// ([`StoredObject::modified`](fencing_core::adapter::blob::StoredObject::modified)):
    /// GCS's downloads do not, and its bucket issuer judges expiry on the
    /// waiter's clock alone.
    const READS_TELL_MODIFIED: bool = true;

    /// A backend on `bucket` at `endpoint`, created there if needed, with
    /// the emulator's credentials.
    fn set_up(endpoint: &str, bucket: &str) -> impl Future<Output = Result<Self::Backend>>;

    /// A backend on `bucket` at `endpoint` (a proxy in front of the server,
    /// say), nothing sent yet.
    fn backend_at(endpoint: &str, bucket: &str) -> impl Future<Output = Self::Backend>;

    /// Writes `body` at `key` with the SDK alone, as a program that knows
    /// nothing of fencing.
    fn put_foreign(
        backend: Self::Backend,
        key: String,
        body: &'static [u8],
    ) -> impl Future<Output = ()>;

    /// Deletes `key` with the SDK alone, as a person or a lifecycle rule
    /// would.
    fn delete(backend: Self::Backend, key: String) -> impl Future<Output = ()>;
}

/// A backend on this run's bucket of `E` (created if needed), or `None`
/// when the run asked to skip the server ([`set_up`]).
pub async fn backend<E: Emulator>() -> Option<E::Backend> {
    set_up(&E::SERVER, E::NAME, async |endpoint, bucket| {
        E::set_up(endpoint, bucket).await
    })
    .await
}

/// [`backend`] and a fenced store on it.
pub async fn store<E: Emulator>() -> Option<(E::Backend, BlobStore<E::Backend>)> {
    let backend = backend::<E>().await?;
    Some((backend.clone(), BlobStore::new(backend)))
}

/// [`backend`] and the bucket issuer on it, its lease records under a
/// prefix of their own (one per call, so tests do not share records).
pub async fn issuer<E: Emulator>() -> Option<BlobIssuer<E::Backend>> {
    let backend = backend::<E>().await?;
    let prefix = format!("{}-lease/", fencing_testkit::unique_prefix());
    Some(BlobIssuer::new(backend).with_prefix(prefix))
}

/// The bucket issuer's cases on a real server, beyond the issuer suite:
/// - the answers tell the server's time, so a new record starts at the
///   server's time in microseconds (a record deleted by hand cannot
///   restart its tokens);
/// - a newcomer (a backend of its own, as in another process) waits a TTL
///   of its own clock on a lease its holder abandoned long ago; with
///   `server-clocks-agree`, where reads tell the record's last write, it
///   takes over on its first try;
/// - with `server-clocks-agree`, one answer dated ahead does not end a live
///   lease ([`one_fast_date_does_not_end_a_live_lease`]);
/// - by default, a front end whose clock runs 30 s ahead neither ends a
///   live lease nor a dead one before a TTL of the waiter's own clock
///   ([`a_front_end_clock_ahead_does_not_end_a_live_lease`]);
/// - a released record is free at once, for a newcomer too;
/// - a record deleted and made again within its second starts above the
///   deleted one's tokens;
/// - one bucket as issuer and store: the zombie is refused;
/// - `verify` finds nothing unsafe.
pub async fn bucket_issuer_cases<E: Emulator>() {
    let Some(holder) = issuer::<E>().await else {
        return;
    };
    let ttl = Duration::from_millis(300);
    let request = LeaseRequest::new("abandoned", ttl);
    let dead = holder
        .try_acquire(&request)
        .await
        .expect("grant")
        .expect("free");
    let now = holder.backend().server_now().unwrap_or_else(|| {
        panic!(
            "{}: no server time after a grant: its answers' Date is not read",
            E::NAME
        )
    });
    let micros = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_micros();
    let first = u128::from(dead.token().get());
    assert!(
        first + 10_000_000 >= micros && first <= micros + 10_000_000,
        "{}: a new record started at token {first}, not at the server's time ({micros} µs)",
        E::NAME
    );
    // Past TTL + 2 s: the server-clocks rule's second for the rounding of
    // Last-Modified, and one more for the newcomer's estimate of the
    // server's clock, which starts from a `Date` rounded down.
    tokio::time::sleep(ttl + Duration::from_millis(2300)).await;
    let own_backend = E::backend_at(&E::SERVER.endpoint(), &run_bucket(E::NAME)).await;
    // The default: a newcomer has not timed the record itself, so it waits
    // a TTL of its own clock however long ago the holder died.
    let newcomer = BlobIssuer::new(own_backend.clone()).with_prefix(holder.prefix());
    assert_eq!(newcomer.expiry(), LeaseExpiry::WaiterClock);
    let first_try = newcomer.try_acquire(&request).await.expect("try_acquire");
    assert!(
        first_try.is_none(),
        "{}: a newcomer took over on its first try, judging by the server's clocks",
        E::NAME
    );
    // Opted in: where reads tell the record's last write, the server's
    // clocks show it dead, and a newcomer takes over on its first try.
    let agreeing = BlobIssuer::new(own_backend)
        .with_prefix(holder.prefix())
        .with_expiry(LeaseExpiry::ServerClocksAgree);
    let first_try = agreeing.try_acquire(&request).await.expect("try_acquire");
    let (taken, by) = match (first_try, E::READS_TELL_MODIFIED) {
        (Some(taken), true) => (taken, &agreeing),
        (None, true) => panic!(
            "{}: with server-clocks-agree, a newcomer waited on a lease its server's clock \
             shows dead for two seconds",
            E::NAME
        ),
        (Some(_), false) => panic!(
            "{}: a newcomer took over at once, with no server time to judge by",
            E::NAME
        ),
        (None, false) => {
            tokio::time::sleep(ttl).await;
            let taken = newcomer
                .try_acquire(&request)
                .await
                .expect("try_acquire")
                .expect("the newcomer saw the same version for a TTL");
            (taken, &newcomer)
        }
    };
    assert!(taken.token() > dead.token());
    by.release(&taken).await.expect("release");

    if E::READS_TELL_MODIFIED {
        one_fast_date_does_not_end_a_live_lease::<E>(&holder).await;
    }
    a_front_end_clock_ahead_does_not_end_a_live_lease::<E>(&holder).await;
    a_released_record_is_free_at_once::<E>(&holder).await;
    a_record_made_again_within_its_second_starts_above::<E>(&holder).await;

    let store = BlobStore::new(holder.backend().clone()).with_lease_prefix(holder.prefix());
    fencing_testkit::zombie::zombie_is_refused(&holder, &store, Duration::from_millis(600)).await;
    a_store_does_not_write_a_lease_record::<E>(&holder, &store).await;

    let checks = holder.verify().await.expect("verify");
    assert!(
        checks
            .iter()
            .all(fencing_core::safety::SafetyCheck::is_safe),
        "{}: verify found a problem: {checks:#?}",
        E::NAME
    );
}

/// With `server-clocks-agree`, a waiter that once saw an answer dated 30 s
/// ahead (a gateway with a fast clock, an error page a proxy stamped, a
/// server whose clock then stepped back) still sees a live 20 s lease as
/// live: expiry is judged by the `Date` of the answer that carried the
/// record, not by the highest `Date` ever seen. (Where reads tell no modified time, expiry is never
/// judged on the server's clock, and there is nothing to move.)
pub async fn one_fast_date_does_not_end_a_live_lease<E: Emulator>(holder: &BlobIssuer<E::Backend>) {
    let (proxy, proxied) = DateShiftingProxy::in_front_of(&E::SERVER.endpoint()).await;
    let waiter = BlobIssuer::new(E::backend_at(&proxied, &run_bucket(E::NAME)).await)
        .with_prefix(holder.prefix())
        .with_expiry(LeaseExpiry::ServerClocksAgree);
    let request = LeaseRequest::new("fast-date", Duration::from_secs(20));
    let live = holder
        .try_acquire(&request)
        .await
        .expect("grant")
        .expect("free");
    proxy.shift_dates(Duration::from_secs(30), 1);
    // A 404, dated 30 s ahead.
    let nobody = waiter.holder("fast-date-nobody").await.expect("holder");
    assert!(nobody.is_none());
    assert_eq!(
        proxy.shifted(),
        1,
        "{}: the answer's Date was not moved",
        E::NAME
    );
    let taken = waiter.try_acquire(&request).await.expect("try_acquire");
    assert!(
        taken.is_none(),
        "{}: a waiter that saw one answer dated 30 s ahead took over a live 20 s lease \
         (holder's token {}, the waiter's {:?}): two holders at once",
        E::NAME,
        live.token(),
        taken.map(|t| t.token()),
    );
    assert_eq!(
        waiter
            .holder("fast-date")
            .await
            .expect("holder")
            .map(|h| h.token),
        Some(live.token()),
        "{}: the live holder was judged dead",
        E::NAME
    );
    holder.release(&live).await.expect("release");
}

/// A waiter whose every answer comes from a front end (a node of a
/// self-hosted S3-compatible cluster, a proxy) whose clock runs 30 s ahead
/// of the node that stamped the record: it neither takes over a live 20 s
/// lease (two holders at once) nor a dead one before it has seen that
/// record unchanged for a whole TTL of its own monotonic clock.
pub async fn a_front_end_clock_ahead_does_not_end_a_live_lease<E: Emulator>(
    holder: &BlobIssuer<E::Backend>,
) {
    let (proxy, proxied) = DateShiftingProxy::in_front_of(&E::SERVER.endpoint()).await;
    proxy.shift_dates(Duration::from_secs(30), usize::MAX);
    let waiter = BlobIssuer::new(E::backend_at(&proxied, &run_bucket(E::NAME)).await)
        .with_prefix(holder.prefix());
    let request = LeaseRequest::new("front-end-ahead", Duration::from_secs(20));
    let live = holder
        .try_acquire(&request)
        .await
        .expect("grant")
        .expect("free");
    let taken = waiter.try_acquire(&request).await.expect("try_acquire");
    assert!(
        proxy.shifted() > 0,
        "{}: no answer's Date was moved",
        E::NAME
    );
    assert!(
        taken.is_none(),
        "{}: a waiter whose front end's clock runs 30 s ahead took over a live 20 s lease \
         (holder's token {}, the waiter's {:?}): two holders at once",
        E::NAME,
        live.token(),
        taken.map(|t| t.token()),
    );
    assert_eq!(
        waiter
            .holder("front-end-ahead")
            .await
            .expect("holder")
            .map(|h| h.token),
        Some(live.token()),
        "{}: the live holder was judged dead",
        E::NAME
    );
    if E::READS_TELL_MODIFIED {
        // What `server-clocks-agree` assumes away, shown: behind the same
        // front end, it takes over the live lease (two holders at once).
        let agreeing = BlobIssuer::new(E::backend_at(&proxied, &run_bucket(E::NAME)).await)
            .with_prefix(holder.prefix())
            .with_expiry(LeaseExpiry::ServerClocksAgree);
        let second = agreeing.try_acquire(&request).await.expect("try_acquire");
        assert!(
            second.is_some(),
            "{}: server-clocks-agree no longer judges by the Date of the answer: its docs \
             describe a failure mode it does not have",
            E::NAME
        );
    } else {
        holder.release(&live).await.expect("release");
    }

    // A holder that stops renewing: the waiter takes over a TTL of its own
    // clock after it first saw the record, not before.
    let ttl = Duration::from_secs(2);
    let request = LeaseRequest::new("front-end-ahead-dead", ttl);
    let dead = holder
        .try_acquire(&request)
        .await
        .expect("grant")
        .expect("free");
    let first_try = Instant::now();
    let taken = loop {
        if let Some(taken) = waiter.try_acquire(&request).await.expect("try_acquire") {
            break taken;
        }
        assert!(
            first_try.elapsed() < ttl * 3,
            "{}: a dead lease was never taken over",
            E::NAME
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let waited = first_try.elapsed();
    assert!(
        waited >= ttl,
        "{}: a waiter whose front end's clock runs 30 s ahead took over a {ttl:?} lease \
         {waited:?} after it first saw it, before a TTL of its own clock",
        E::NAME
    );
    assert!(taken.token() > dead.token());
    waiter.release(&taken).await.expect("release");
}

/// A record its holder released is free at once, for a newcomer that has
/// never seen it too: no TTL is waited.
pub async fn a_released_record_is_free_at_once<E: Emulator>(holder: &BlobIssuer<E::Backend>) {
    let request = LeaseRequest::new("released", Duration::from_secs(20));
    let released = holder
        .try_acquire(&request)
        .await
        .expect("grant")
        .expect("free");
    holder.release(&released).await.expect("release");
    let newcomer =
        BlobIssuer::new(E::backend_at(&E::SERVER.endpoint(), &run_bucket(E::NAME)).await)
            .with_prefix(holder.prefix());
    let taken = newcomer
        .try_acquire(&request)
        .await
        .expect("try_acquire")
        .unwrap_or_else(|| panic!("{}: a released record was not free at once", E::NAME));
    assert!(taken.token() > released.token());
    newcomer.release(&taken).await.expect("release");
}

/// A lease record deleted by hand (or by a lifecycle rule) and made again
/// at once by a newcomer that has seen nothing, within the same second of
/// the server's clock (`Date` and `Last-Modified` count whole seconds):
/// its first token is above every token the deleted record gave. Three
/// rounds, each starting a tenth of a second into a second of this host's
/// clock (the emulator's).
pub async fn a_record_made_again_within_its_second_starts_above<E: Emulator>(
    holder: &BlobIssuer<E::Backend>,
) {
    for round in 0..3 {
        let resource = format!("made-again-{round}");
        let request = LeaseRequest::new(resource.as_str(), Duration::from_secs(20));
        let into_second = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after 1970")
            .subsec_nanos();
        let to_wait = (1_100_000_000 - u64::from(into_second)) % 1_000_000_000;
        tokio::time::sleep(Duration::from_nanos(to_wait)).await;
        let started = Instant::now();
        let mut tokens = Vec::new();
        for _ in 0..2 {
            let lease = holder
                .try_acquire(&request)
                .await
                .expect("grant")
                .expect("free");
            tokens.push(lease.token().get());
            holder.release(&lease).await.expect("release");
        }
        E::delete(holder.backend().clone(), holder.record_key(&resource)).await;
        let newcomer =
            BlobIssuer::new(E::backend_at(&E::SERVER.endpoint(), &run_bucket(E::NAME)).await)
                .with_prefix(holder.prefix());
        let again = newcomer
            .try_acquire(&request)
            .await
            .expect("grant")
            .expect("free");
        assert!(
            again.token().get() > tokens[1],
            "{}: tokens {tokens:?}, the record deleted, then {} from a newcomer \
             {:?} after the first grant: tokens went back",
            E::NAME,
            again.token(),
            started.elapsed(),
        );
        newcomer.release(&again).await.expect("release");
    }
}

/// One bucket as issuer and store: the store refuses a key under the
/// lease prefix (its frame would make the record foreign, or set the
/// counter), writes nothing, and the lease goes on.
async fn a_store_does_not_write_a_lease_record<E: Emulator>(
    issuer: &BlobIssuer<E::Backend>,
    store: &BlobStore<E::Backend>,
) {
    let request = LeaseRequest::new("shared-bucket", Duration::from_secs(20));
    let lease = issuer
        .try_acquire(&request)
        .await
        .expect("grant")
        .expect("free");
    let key = issuer.record_key("shared-bucket");
    for attempt in [
        store.put(&key, "v".into(), lease.token()).await,
        store.fence(&key, lease.token()).await.map(drop),
        store.delete(&key, lease.token()).await,
    ] {
        assert!(
            matches!(&attempt, Err(Error::InvalidInput { .. })),
            "{}: a store write to the lease record {key:?}: {attempt:?}",
            E::NAME
        );
    }
    let renewed = issuer.renew(&lease).await.expect("the lease goes on");
    issuer.release(&renewed).await.expect("release");
}

/// The store of `E` at an address where nothing listens: setting it up is
/// a retryable backend error (what a test turns into "start it with
/// integration/services.sh").
pub async fn set_up_without_a_server_is_retryable<E: Emulator>(nowhere: &str) {
    assert_backend_error(E::set_up(nowhere, "nowhere").await, E::NAME, true);
}

/// A write to a bucket that does not exist on `E`'s server: a permanent
/// backend error, the SDK's error chained. Returns the store and the error
/// for the adapter's own checks, or `None` when the run skips the server.
pub async fn a_missing_bucket_is_permanent<E: Emulator>() -> Option<(BlobStore<E::Backend>, Error)>
{
    backend::<E>().await?;
    let bucket = format!("{}-missing", run_bucket(E::NAME));
    let missing = BlobStore::new(E::backend_at(&E::SERVER.endpoint(), &bucket).await);
    let e = assert_backend_error(missing.put("k", "v".into(), t(1)).await, E::NAME, false);
    assert!(
        std::error::Error::source(&e).is_some(),
        "not chained: {e:?}"
    );
    Some((missing, e))
}

/// [`unfenced_objects_are_refused_unless_adopted`] on `E`'s backend with
/// its [`Emulator::put_foreign`]: the backend and the key, or `None` when
/// the run skips the server.
pub async fn unfenced_objects_on<E: Emulator>() -> Option<(E::Backend, String)> {
    let backend = backend::<E>().await?;
    let put_foreign = |key, body| E::put_foreign(backend.clone(), key, body);
    let key = unfenced_objects_are_refused_unless_adopted(&backend, put_foreign).await;
    Some((backend, key))
}

/// [`a_lost_answer_is_an_unknown_outcome`] on `E`, through an
/// [`AnswerDroppingProxy`] in front of its server dropping the answer of
/// the request starting with `write_prefix`: the backend and the key, or
/// `None` when the run skips the server.
pub async fn a_lost_answer_on<E: Emulator>(write_prefix: &[u8]) -> Option<(E::Backend, String)> {
    let backend = backend::<E>().await?;
    let (proxy, proxied) = AnswerDroppingProxy::in_front_of(&E::SERVER.endpoint()).await;
    let through_proxy = BlobStore::new(E::backend_at(&proxied, &run_bucket(E::NAME)).await);
    let direct = BlobStore::new(backend.clone());
    let key =
        a_lost_answer_is_an_unknown_outcome(through_proxy, &direct, &proxy, write_prefix).await;
    Some((backend, key))
}

/// The metadata of a value written at token `n`.
pub fn meta(n: u64) -> BlobMeta {
    BlobMeta {
        token: t(n),
        has_value: true,
    }
}

/// Asserts `result` is an [`Error::Backend`] of `backend` that is (or is
/// not) `retryable`, and returns it.
///
/// # Panics
/// For any other result.
pub fn assert_backend_error<T: Debug>(result: Result<T>, backend: &str, retryable: bool) -> Error {
    let e = result.expect_err("a backend error");
    match &e {
        Error::Backend {
            backend: b,
            retryable: r,
            ..
        } if *b == backend && *r == retryable => {}
        _ => panic!("expected a {backend} backend error (retryable: {retryable}), got {e:?}"),
    }
    e
}

/// A store whose server does not listen: a put and a read are both
/// retryable backend errors of `backend`.
pub async fn refused_connections_are_retryable(store: &dyn FencedStore, backend: &str) {
    let put = store.put("k", "v".into(), FencingToken::new(1)).await;
    assert_backend_error(put, backend, true);
    assert_backend_error(store.mark("k").await, backend, true);
}

/// [`fencing_testkit::blob::a_lost_answer_is_an_unknown_outcome`] on a fresh
/// key, `through_proxy` reaching the server through `proxy`
/// ([`AnswerDroppingProxy::in_front_of`]); prints the lost answer's status
/// line and returns the key.
pub async fn a_lost_answer_is_an_unknown_outcome(
    through_proxy: impl FencedStore + 'static,
    direct: &dyn FencedStore,
    proxy: &AnswerDroppingProxy,
    write_prefix: &[u8],
) -> String {
    let key = fencing_testkit::unique_name("lost-answer");
    let status = fencing_testkit::blob::a_lost_answer_is_an_unknown_outcome(
        Arc::new(through_proxy),
        direct,
        proxy,
        write_prefix,
        &key,
    )
    .await;
    println!("lost answer: {status}");
    key
}

/// [`fencing_testkit::blob::unfenced_objects_are_refused_unless_adopted`] on
/// a fresh key of `backend`, a strict store against an adopting one;
/// `put_foreign(key, body)` writes an object with the SDK alone. Returns the
/// key.
pub async fn unfenced_objects_are_refused_unless_adopted<B, F, Fut>(
    backend: &B,
    put_foreign: F,
) -> String
where
    B: BlobBackend + Clone + 'static,
    F: Fn(String, &'static [u8]) -> Fut,
    Fut: Future<Output = ()>,
{
    let key = fencing_testkit::unique_name("foreign");
    fencing_testkit::blob::unfenced_objects_are_refused_unless_adopted(
        &BlobStore::new(backend.clone()),
        &BlobStore::new(backend.clone()).adopt_unfenced(true),
        &key,
        put_foreign,
    )
    .await;
    key
}

/// [`tampering_cannot_lower_the_mark`] with a change of metadata or
/// properties alone on a fresh key (`change(key)`, with the SDK; `what`
/// names it): the mark is kept. Returns the key.
pub async fn a_metadata_change_cannot_lower_the_mark<F, Fut>(
    store: &dyn FencedStore,
    what: &str,
    change: F,
) -> String
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()>,
{
    let key = fencing_testkit::unique_name("metadata");
    let changed = key.clone();
    tampering_cannot_lower_the_mark(store, &key, what, AfterTampering::MarkKept, || {
        change(changed)
    })
    .await;
    key
}

/// [`tampering_cannot_lower_the_mark`] with a plain overwrite on a fresh
/// key: `put_foreign(key, body)` writes with the SDK alone, as a program
/// that knows nothing of fencing (`what` names its call). Returns the key.
pub async fn a_foreign_overwrite_cannot_lower_the_mark<F, Fut>(
    store: &dyn FencedStore,
    what: &str,
    put_foreign: F,
) -> String
where
    F: FnOnce(String, &'static [u8]) -> Fut,
    Fut: Future<Output = ()>,
{
    let key = fencing_testkit::unique_name("overwrite");
    let overwritten = key.clone();
    tampering_cannot_lower_the_mark(
        store,
        &key,
        &format!("a plain {what} by a program that knows nothing of fencing"),
        AfterTampering::Foreign,
        || put_foreign(overwritten, b"plain bytes"),
    )
    .await;
    key
}
