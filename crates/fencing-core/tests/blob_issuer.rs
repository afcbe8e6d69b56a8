//! The bucket issuer ([`BlobIssuer`]) on the in-memory object store: the
//! whole issuer suite, then what only a bucket lease has (a record deleted
//! by hand, expiry on the server's clock, the requests a lease costs, a
//! lost answer, one bucket as issuer and store).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fencing_core::adapter::blob::{BlobBackend, BlobIssuer, BlobStore, HookedWrites};
use fencing_core::memory::MemoryBlobBackend;
use fencing_core::{Error, LeaseRequest, TokenIssuer};
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

/// A waiter that arrives long after a holder died takes over at once: the
/// server's clock says the record is a TTL old. One that arrives while the
/// lease is live does not, however long ago its own clock says it began.
#[tokio::test]
async fn expiry_on_the_server_clock_needs_no_wait_of_the_waiters_own() {
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
    let waiter = BlobIssuer::new(backend.clone());
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

/// What a lease costs, counted at the backend: a first grant is one read
/// and one write; a renew and a release are one write each; acquiring
/// again what this issuer released is one write.
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
    assert_eq!(counts(), (before.0 + 1, before.1 + 1), "first grant");
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
