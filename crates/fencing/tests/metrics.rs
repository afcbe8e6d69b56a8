//! The counters move on real servers, through backends opened by URL (the
//! registry instruments them): a zombie's write to PostgreSQL is one stale
//! refusal labelled `postgres`, a lease taken from under a keep-alive on
//! Redis is one lost lease labelled `redis`, and 16 writers racing on one
//! S3 object (moto) lose preconditions that the blob loop counts as
//! compare-and-swap retries. A server that does not answer fails the test,
//! naming it and how to start it (`FENCING_SKIP=name` skips it on request).
//!
//! Each test runs on its own current-thread runtime inside
//! `metrics::with_local_recorder`, so parallel tests never share counts.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fencing::instrument::names;
use fencing::keepalive::{KeepAlive, LostReason};
use fencing::{Error, FencingToken, LeaseRequest};
use fencing_harness::env::{POSTGRES, REDIS_AOF, S3};
use metrics_util::CompositeKey;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// What was recorded.
type Series = Vec<(CompositeKey, DebugValue)>;

fn prefix() -> String {
    fencing_testkit::unique_prefix().replace('-', "_")
}

/// Runs `test` on a current-thread runtime with a recorder of its own.
fn recorded<F: Future>(test: F) -> (F::Output, Series) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let out = metrics::with_local_recorder(&recorder, || runtime.block_on(test));
    let series = snapshotter.snapshot().into_vec();
    let series = series.into_iter().map(|(key, .., value)| (key, value));
    (out, series.collect())
}

/// A counter summed over the series named `name` whose labels include
/// all of `labels` (0 if none).
fn counter(series: &Series, name: &str, labels: &[(&str, &str)]) -> u64 {
    series
        .iter()
        .filter(|(key, _)| {
            let key = key.key();
            key.name() == name
                && labels
                    .iter()
                    .all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v))
        })
        .map(|(_, value)| match value {
            DebugValue::Counter(n) => *n,
            other => panic!("{name} is not a counter: {other:?}"),
        })
        .sum()
}

#[test]
fn a_zombie_write_to_postgres_is_one_stale_refusal_labelled_postgres() {
    if POSTGRES.skipped() {
        return;
    }
    let url = format!("{}?fencing_table_prefix={}_", POSTGRES.endpoint(), prefix());
    let ((), m) = recorded(async {
        let store = fencing::open_store(&url)
            .await
            .unwrap_or_else(|e| POSTGRES.unavailable(&e));
        let key = format!("metrics-{}", prefix());
        store.fence(&key, FencingToken::new(34)).await.unwrap();
        store
            .put(&key, "from 34".into(), FencingToken::new(34))
            .await
            .unwrap();
        let zombie = store
            .put(&key, "from 33".into(), FencingToken::new(33))
            .await;
        assert!(
            matches!(zombie, Err(Error::StaleToken { .. })),
            "{zombie:?}"
        );
    });
    let postgres = [(names::STORE, "postgres")];
    assert_eq!(counter(&m, names::STALE_REFUSALS, &postgres), 1);
    assert_eq!(
        counter(
            &m,
            names::STALE_REFUSALS,
            &[(names::STORE, "postgres"), (names::OP, "put")]
        ),
        1
    );
    assert_eq!(counter(&m, names::WRITES, &postgres), 2);
}

#[test]
fn a_lease_taken_from_under_a_keep_alive_on_redis_is_one_lost_lease() {
    if REDIS_AOF.skipped() {
        return;
    }
    let url = format!("{}?prefix={}:", REDIS_AOF.endpoint(), prefix());
    let ((), m) = recorded(async {
        let issuer = fencing::open_issuer(&url)
            .await
            .unwrap_or_else(|e| REDIS_AOF.unavailable(&e));
        let resource = format!("metrics-{}", prefix());
        let ttl = Duration::from_secs(1);
        let lease = issuer
            .try_acquire(&LeaseRequest::new(&resource, ttl))
            .await
            .unwrap()
            .expect("a fresh resource is free");
        let keep_alive = KeepAlive::spawn(issuer.clone(), lease.clone());
        issuer.release(&lease).await.unwrap();
        let lost = tokio::time::timeout(ttl * 3, keep_alive.lost())
            .await
            .expect("the keep-alive notices within the TTL");
        assert!(matches!(lost.reason(), LostReason::Refused), "{lost}");
    });
    let redis = [(names::ISSUER, "redis")];
    assert_eq!(counter(&m, names::GRANTS, &redis), 1);
    assert_eq!(
        counter(
            &m,
            names::LEASES_LOST,
            &[(names::ISSUER, "redis"), (names::REASON, "refused")]
        ),
        1
    );
    assert_eq!(
        counter(
            &m,
            names::RENEWALS,
            &[(names::ISSUER, "redis"), (names::RESULT, "lost")]
        ),
        1
    );
}

#[test]
fn sixteen_writers_racing_on_one_s3_object_count_cas_retries() {
    if S3.skipped() {
        return;
    }
    const WRITERS: u8 = 16;
    const PUTS: u8 = 5;
    let ((), m) = recorded(async {
        let bucket = prefix().replace('_', "-");
        let client = fencing_s3::emulator::client(&S3.endpoint());
        if let Err(e) = fencing_s3::emulator::create_bucket(&client, &bucket).await {
            S3.unavailable(&e);
        }
        let url = format!("s3://{bucket}?endpoint={}&emulator=true", S3.endpoint());
        let store = fencing::open_store(&url)
            .await
            .unwrap_or_else(|e| S3.unavailable(&e));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    for i in 0..PUTS {
                        // Equal tokens: only the precondition keeps them
                        // apart. A write that loses 32 races in a row is
                        // Contention, with nothing applied: try it again.
                        loop {
                            match store
                                .put("hot", vec![w, i].into(), FencingToken::new(1))
                                .await
                            {
                                Ok(()) => break,
                                Err(Error::Contention { .. }) => {}
                                Err(e) => panic!("{e}"),
                            }
                        }
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap();
        }
    });
    let retries = counter(
        &m,
        names::CAS_RETRIES,
        &[(names::STORE, "s3"), (names::CAUSE, "precondition_failed")],
    );
    assert!(retries > 0, "16 writers never lost a precondition");
    assert_eq!(
        counter(&m, names::WRITES, &[(names::STORE, "s3")]),
        u64::from(WRITERS) * u64::from(PUTS)
    );
    assert_eq!(counter(&m, names::STALE_REFUSALS, &[]), 0);
}
