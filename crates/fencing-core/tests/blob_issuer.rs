//! The bucket issuer ([`BlobIssuer`]) on the in-memory object store: the
//! whole issuer suite, then what only a bucket lease has (a record deleted
//! by hand, expiry on the server's clock, the requests a lease costs, a
//! lost answer, one bucket as issuer and store).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use fencing_core::adapter::blob::{
    BlobBackend, BlobIssuer, BlobStore, BlobVersion, BlobWrite, HookedWrites, LeaseExpiry,
    StoredObject, WriteHook, WriteOutcome,
};
use fencing_core::memory::MemoryBlobBackend;
use fencing_core::{Error, FencingToken, LeaseRequest, TokenIssuer};
use fencing_testkit::issuer::IssuerProfile;

#[allow(dead_code)] // each test binary uses a part
mod common;
use common::{IgnoresPreconditions, LosesAnswers};

async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
    Some(Arc::new(BlobIssuer::new(MemoryBlobBackend::new())))
}

fencing_testkit::issuer_conformance!(issuer, IssuerProfile::with_ttl(Duration::from_millis(200)));

fn request(resource: &str, ttl: Duration) -> LeaseRequest {
    LeaseRequest::new(resource, ttl)
}

/// A record deleted by hand takes its counter with it; the record made
/// again starts at the server's time in microseconds, above every token
/// the deleted one gave, even after a floor far above 1.
#[tokio::test]
async fn a_record_deleted_by_hand_does_not_restart_tokens() {
    let backend = Arc::new(MemoryBlobBackend::new());
    let issuer = BlobIssuer::new(backend.clone());
    let ttl = Duration::from_secs(5);
    let first = issuer
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .unwrap();
    issuer.release(&first).await.unwrap();
    let second = issuer
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.token().get(), first.token().get() + 1);
    issuer.release(&second).await.unwrap();
    assert!(
        backend.remove(&issuer.record_key("r")),
        "no record to delete"
    );
    // A fresh issuer, as after a restart: it remembers nothing.
    let fresh = BlobIssuer::new(backend.clone());
    let third = fresh
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .unwrap();
    assert!(
        third.token() > second.token(),
        "token {} after {} once the record was deleted",
        third.token(),
        second.token()
    );
}

/// By default a waiter that arrives long after a holder died still waits a
/// TTL of its own clock: it compares no server's clock. With
/// `server-clocks-agree` it takes over at once: the server's clock says the
/// record is a TTL old. Neither takes over a live lease.
#[tokio::test]
async fn expiry_on_the_server_clock_is_opt_in() {
    let backend = Arc::new(MemoryBlobBackend::new());
    let holder = BlobIssuer::new(backend.clone());
    let ttl = Duration::from_millis(200);
    let dead = holder
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .unwrap();
    let live = holder
        .try_acquire(&request("live", Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    // The grain of Last-Modified is a second: past TTL + 1 s the server's
    // clock alone shows the lease dead.
    tokio::time::sleep(ttl + Duration::from_millis(1100)).await;
    let newcomer = BlobIssuer::new(backend.clone());
    assert!(
        newcomer
            .try_acquire(&request("r", ttl))
            .await
            .unwrap()
            .is_none(),
        "by default a newcomer took over before a TTL of its own clock"
    );
    let waiter = BlobIssuer::new(backend.clone()).with_expiry(LeaseExpiry::ServerClocksAgree);
    let taken = waiter
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .expect("a newcomer's first try takes over a lease the server's clock shows dead");
    assert!(taken.token() > dead.token());
    assert!(
        waiter
            .try_acquire(&request("live", Duration::from_secs(30)))
            .await
            .unwrap()
            .is_none(),
        "a live lease was taken over"
    );
    holder.renew(&live).await.expect("the live holder renews");
}

/// What a lease costs, counted at the backend: the grant that makes a
/// record is one read and two writes (made unseeded, then seeded on its
/// own version: once per record made); a renew and a release are one
/// write each; acquiring again what this issuer released is one write,
/// and what another released, one read and one write.
#[tokio::test]
async fn a_lease_costs_the_fewest_requests() {
    let backend = Arc::new(MemoryBlobBackend::new());
    let issuer = BlobIssuer::new(backend.clone());
    let ttl = Duration::from_secs(5);
    let counts = || (backend.reads(), backend.writes());
    let before = counts();
    let lease = issuer
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        counts(),
        (before.0 + 1, before.1 + 2),
        "the grant that makes it"
    );
    let before = counts();
    let lease = issuer.renew(&lease).await.unwrap();
    assert_eq!(counts(), (before.0, before.1 + 1), "renew");
    let before = counts();
    issuer.release(&lease).await.unwrap();
    assert_eq!(counts(), (before.0, before.1 + 1), "release");
    let before = counts();
    let again = issuer
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        counts(),
        (before.0, before.1 + 1),
        "acquire after own release"
    );
    assert!(again.token() > lease.token());
    issuer.release(&again).await.unwrap();
    let other = BlobIssuer::new(backend.clone());
    let before = counts();
    other
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        counts(),
        (before.0 + 1, before.1 + 1),
        "acquire after another's release"
    );
}

/// A grant, renew or release whose answer was lost is settled by reading
/// the record back: our own write there is success, not an error and not
/// a second grant.
#[tokio::test]
async fn a_lost_answer_is_settled_by_the_record() {
    // The grant's, the renew's and the release's answers are lost.
    let backend = HookedWrites::new(MemoryBlobBackend::new(), LosesAnswers::new(3, None));
    let issuer = BlobIssuer::new(backend);
    let ttl = Duration::from_secs(5);
    let lease = issuer
        .try_acquire(&request("r", ttl))
        .await
        .expect("an applied grant whose answer was lost")
        .expect("granted");
    let lease = issuer.renew(&lease).await.expect("an applied renew");
    issuer.release(&lease).await.expect("an applied release");
    let next = issuer
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.token().get(), lease.token().get() + 1);
}

/// An object at a record's key that fencing did not write is refused with
/// a typed error, and left as it was.
#[tokio::test]
async fn a_foreign_object_at_a_record_key_is_refused() {
    let backend = Arc::new(MemoryBlobBackend::new());
    let issuer = BlobIssuer::new(backend.clone());
    let key = issuer.record_key("r");
    backend.put_unfenced(&key, Bytes::from_static(b"someone else's"));
    let writes = backend.writes();
    match issuer
        .try_acquire(&request("r", Duration::from_secs(5)))
        .await
    {
        Err(Error::Backend { source, .. }) => {
            assert!(
                source.to_string().contains("not a lease record"),
                "{source}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(backend.writes(), writes, "something was written");
    let stored = backend.read(&key).await.unwrap().unwrap();
    assert_eq!(stored.bytes, Bytes::from_static(b"someone else's"));
}

/// One bucket as issuer and store: the zombie is refused, with and
/// without fencing on acquire, and the lease records stay apart from the
/// store's keys.
#[tokio::test]
async fn one_bucket_is_issuer_and_store() {
    let backend = Arc::new(MemoryBlobBackend::new());
    let issuer = BlobIssuer::new(backend.clone());
    let store = BlobStore::new(backend.clone());
    fencing_testkit::zombie::zombie_is_refused(&issuer, &store, Duration::from_millis(200)).await;
}

/// Many issuers (many processes) racing on one record: one holder at a
/// time, every grant above the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_issuers_grant_one_at_a_time() {
    let backend = Arc::new(MemoryBlobBackend::new());
    let holders = Arc::new(std::sync::Mutex::new(Vec::new()));
    let busy = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let issuer = BlobIssuer::new(backend.clone());
        let (holders, busy) = (holders.clone(), busy.clone());
        tasks.push(tokio::spawn(async move {
            let until = Instant::now() + Duration::from_millis(600);
            while Instant::now() < until {
                let req = request("r", Duration::from_secs(5));
                let lease = issuer.acquire(&req, Duration::from_secs(5)).await.unwrap();
                assert!(!busy.swap(true, Ordering::SeqCst), "two holders at once");
                holders.lock().unwrap().push(lease.token());
                tokio::task::yield_now().await;
                busy.store(false, Ordering::SeqCst);
                issuer.release(&lease).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let tokens = holders.lock().unwrap().clone();
    assert!(tokens.len() >= 8, "only {} grants", tokens.len());
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing in grant order: {tokens:?}"
    );
}

/// A bucket that ignores preconditions is as unsafe for the issuer as for
/// the store (two waiters could both take one lease): `verify` says so.
#[tokio::test]
async fn verify_flags_a_bucket_that_ignores_preconditions() {
    let honest = BlobIssuer::new(MemoryBlobBackend::new());
    assert!(fencing_core::safety::all_safe(
        &honest.verify().await.unwrap()
    ));
    let issuer = BlobIssuer::new(HookedWrites::new(
        MemoryBlobBackend::new(),
        IgnoresPreconditions,
    ));
    let checks = issuer.verify().await.unwrap();
    common::assert_preconditions_flagged(&checks);
}

/// A floor raised on a record deleted by hand only raises: the record made
/// again starts where a grant would start it (the server's time in
/// microseconds) when that is above the floor, never at the floor below
/// the tokens the deleted record gave.
#[tokio::test]
async fn a_floor_on_a_deleted_record_only_raises() {
    let backend = Arc::new(MemoryBlobBackend::new());
    let issuer = BlobIssuer::new(backend.clone());
    let ttl = Duration::from_secs(5);
    let before = issuer
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .unwrap();
    issuer.release(&before).await.unwrap();
    assert!(
        backend.remove(&issuer.record_key("r")),
        "no record to delete"
    );
    let fresh = BlobIssuer::new(backend.clone());
    fresh.raise_floor("r", FencingToken::new(10)).await.unwrap();
    let after = fresh
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .unwrap();
    assert!(
        after.token() > before.token(),
        "a floor of 10 on the deleted record gave token {} after {}",
        after.token(),
        before.token()
    );
}

/// Sends nothing for the next `lose` writes and reports each as an unknown
/// outcome: the request was lost on the way (a reset before the server
/// read it), so the record stays as it was.
#[derive(Debug)]
struct LosesRequests(AtomicU32);

#[async_trait]
impl WriteHook<Arc<MemoryBlobBackend>> for LosesRequests {
    async fn write(
        &self,
        inner: &Arc<MemoryBlobBackend>,
        key: &str,
        write: BlobWrite,
    ) -> fencing_core::Result<WriteOutcome> {
        if self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_err()
        {
            return inner.write(key, write).await;
        }
        Err(Error::outcome_unknown(
            "loses-requests",
            format!("conditional write of {key:?}"),
            "connection reset before the server read the request",
        ))
    }
}

/// A renew from an issuer that knows nothing of the record (another
/// process: every `fence renew`) whose request was lost reads the record
/// back, finds it still the lease's and unchanged, and sends the renew
/// again: the lease is kept, not reported lost.
#[tokio::test]
async fn a_renew_whose_request_was_lost_is_sent_again() {
    let backend = Arc::new(MemoryBlobBackend::new());
    let holder = BlobIssuer::new(backend.clone());
    let lease = holder
        .try_acquire(&request("r", Duration::from_secs(5)))
        .await
        .unwrap()
        .unwrap();
    let hooked = HookedWrites::new(backend.clone(), LosesRequests(AtomicU32::new(1)));
    let renewer = BlobIssuer::new(hooked);
    let renewed = renewer.renew(&lease).await;
    assert!(
        renewed.is_ok(),
        "a renew whose request was lost, the record still ours: {renewed:?}"
    );
    // Lost on every try: an unknown outcome, never "lost".
    let hooked = HookedWrites::new(backend.clone(), LosesRequests(AtomicU32::new(u32::MAX)));
    let renewer = BlobIssuer::new(hooked);
    match renewer.renew(&lease).await {
        Err(Error::OutcomeUnknown { .. }) => {}
        other => panic!("expected an unknown outcome, got {other:?}"),
    }
}

/// The in-memory backend with some of its clocks hidden: `dates` (its
/// estimate of the server's clock, as the `Date` of answers feeds it) and
/// `modified` (the `Last-Modified` of reads).
#[derive(Debug)]
struct Clocks {
    inner: Arc<MemoryBlobBackend>,
    dates: bool,
    modified: bool,
}

impl Clocks {
    /// Reads that tell no modified time, as on GCS.
    fn reads_tell_no_time(inner: Arc<MemoryBlobBackend>) -> Self {
        Self {
            inner,
            dates: true,
            modified: false,
        }
    }

    /// No `Date` estimate, reads that tell `Last-Modified`, as
    /// `ObjectStoreBackend`.
    fn no_dates(inner: Arc<MemoryBlobBackend>) -> Self {
        Self {
            inner,
            dates: false,
            modified: true,
        }
    }
}

#[async_trait]
impl BlobBackend for Clocks {
    fn name(&self) -> &'static str {
        "clocks-hidden"
    }
    fn limits(&self) -> fencing_core::Limits {
        self.inner.limits()
    }
    async fn read_range(
        &self,
        key: &str,
        len: Option<usize>,
    ) -> fencing_core::Result<Option<StoredObject>> {
        let stored = self.inner.read_range(key, len).await?;
        Ok(stored.map(|s| {
            let modified = s.modified.filter(|_| self.modified);
            s.modified_at(modified).answered_at(None)
        }))
    }
    async fn write(&self, key: &str, write: BlobWrite) -> fencing_core::Result<WriteOutcome> {
        self.inner.write(key, write).await
    }
    fn server_now(&self) -> Option<std::time::SystemTime> {
        self.inner.server_now().filter(|_| self.dates)
    }
    fn server_now_lag(&self) -> Duration {
        self.inner.server_now_lag()
    }
}

/// Where the backend has no `Date` estimate (`ObjectStoreBackend`), a new
/// record is written unseeded, read back, and seeded from its own
/// `Last-Modified`: a record deleted by hand and made again, at once,
/// starts above the deleted one's tokens, and so does a floor on it. An
/// unseeded record left by a maker that stopped is seeded by the next.
#[tokio::test]
async fn without_dates_a_record_is_seeded_from_its_own_last_modified() {
    let backend = Arc::new(MemoryBlobBackend::new());
    let issuer = BlobIssuer::new(Clocks::no_dates(backend.clone()));
    let ttl = Duration::from_secs(5);
    let before = (backend.reads(), backend.writes());
    let first = issuer
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (backend.reads(), backend.writes()),
        (before.0 + 2, before.1 + 2),
        "a record made: read, unseeded write, read back, grant"
    );
    issuer.release(&first).await.unwrap();
    let second = issuer
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .unwrap();
    issuer.release(&second).await.unwrap();
    assert!(backend.remove(&issuer.record_key("r")));
    let fresh = BlobIssuer::new(Clocks::no_dates(backend.clone()));
    let third = fresh
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .unwrap();
    assert!(
        third.token() > second.token(),
        "tokens {}, {}, the record deleted, then {}",
        first.token(),
        second.token(),
        third.token()
    );
    fresh.release(&third).await.unwrap();
    assert!(backend.remove(&issuer.record_key("r")));
    let fresh = BlobIssuer::new(Clocks::no_dates(backend.clone()));
    fresh.raise_floor("r", FencingToken::new(10)).await.unwrap();
    let fourth = fresh
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .unwrap();
    assert!(fourth.token() > third.token(), "{fourth:?} after {third:?}");

    // An unseeded record, as a maker that stopped after its first write
    // leaves it: the next seeds it, never granting from its counter 0.
    let unseeded = BlobIssuer::new(Clocks::no_dates(backend.clone())).with_prefix("left-unseeded/");
    let key = unseeded.record_key("r");
    let stop_after_first_write = HookedWrites::new(
        Clocks::no_dates(backend.clone()),
        StopsAfter(AtomicU32::new(1)),
    );
    let maker = BlobIssuer::new(stop_after_first_write).with_prefix("left-unseeded/");
    assert!(maker.try_acquire(&request("r", ttl)).await.is_err());
    assert!(backend.read(&key).await.unwrap().is_some(), "nothing left");
    let lease = unseeded
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .expect("the unseeded record is free");
    assert!(
        lease.token() > fourth.token(),
        "{lease:?} from an unseeded record"
    );
}

/// Lets `n` writes through, then refuses every other as a dead connection
/// would (nothing sent).
#[derive(Debug)]
struct StopsAfter(AtomicU32);

#[async_trait]
impl<B: BlobBackend> WriteHook<B> for StopsAfter {
    async fn write(
        &self,
        inner: &B,
        key: &str,
        write: BlobWrite,
    ) -> fencing_core::Result<WriteOutcome> {
        if self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return inner.write(key, write).await;
        }
        Err(Error::backend("stops-after", true, "connection refused"))
    }
}

/// A backend that tells no server time at all cannot start a new record
/// above a deleted one's tokens: the grant is refused, typed, naming why.
#[tokio::test]
async fn a_backend_that_tells_no_server_time_is_refused() {
    let backend = Arc::new(MemoryBlobBackend::new());
    let issuer = BlobIssuer::new(Clocks {
        inner: backend,
        dates: false,
        modified: false,
    });
    match issuer
        .try_acquire(&request("r", Duration::from_secs(5)))
        .await
    {
        Err(Error::UnsafeConfiguration { reason, .. }) => {
            assert!(reason.contains("tells no server time"), "{reason}");
        }
        other => panic!("expected UnsafeConfiguration, got {other:?}"),
    }
}

/// A waiter in a process that also holds thousands of other records (more
/// than the issuer remembers) still takes over a dead lease a TTL after it
/// first saw it: it reads its record at least once a second, and what it
/// has timed is not forgotten for records read since.
#[tokio::test]
async fn a_waiter_among_thousands_of_records_keeps_its_time() {
    let backend = Arc::new(MemoryBlobBackend::new());
    let ttl = Duration::from_secs(2);
    let holder = BlobIssuer::new(Clocks::reads_tell_no_time(backend.clone()));
    let dead = holder
        .try_acquire(&request("r", ttl))
        .await
        .unwrap()
        .unwrap();
    let waiter = BlobIssuer::new(Clocks::reads_tell_no_time(backend.clone()));
    let first_seen = Instant::now();
    assert!(
        waiter
            .try_acquire(&request("r", ttl))
            .await
            .unwrap()
            .is_none()
    );
    for i in 0..5000 {
        let other = request(&format!("other-{i}"), Duration::from_secs(30));
        waiter.try_acquire(&other).await.unwrap().expect("free");
        if i % 500 == 0 {
            assert!(
                waiter
                    .try_acquire(&request("r", ttl))
                    .await
                    .unwrap()
                    .is_none()
            );
        }
    }
    assert!(
        first_seen.elapsed() < ttl,
        "the 5,000 grants took longer than the TTL: the test proves nothing"
    );
    tokio::time::sleep_until((first_seen + ttl + Duration::from_millis(10)).into()).await;
    let taken = waiter.try_acquire(&request("r", ttl)).await.unwrap();
    assert!(
        taken.is_some_and(|t| t.token() > dead.token()),
        "a waiter that has seen one version for a TTL, among 5,000 other records, did not take over"
    );
}

/// A hook under which the first delete of one key is overtaken by another
/// process's grant on that key, landing between the removal's last read
/// and its delete.
#[derive(Debug)]
struct GrantsBeforeDelete {
    key: String,
    racer: BlobIssuer<Arc<MemoryBlobBackend>>,
    resource: String,
    armed: AtomicBool,
}

#[async_trait]
impl WriteHook<Arc<MemoryBlobBackend>> for GrantsBeforeDelete {
    async fn delete_if(
        &self,
        inner: &Arc<MemoryBlobBackend>,
        key: &str,
        version: &BlobVersion,
    ) -> fencing_core::Result<bool> {
        if key == self.key && self.armed.swap(false, Ordering::SeqCst) {
            let lease = self
                .racer
                .try_acquire(&request(&self.resource, Duration::from_secs(60)))
                .await?;
            assert!(lease.is_some(), "the racer's grant on an idle record");
        }
        inner.delete_if(key, version).await
    }
}

/// A hook that applies the first delete of any key and loses its answer.
#[derive(Debug, Default)]
struct LosesADeletesAnswer {
    lost: AtomicBool,
}

#[async_trait]
impl WriteHook<Arc<MemoryBlobBackend>> for LosesADeletesAnswer {
    async fn delete_if(
        &self,
        inner: &Arc<MemoryBlobBackend>,
        key: &str,
        version: &BlobVersion,
    ) -> fencing_core::Result<bool> {
        let deleted = inner.delete_if(key, version).await?;
        if deleted && !self.lost.swap(true, Ordering::SeqCst) {
            return Err(Error::outcome_unknown(
                "memory-blob",
                format!("delete {key:?}"),
                std::io::Error::other("the answer was lost"),
            ));
        }
        Ok(deleted)
    }
}

/// A grant that lands after `remove_idle` judged the record idle, before
/// its delete: the delete names the version it judged, so it is refused,
/// the removal reports the record in use, and the grant still holds.
#[tokio::test]
async fn a_grant_between_the_judgement_and_the_delete_is_not_removed() {
    let shared = Arc::new(MemoryBlobBackend::new());
    let resource = "jobs/idle";
    let racer = BlobIssuer::new(shared.clone());
    let key = racer.record_key(resource);
    let issuer = BlobIssuer::new(HookedWrites::new(
        shared.clone(),
        GrantsBeforeDelete {
            key,
            racer: racer.clone(),
            resource: resource.to_owned(),
            armed: AtomicBool::new(true),
        },
    ));
    let first = issuer
        .try_acquire(&request(resource, Duration::from_secs(60)))
        .await
        .expect("acquire")
        .expect("free");
    issuer.release(&first).await.expect("release");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let removal = issuer
        .remove_idle(resource, Duration::from_secs(1))
        .await
        .expect("remove_idle");
    assert_eq!(removal, fencing_core::Removal::InUse);
    let holding = racer.holder(resource).await.expect("holder").expect("held");
    assert!(holding.token > first.token(), "{holding:?} after {first:?}");
}

/// A delete applied whose answer was lost is settled by the read that
/// follows: the record is gone, so it was removed, and the next grant
/// starts above every token it gave.
#[tokio::test]
async fn a_removal_whose_answer_was_lost_is_settled_as_removed() {
    let shared = Arc::new(MemoryBlobBackend::new());
    let issuer = BlobIssuer::new(HookedWrites::new(
        shared.clone(),
        LosesADeletesAnswer::default(),
    ));
    let resource = "jobs/lost";
    let first = issuer
        .try_acquire(&request(resource, Duration::from_secs(60)))
        .await
        .expect("acquire")
        .expect("free");
    issuer.release(&first).await.expect("release");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let removal = issuer
        .remove_idle(resource, Duration::from_secs(1))
        .await
        .expect("remove_idle");
    assert_eq!(removal, fencing_core::Removal::Removed);
    assert!(
        issuer.backend().hook().lost.load(Ordering::SeqCst),
        "no answer was lost: the test tests nothing"
    );
    let next = issuer
        .try_acquire(&request(resource, Duration::from_secs(60)))
        .await
        .expect("acquire")
        .expect("free");
    assert!(next.token() > first.token(), "{next:?} after {first:?}");
}
