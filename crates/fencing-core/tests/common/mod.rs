//! What the core's test binaries share.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use fencing_core::adapter::blob::{BlobBackend, BlobStore, BlobWrite, WriteHook, WriteOutcome};
use fencing_core::memory::MemoryBlobBackend;
use fencing_core::{Error, FencedStore, FencingToken, Result};

/// 16 writers × 10 puts of `"k"`, all at token 1, so only the backend's
/// precondition keeps them apart. Panics if a put fails.
pub(crate) async fn sixteen_writers_at_one_token<S: FencedStore + 'static>(store: Arc<S>) {
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
}

/// Applies writes but loses their answers (what an SDK's internal retry
/// would turn into "nothing was written"): the next `lose` of them, each
/// reported as an unknown outcome, optionally with another writer let in
/// right after.
#[derive(Debug)]
pub(crate) struct LosesAnswers {
    lose: AtomicU32,
    /// Written (with a higher token) right after each lost answer.
    then: Option<(Bytes, FencingToken)>,
}

impl LosesAnswers {
    /// Loses the next `lose` answers.
    pub(crate) fn new(lose: u32, then: Option<(Bytes, FencingToken)>) -> Self {
        Self {
            lose: lose.into(),
            then,
        }
    }
}

#[async_trait]
impl WriteHook<MemoryBlobBackend> for LosesAnswers {
    fn name(&self, _: &MemoryBlobBackend) -> &'static str {
        "loses-answers"
    }

    async fn write(
        &self,
        inner: &MemoryBlobBackend,
        key: &str,
        w: BlobWrite,
    ) -> Result<WriteOutcome> {
        let outcome = inner.write(key, w).await?;
        let lost = self
            .lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if lost.is_err() {
            return Ok(outcome);
        }
        assert!(matches!(outcome, WriteOutcome::Written(_)));
        if let Some((value, token)) = &self.then {
            let newer = BlobStore::new(inner).put(key, value.clone(), *token).await;
            newer.expect("the write let in after the lost answer");
        }
        Err(Error::outcome_unknown(
            "loses-answers",
            format!("conditional write of {key:?}"),
            "connection reset after the request was sent",
        ))
    }
}

/// A server that ignores preconditions: every write is applied, as if its
/// precondition held (what `verify` must flag as unsafe).
#[derive(Debug)]
pub(crate) struct IgnoresPreconditions;

#[async_trait]
impl WriteHook<MemoryBlobBackend> for IgnoresPreconditions {
    async fn write(
        &self,
        inner: &MemoryBlobBackend,
        key: &str,
        mut write: BlobWrite,
    ) -> Result<WriteOutcome> {
        write.precondition = match inner.read_prefix(key, 0).await? {
            Some(o) => fencing_core::adapter::blob::Precondition::Matches(o.version),
            None => fencing_core::adapter::blob::Precondition::Absent,
        };
        inner.write(key, write).await
    }
}

/// `verify`'s checks on a server that ignores preconditions: both
/// precondition probes, and only they, are unsafe, naming why.
pub(crate) fn assert_preconditions_flagged(checks: &[fencing_core::safety::SafetyCheck]) {
    let unsafe_checks: Vec<_> = checks
        .iter()
        .filter(|c| c.verdict == fencing_core::safety::Verdict::Unsafe)
        .collect();
    assert_eq!(unsafe_checks.len(), 2, "{checks:#?}");
    assert!(unsafe_checks[0].detail.contains("ignores"), "{checks:#?}");
}
