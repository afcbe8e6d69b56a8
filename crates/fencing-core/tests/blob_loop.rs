//! The shared compare-and-swap loop: races, the fast path, and objects
//! written by programs that know nothing of fencing.

use std::sync::Arc;

use bytes::Bytes;
use fencing_core::adapter::blob::{
    BlobBackend, BlobStore, BlobWrite, HookedWrites, WriteHook, WriteOutcome,
};
use fencing_core::memory::MemoryBlobBackend;
use fencing_core::safety::Verdict;
use fencing_core::{Error, FencedStore, FencingToken, Result};

#[allow(dead_code)] // each test binary uses a part
mod common;

use common::{IgnoresPreconditions, LosesAnswers};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_writers_lose_preconditions_and_retry() {
    let store = Arc::new(BlobStore::new(MemoryBlobBackend::new()));
    common::sixteen_writers_at_one_token(store.clone()).await;
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
    let other = BlobStore::new(store.backend());
    other.put("k", "other".into(), 6.into()).await.unwrap();
    store.put("k", "mine".into(), 6.into()).await.unwrap();
    assert_eq!(store.backend().precondition_failures(), 1);
    assert_eq!(store.get("k").await.unwrap().unwrap().value, "mine");
}

/// Two holders taking turns on one key: each finds the other's write
/// since its own, so a put at its remembered version would fail its
/// precondition every time (three requests: the refused write, the read,
/// the write). After the first such refusal a store reads first (two),
/// and goes back to the one-request path once its writes follow each
/// other again.
#[tokio::test]
async fn a_store_whose_writes_are_interleaved_reads_first() {
    let backend = MemoryBlobBackend::new();
    let (a, b) = (BlobStore::new(&backend), BlobStore::new(&backend));
    a.put("k", "a".into(), 1.into()).await.unwrap();
    b.put("k", "b".into(), 2.into()).await.unwrap();
    // Each is refused once (a at 3, b at 4), reads and writes.
    a.put("k", "a".into(), 3.into()).await.unwrap();
    b.put("k", "b".into(), 4.into()).await.unwrap();
    let requests = || backend.reads() + backend.writes();
    for token in 5..25_u64 {
        let (store, before) = (if token % 2 == 0 { &b } else { &a }, requests());
        store.put("k", "x".into(), token.into()).await.unwrap();
        assert_eq!(requests() - before, 2, "token {token}: a read and a write");
    }
    let failures = backend.precondition_failures();
    assert!(
        failures <= 2,
        "{failures} refused writes: the stores kept guessing"
    );

    a.put("k", "a".into(), 25.into()).await.unwrap();
    // Alone again (a wrote last): b's next put reads and writes, the one
    // after reads its own last version, and from then on one conditional
    // write per put.
    for (token, expected) in [(30_u64, 2), (31, 2), (32, 1), (33, 1)] {
        let before = requests();
        b.put("k", "b".into(), token.into()).await.unwrap();
        assert_eq!(requests() - before, expected, "token {token}");
    }
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
async fn unfenced_objects_are_refused_by_default_and_nothing_is_written() {
    let store = BlobStore::new(MemoryBlobBackend::new());
    store.backend().put_unfenced("k", "foreign".into());
    let unfenced = |r: Result<()>| match r {
        Err(Error::Unfenced { key }) => assert_eq!(key, "k"),
        other => panic!("expected Unfenced, got {other:?}"),
    };
    unfenced(store.put("k", "zombie".into(), 1.into()).await);
    unfenced(store.fence("k", 1.into()).await.map(drop));
    unfenced(store.delete("k", 1.into()).await);
    unfenced(store.mark("k").await.map(drop));
    unfenced(store.get("k").await.map(drop));
    let raw = store.backend().read("k").await.unwrap().unwrap();
    assert_eq!(raw.bytes, "foreign", "the foreign object is untouched");
    let text = store.mark("k").await.unwrap_err().to_string();
    assert!(text.contains("adopt_unfenced"), "says how to adopt: {text}");
}

#[tokio::test]
async fn adopted_unfenced_objects_start_at_mark_zero_and_fence_keeps_the_body() {
    let store = BlobStore::new(MemoryBlobBackend::new()).adopt_unfenced(true);
    store.backend().put_unfenced("k", "legacy".into());
    assert_eq!(store.mark("k").await.unwrap(), Some(FencingToken::ZERO));
    store.fence("k", 3.into()).await.unwrap();
    let got = store.get("k").await.unwrap().unwrap();
    assert_eq!((got.value, got.token), (Bytes::from("legacy"), 3.into()));
    // Adopted once, the object is framed: a store that does not adopt reads it.
    let strict = BlobStore::new(store.backend());
    assert_eq!(strict.mark("k").await.unwrap(), Some(3.into()));
}

#[tokio::test]
async fn a_foreign_overwrite_of_a_fenced_object_does_not_reset_its_mark() {
    let store = BlobStore::new(MemoryBlobBackend::new());
    store.put("k", "v".into(), 34.into()).await.unwrap();
    // A program that knows nothing of fencing rewrites the object.
    store.backend().put_unfenced("k", "plain".into());
    match store.put("k", "zombie".into(), 33.into()).await {
        Err(Error::Unfenced { .. }) => {}
        other => panic!("a zombie must not be let in by a stripped frame: {other:?}"),
    }
}

#[tokio::test]
async fn a_damaged_frame_is_an_error_not_a_zero_mark() {
    let store = BlobStore::new(MemoryBlobBackend::new()).adopt_unfenced(true);
    store
        .backend()
        .put_unfenced("k", Bytes::from_static(b"fencing1\0\0\0\0\0\0\0\x05?"));
    let err = store.put("k", "v".into(), 1.into()).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Backend {
                retryable: false,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn contention_past_the_bound_is_a_typed_error() {
    // A backend whose precondition never holds.
    #[derive(Debug)]
    struct AlwaysLoses;
    #[async_trait::async_trait]
    impl WriteHook<MemoryBlobBackend> for AlwaysLoses {
        async fn write(
            &self,
            _: &MemoryBlobBackend,
            _: &str,
            _: BlobWrite,
        ) -> Result<WriteOutcome> {
            Ok(WriteOutcome::PreconditionFailed)
        }
    }
    let store = BlobStore::new(hooked(AlwaysLoses)).with_max_attempts(3);
    match store.put("k", "v".into(), 1.into()).await {
        Err(e @ Error::Contention { attempts: 3, .. }) => assert!(e.is_retryable()),
        other => panic!("expected Contention after 3 attempts, got {other:?}"),
    }
    assert_eq!(store.mark("k").await.unwrap(), None, "nothing was written");
}

/// A memory backend whose conditional writes go through `hook`.
fn hooked<H>(hook: H) -> HookedWrites<MemoryBlobBackend, H> {
    HookedWrites::new(MemoryBlobBackend::new(), hook)
}

#[tokio::test]
async fn an_applied_write_whose_answer_was_lost_is_never_reported_as_not_written() {
    let backend = hooked(LosesAnswers::new(1, Some((Bytes::from("newer"), 8.into()))));
    let store = BlobStore::new(backend);
    // Ours (token 7) is applied, its answer lost, then token 8 lands: the
    // loop must not say "stale: nothing was written".
    match store.put("k", "ours".into(), 7.into()).await {
        Err(Error::OutcomeUnknown { .. }) => {}
        other => panic!("expected OutcomeUnknown, got {other:?}"),
    }
    assert_eq!(store.get("k").await.unwrap().unwrap().value, "newer");
}

#[tokio::test]
async fn a_lost_answer_is_retried_by_the_loop_and_succeeds() {
    let backend = hooked(LosesAnswers::new(1, None));
    let store = BlobStore::new(backend);
    store.put("k", "v1".into(), 7.into()).await.unwrap();
    let got = store.get("k").await.unwrap().unwrap();
    assert_eq!((got.value, got.token), (Bytes::from("v1"), 7.into()));
}

#[tokio::test]
async fn verify_passes_a_store_that_honours_preconditions() {
    let store = BlobStore::new(MemoryBlobBackend::new());
    let checks = store.verify().await.unwrap();
    assert!(checks.len() >= 5, "{checks:#?}");
    assert!(
        checks.iter().all(|c| c.verdict == Verdict::Pass),
        "{checks:#?}"
    );
    // And again: the probe key keeps its mark, the probe goes above it.
    assert!(fencing_core::safety::all_safe(
        &store.verify().await.unwrap()
    ));
}

#[tokio::test]
async fn verify_flags_a_server_that_ignores_preconditions() {
    let store = BlobStore::new(hooked(IgnoresPreconditions));
    let checks = store.verify().await.unwrap();
    common::assert_preconditions_flagged(&checks);
}
