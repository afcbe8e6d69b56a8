//! The shared compare-and-swap loop: races, the fast path, and objects
//! written by programs that know nothing of fencing.

use std::sync::Arc;

use bytes::Bytes;
use fencing::blob::{BlobBackend, BlobStore};
use fencing::memory::MemoryBlobBackend;
use fencing::{Error, FencedStore, FencingToken};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_writers_lose_preconditions_and_retry() {
    let store = Arc::new(BlobStore::new(MemoryBlobBackend::new()));
    // 16 writers with equal tokens: only the precondition keeps them apart.
    let mut tasks = Vec::new();
    for w in 0..16u8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..10u8 {
                store
                    .put("k", Bytes::from(vec![w, i]), FencingToken::new(1))
                    .await
                    .expect("equal tokens never go stale");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let backend = store.backend();
    assert!(
        backend.precondition_failures() > 0,
        "the race never lost a precondition: the retry path was not exercised"
    );
    assert_eq!(
        backend.writes() - backend.precondition_failures(),
        160,
        "every put was applied exactly once"
    );
}

#[tokio::test]
async fn a_holders_next_write_skips_the_read() {
    let store = BlobStore::new(MemoryBlobBackend::new());
    store.put("k", "1".into(), 5.into()).await.unwrap();
    let before = store.backend().writes();
    for i in 0..5 {
        store
            .put("k", Bytes::from(i.to_string()), 5.into())
            .await
            .unwrap();
    }
    assert_eq!(
        store.backend().writes() - before,
        5,
        "one conditional write per put"
    );

    // Someone else writes: our cached version is stale, the precondition
    // fails, and the loop reads and decides again.
    store.backend().put_unfenced("k", "foreign".into());
    store.put("k", "mine".into(), 6.into()).await.unwrap();
    assert_eq!(store.backend().precondition_failures(), 1);
    assert_eq!(store.get("k").await.unwrap().unwrap().value, "mine");
}

#[tokio::test]
async fn a_stale_token_is_refused_even_on_the_fast_path() {
    let a = BlobStore::new(MemoryBlobBackend::new());
    a.put("k", "a".into(), 5.into()).await.unwrap();
    a.fence("k", 9.into()).await.unwrap();
    match a.put("k", "late".into(), 5.into()).await {
        Err(Error::StaleToken {
            presented, current, ..
        }) => assert_eq!((presented.get(), current.get()), (5, 9)),
        other => panic!("expected StaleToken, got {other:?}"),
    }
}

#[tokio::test]
async fn unfenced_objects_are_taken_over_and_fence_keeps_the_body() {
    let store = BlobStore::new(MemoryBlobBackend::new());
    store.backend().put_unfenced("k", "legacy".into());
    assert_eq!(store.mark("k").await.unwrap(), Some(FencingToken::ZERO));
    store.fence("k", 3.into()).await.unwrap();
    let got = store.get("k").await.unwrap().unwrap();
    assert_eq!((got.value, got.token), (Bytes::from("legacy"), 3.into()));
    let head = store.backend().head("k").await.unwrap().unwrap();
    assert_eq!(head.meta.token, 3.into());
}

#[tokio::test]
async fn contention_past_the_bound_is_a_typed_error() {
    // A backend whose precondition never holds.
    #[derive(Debug)]
    struct AlwaysLoses(MemoryBlobBackend);
    #[async_trait::async_trait]
    impl BlobBackend for AlwaysLoses {
        fn name(&self) -> &'static str {
            "always-loses"
        }
        fn limits(&self) -> fencing::Limits {
            self.0.limits()
        }
        async fn head(&self, key: &str) -> fencing::Result<Option<fencing::blob::BlobHead>> {
            self.0.head(key).await
        }
        async fn read(&self, key: &str) -> fencing::Result<Option<fencing::blob::Blob>> {
            self.0.read(key).await
        }
        async fn write(
            &self,
            _: &str,
            _: Bytes,
            _: fencing::blob::BlobMeta,
            _: &fencing::blob::Precondition,
        ) -> fencing::Result<fencing::blob::WriteOutcome> {
            Ok(fencing::blob::WriteOutcome::PreconditionFailed)
        }
    }
    let store = BlobStore::new(AlwaysLoses(MemoryBlobBackend::new())).with_max_attempts(3);
    match store.put("k", "v".into(), 1.into()).await {
        Err(e @ Error::Contention { attempts: 3, .. }) => assert!(e.is_retryable()),
        other => panic!("expected Contention after 3 attempts, got {other:?}"),
    }
    assert_eq!(store.mark("k").await.unwrap(), None, "nothing was written");
}
