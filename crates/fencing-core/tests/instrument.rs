//! The metrics of `instrument`, on the memory backends: every counter
//! moves when it should. (Its spans: `tests/spans.rs`.)
//!
//! Each test runs (`fencing_testkit::metrics::recorded`) on its own
//! current-thread runtime inside `metrics::with_local_recorder`, so tests
//! running side by side never see each other's counts.

use std::sync::Arc;
use std::time::Duration;

use fencing_core::adapter::blob::{BlobStore, HookedWrites};
use fencing_core::instrument::{Instrumented, names};
use fencing_core::memory::{MemoryBlobBackend, MemoryIssuer, MemoryStore};
use fencing_core::{Error, FencedStore, FencingToken, LeaseRequest, TokenIssuer};
use fencing_testkit::metrics::{recorded, release_behind_a_keep_alive};

#[allow(dead_code)] // each test binary uses a part
mod common;

use common::LosesAnswers;

const TTL: Duration = Duration::from_millis(300);

#[test]
fn issuer_calls_count_grants_renewals_releases_and_time_acquire_and_renew() {
    let ((), m) = recorded(async {
        let issuer = Instrumented::new(MemoryIssuer::new());
        let lease = issuer
            .acquire(&LeaseRequest::new("r", TTL), Duration::from_secs(1))
            .await
            .unwrap();
        assert!(
            issuer
                .try_acquire(&LeaseRequest::new("r", TTL))
                .await
                .unwrap()
                .is_none()
        );
        let timeout = issuer
            .acquire(&LeaseRequest::new("r", TTL), Duration::from_millis(20))
            .await;
        assert!(matches!(timeout, Err(Error::Timeout { .. })), "{timeout:?}");
        let lease = issuer.renew(&lease).await.unwrap();
        issuer.release(&lease).await.unwrap();
        assert!(issuer.release(&lease).await.is_err());
        assert!(issuer.renew(&lease).await.is_err());
    });
    let issuer = [(names::ISSUER, "memory")];
    assert_eq!(m.counter(names::GRANTS, &issuer), 1);
    assert!(m.counter(names::ACQUIRE_BUSY, &issuer) >= 1);
    let granted = [(names::ISSUER, "memory"), (names::RESULT, "granted")];
    let timed_out = [(names::ISSUER, "memory"), (names::RESULT, "timeout")];
    assert_eq!(m.samples(names::ACQUIRE_WAIT, &granted), 1);
    assert_eq!(m.samples(names::ACQUIRE_WAIT, &timed_out), 1);
    let renewed = [(names::ISSUER, "memory"), (names::RESULT, "renewed")];
    let lost = [(names::ISSUER, "memory"), (names::RESULT, "lost")];
    assert_eq!(m.counter(names::RENEWALS, &renewed), 1);
    assert_eq!(m.counter(names::RENEWALS, &lost), 1);
    assert_eq!(m.samples(names::RENEW_LATENCY, &issuer), 2);
    let released = [(names::ISSUER, "memory"), (names::RESULT, "released")];
    assert_eq!(m.counter(names::RELEASES, &released), 1);
    assert_eq!(m.counter(names::RELEASES, &lost), 1);
}

#[test]
fn a_zombie_write_counts_one_stale_refusal_with_the_stores_label() {
    let ((), m) = recorded(async {
        let store = Instrumented::new(MemoryStore::new());
        store.fence("k", FencingToken::new(34)).await.unwrap();
        store
            .put("k", "34".into(), FencingToken::new(34))
            .await
            .unwrap();
        let zombie = store.put("k", "33".into(), FencingToken::new(33)).await;
        assert!(
            matches!(zombie, Err(Error::StaleToken { .. })),
            "{zombie:?}"
        );
        store.delete("k", FencingToken::new(34)).await.unwrap();
    });
    let memory = [(names::STORE, "memory")];
    assert_eq!(m.counter(names::STALE_REFUSALS, &memory), 1);
    assert_eq!(
        m.counter(names::STALE_REFUSALS, &[(names::OP, "put")]),
        1,
        "labelled with the operation"
    );
    assert_eq!(m.counter(names::WRITES, &memory), 3);
    assert_eq!(
        m.counter(
            names::WRITES,
            &[(names::STORE, "memory"), (names::OP, "fence")]
        ),
        1
    );
    assert_eq!(m.counter(names::OUTCOME_UNKNOWN, &[]), 0);
}

#[test]
fn sixteen_racing_writers_count_cas_retries() {
    let (backend, m) = recorded(async {
        let store = Arc::new(Instrumented::new(BlobStore::new(Arc::new(
            MemoryBlobBackend::new(),
        ))));
        common::sixteen_writers_at_one_token(store.clone()).await;
        store.inner().backend().clone()
    });
    let failures = backend.precondition_failures();
    assert!(failures > 0, "the race never lost a precondition");
    let retries = m.counter(
        names::CAS_RETRIES,
        &[
            (names::STORE, "memory-blob"),
            (names::CAUSE, "precondition_failed"),
        ],
    );
    assert_eq!(retries, failures, "one retry per lost precondition");
    assert_eq!(
        m.counter(names::WRITES, &[(names::STORE, "memory-blob")]),
        160
    );
}

#[test]
fn an_unknown_outcome_is_counted_once_per_call_and_once_per_retry() {
    let (result, m) = recorded(async {
        let store = Instrumented::new(
            BlobStore::new(HookedWrites::new(
                MemoryBlobBackend::new(),
                LosesAnswers::new(u32::MAX, None),
            ))
            .with_max_attempts(2),
        );
        store.put("k", "v".into(), FencingToken::new(7)).await
    });
    assert!(
        matches!(result, Err(Error::OutcomeUnknown { .. })),
        "{result:?}"
    );
    assert_eq!(
        m.counter(
            names::OUTCOME_UNKNOWN,
            &[(names::STORE, "loses-answers"), (names::OP, "put")]
        ),
        1
    );
    assert_eq!(
        m.counter(names::CAS_RETRIES, &[(names::CAUSE, "outcome_unknown")]),
        2
    );
    assert_eq!(m.counter(names::WRITES, &[]), 0);
}

#[test]
fn a_keep_alive_that_is_refused_counts_a_lost_lease() {
    let ((), m) = recorded(async {
        let issuer = Arc::new(Instrumented::new(MemoryIssuer::new()));
        release_behind_a_keep_alive(issuer, "r", TTL).await;
    });
    m.assert_one_lost_lease("memory");
}

#[test]
fn nothing_is_recorded_without_a_recorder() {
    // No recorder installed: the instrumented backends work as before.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = Instrumented::new(MemoryStore::new());
        store
            .put("k", "v".into(), FencingToken::new(2))
            .await
            .unwrap();
        assert!(
            store
                .put("k", "v".into(), FencingToken::new(1))
                .await
                .is_err()
        );
    });
}
