//! The counters move on real servers, through backends opened by URL (the
//! registry instruments them): a zombie's write to PostgreSQL is one stale
//! refusal labelled `postgres`, a lease taken from under a keep-alive on
//! Redis is one lost lease labelled `redis`, and 16 writers racing on one
//! S3 object (moto) lose preconditions that the blob loop counts as
//! compare-and-swap retries. A server that does not answer fails the test,
//! naming it and how to start it (`FENCING_SKIP=name` skips it on request).
//!
//! Each test runs (`fencing_testkit::metrics::recorded`) on its own
//! current-thread runtime inside `metrics::with_local_recorder`, so
//! parallel tests never share counts.

use std::sync::Arc;
use std::time::Duration;

use fencing_harness::env::{POSTGRES, REDIS_AOF, S3};
use fencing_testkit::metrics::{recorded, release_behind_a_keep_alive};
use fencing_testkit::store::assert_stale;
use fencing_tokens::instrument::names;
use fencing_tokens::{Error, FencingToken};

fn prefix() -> String {
    fencing_testkit::unique_prefix().replace('-', "_")
}

#[test]
fn a_zombie_write_to_postgres_is_one_stale_refusal_labelled_postgres() {
    if POSTGRES.skipped() {
        return;
    }
    let url = format!("{}?fencing_table_prefix={}_", POSTGRES.endpoint(), prefix());
    let ((), m) = recorded(async {
        let store = fencing_tokens::open_store(&url)
            .await
            .unwrap_or_else(|e| POSTGRES.unavailable(&e));
        let key = format!("metrics-{}", prefix());
        store.fence(&key, FencingToken::new(34)).await.unwrap();
        store
            .put(&key, "from 34".into(), FencingToken::new(34))
            .await
            .unwrap();
        let zombie = store.put(&key, "from 33".into(), FencingToken::new(33));
        assert_stale(zombie.await, &key, 33, 34);
    });
    let postgres = [(names::STORE, "postgres")];
    assert_eq!(m.counter(names::STALE_REFUSALS, &postgres), 1);
    assert_eq!(
        m.counter(
            names::STALE_REFUSALS,
            &[(names::STORE, "postgres"), (names::OP, "put")]
        ),
        1
    );
    assert_eq!(m.counter(names::WRITES, &postgres), 2);
}

#[test]
fn a_lease_taken_from_under_a_keep_alive_on_redis_is_one_lost_lease() {
    if REDIS_AOF.skipped() {
        return;
    }
    let url = format!("{}?prefix={}:", REDIS_AOF.endpoint(), prefix());
    let ((), m) = recorded(async {
        let issuer = fencing_tokens::open_issuer(&url)
            .await
            .unwrap_or_else(|e| REDIS_AOF.unavailable(&e));
        let resource = format!("metrics-{}", prefix());
        release_behind_a_keep_alive(issuer, &resource, Duration::from_secs(1)).await;
    });
    m.assert_one_lost_lease("redis");
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
        let store = fencing_tokens::open_store(&url)
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
    let retries = m.counter(
        names::CAS_RETRIES,
        &[(names::STORE, "s3"), (names::CAUSE, "precondition_failed")],
    );
    assert!(retries > 0, "16 writers never lost a precondition");
    assert_eq!(
        m.counter(names::WRITES, &[(names::STORE, "s3")]),
        u64::from(WRITERS) * u64::from(PUTS)
    );
    assert_eq!(m.counter(names::STALE_REFUSALS, &[]), 0);
}
