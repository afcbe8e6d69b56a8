//! Checks for object-store adapters built on [`fencing_core::adapter::blob::BlobStore`].
//!
//! The three object stores share one compare-and-swap loop, so the way to
//! test an adapter is the same everywhere: the store suite on
//! `BlobStore::new(backend)`, plus a race big enough that writes lose their
//! precondition (HTTP 412, Azure's 409) and take the retry path.
//! [`CountingBackend`] wraps any [`BlobBackend`] to prove the race did take
//! it. Run them all with
//! [`blob_store_conformance!`](crate::blob_store_conformance).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use fencing_core::adapter::blob::{
    BlobBackend, BlobMeta, BlobStore, BlobWrite, HookedWrites, Precondition, WriteHook,
    WriteOutcome, frame,
};
use fencing_core::{FencedStore, FencingToken, Limits, Result};

/// A [`BlobBackend`] that forwards to `B` and counts its conditional
/// writes: `CountingBackend::new(backend, WriteCounts::default())`, the
/// counts in [`hook()`](HookedWrites::hook).
pub type CountingBackend<B> = HookedWrites<B, WriteCounts>;

/// Conditional writes that got an answer, and the ones whose precondition
/// failed.
#[derive(Debug, Default)]
pub struct WriteCounts {
    writes: AtomicU64,
    lost: AtomicU64,
}

impl WriteCounts {
    /// Conditional writes that got an answer, won or lost.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Writes answered [`WriteOutcome::PreconditionFailed`].
    pub fn precondition_failures(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl<B: BlobBackend> WriteHook<B> for WriteCounts {
    async fn write(&self, inner: &B, key: &str, write: BlobWrite) -> Result<WriteOutcome> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let outcome = inner.write(key, write).await?;
        if outcome == WriteOutcome::PreconditionFailed {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
        Ok(outcome)
    }
}

/// `BlobStore::new(backend)` as the store suite takes it.
pub fn fenced<B: BlobBackend + 'static>(backend: B) -> Arc<dyn FencedStore> {
    Arc::new(BlobStore::new(backend))
}

/// [`racing_writers_with`](crate::store::racing_writers_with) on
/// `BlobStore::new(backend)`, counting the backend's answers: besides the
/// race's own checks, at least one write must have lost its precondition,
/// or the retry path was never exercised. Returns `(writes, lost)`.
pub async fn racing_writers_take_the_precondition_path<B: BlobBackend + 'static>(
    backend: B,
    writers: usize,
    writes: usize,
) -> (u64, u64) {
    let counting = CountingBackend::new(backend, WriteCounts::default());
    let store = Arc::new(BlobStore::new(counting));
    crate::store::racing_writers_with(store.clone(), writers, writes).await;
    let counting = store.backend();
    let counts = counting.hook();
    let (writes, lost) = (counts.writes(), counts.precondition_failures());
    println!(
        "{} race: {writes} conditional writes, {lost} lost their precondition (412/409) and re-read",
        counting.name()
    );
    assert!(
        lost > 0,
        "no write lost its precondition in {writes} writes: the 412/409 path was not exercised"
    );
    (writes, lost)
}

/// A backend's conditional writes on `key` (absent), each body `value`
/// framed at a token: a create at 5 succeeds and a second create fails its
/// precondition (HTTP 412, Azure's 409); a rewrite at 6 conditional on the
/// first version succeeds with a new version (the frame is in the body, so
/// the version follows the token); a write at 5 conditional on the first
/// version then fails; the object reads back as the rewrite, at its version.
/// Where the backend deletes conditionally, a delete on the first version
/// is refused and one on the rewrite's removes it.
pub async fn conditional_writes_follow_the_version<B: BlobBackend>(
    backend: &B,
    key: &str,
    value: &[u8],
) {
    let at = |token: u64, precondition: Precondition| {
        let hint = BlobMeta {
            token: FencingToken::new(token),
            has_value: true,
        };
        BlobWrite::new(frame::encode(hint, value), hint, precondition)
    };
    let write = async |write: BlobWrite| backend.write(key, write).await.expect("a write");
    let size = value.len();
    let WriteOutcome::Written(first) = write(at(5, Precondition::Absent)).await else {
        panic!("{size} bytes: the first create lost its precondition");
    };
    assert_eq!(
        write(at(5, Precondition::Absent)).await,
        WriteOutcome::PreconditionFailed,
        "{size} bytes: a create over an existing object must fail its precondition"
    );
    let on_first = || Precondition::Matches(first.clone());
    let WriteOutcome::Written(second) = write(at(6, on_first())).await else {
        panic!("{size} bytes: the rewrite at the current version lost its precondition");
    };
    assert_ne!(
        first, second,
        "{size} bytes: the version must change on every write"
    );
    assert_eq!(
        write(at(5, on_first())).await,
        WriteOutcome::PreconditionFailed,
        "{size} bytes: a write conditional on the old version went through"
    );
    let stored = backend.read(key).await.expect("read").expect("present");
    assert!(
        stored.bytes == at(6, on_first()).body && stored.version == second,
        "{size} bytes: the object must read back as the rewrite, at its version"
    );
    if !backend.deletes_conditionally() {
        return;
    }
    let delete = async |version: &_| backend.delete_if(key, version).await.expect("a delete");
    assert!(
        !delete(&first).await,
        "{size} bytes: a delete conditional on the old version went through"
    );
    assert!(
        backend.read(key).await.expect("read").is_some(),
        "{size} bytes: a refused delete removed the object"
    );
    assert!(
        delete(&second).await,
        "{size} bytes: a delete at the current version was refused"
    );
    assert!(
        backend.read(key).await.expect("read").is_none(),
        "{size} bytes: the object is still there after its delete"
    );
    assert!(
        !delete(&second).await,
        "{size} bytes: a delete of nothing went through"
    );
}

/// Asserts `limits` are an object store's: keys up to `max_key_len` bytes,
/// values up to `max_object_len` less the frame header, any `u64` token;
/// a key or a value one over is refused before any request (no allocation
/// needed to check the length).
pub fn assert_object_limits(limits: Limits, max_key_len: usize, max_object_len: u64) {
    assert_eq!(limits.max_key_len, max_key_len);
    assert_eq!(
        limits.max_value_len as u64 + frame::FRAME_HEADER_LEN as u64,
        max_object_len
    );
    assert_eq!(limits.max_token, FencingToken::new(u64::MAX));
    let one = FencingToken::new(1);
    for (key, len) in [
        ("k".to_owned(), limits.max_value_len + 1),
        ("k".repeat(max_key_len + 1), 1),
    ] {
        assert!(
            matches!(
                limits.check_write(&key, one, len),
                Err(fencing_core::Error::InvalidInput { .. })
            ),
            "a {}-byte key with a {len}-byte value must be refused",
            key.len()
        );
    }
}

/// What a tampering step is expected to leave behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterTampering {
    /// A metadata-only change: the object is still ours at its old mark.
    MarkKept,
    /// A foreign overwrite: the object is no longer framed and is refused
    /// with [`fencing_core::Error::Unfenced`].
    Foreign,
}

/// Writes `key` at token 34 through `store`, runs `tamper` (an operation done
/// with the SDK behind the store's back: a metadata-only change or a plain
/// overwrite), then presents the zombie token 33 to a put, a fence and a
/// delete. None may be accepted: after a metadata-only change each is
/// [`Error::StaleToken`](fencing_core::Error::StaleToken) naming 34 and the value
/// reads back unchanged; after a foreign overwrite each is
/// [`Error::Unfenced`](fencing_core::Error::Unfenced), and so is a read.
pub async fn tampering_cannot_lower_the_mark<F, Fut>(
    store: &dyn FencedStore,
    key: &str,
    what: &str,
    expect: AfterTampering,
    tamper: F,
) where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use fencing_core::Error;
    let (mark, zombie) = (FencingToken::new(34), FencingToken::new(33));
    store
        .put(key, Bytes::from_static(b"written at 34"), mark)
        .await
        .unwrap_or_else(|e| panic!("{what}: the first write failed: {e}"));
    tamper().await;
    let attempts = [
        (
            "put",
            store.put(key, Bytes::from_static(b"zombie"), zombie).await,
        ),
        ("fence", store.fence(key, zombie).await.map(drop)),
        ("delete", store.delete(key, zombie).await),
    ];
    for (op, result) in attempts {
        match (expect, result) {
            (AfterTampering::MarkKept, Err(Error::StaleToken { current, .. })) => {
                assert_eq!(current, mark, "{what}: {op} named the wrong mark");
            }
            (AfterTampering::Foreign, Err(Error::Unfenced { key: k })) => assert_eq!(k, key),
            (_, other) => panic!(
                "{what}: the zombie's {op} at token 33 after the mark was 34 must be refused \
                 ({expect:?}), got {other:?}"
            ),
        }
    }
    match expect {
        AfterTampering::MarkKept => {
            let got = store.get(key).await.expect("read back").expect("a value");
            assert_eq!(
                (got.value, got.token),
                (Bytes::from_static(b"written at 34"), mark),
                "{what}: the value or mark changed"
            );
            assert_eq!(store.mark(key).await.expect("mark"), Some(mark), "{what}");
        }
        AfterTampering::Foreign => {
            assert!(
                matches!(store.get(key).await, Err(Error::Unfenced { .. })),
                "{what}: a read must say the object is not fenced"
            );
        }
    }
}

/// A fault injector between a store's client and its server that lets the
/// server apply a request and loses the answer, what
/// [`a_lost_answer_is_an_unknown_outcome`] drives. A loopback TCP proxy that
/// reads HTTP/1.1 is enough (this workspace's harness has one).
#[async_trait]
pub trait LosesAnswers: Send + Sync {
    /// Loses the answers to the next `count` requests whose first bytes are
    /// `prefix` (the server still applies them); their connections stay
    /// open until [`release`](Self::release). Starts a new record of lost
    /// answers.
    fn drop_answers(&self, prefix: &[u8], count: usize);
    /// Waits (at most `within`) until `n` answers have been lost since the
    /// last [`drop_answers`](Self::drop_answers) and returns
    /// their status lines (e.g. `HTTP/1.1 200 OK`); panics if fewer were.
    async fn wait_dropped(&self, n: usize, within: std::time::Duration) -> Vec<String>;
    /// Closes the connections whose answers were lost.
    fn release(&self);
}

/// The lost-answer scenario: `through_proxy` writes token 7 through
/// `proxy`, which lets the server apply the write and loses the answer
/// (requests starting with `write_prefix`, e.g. `b"PUT "`); while the
/// answer is lost, `direct` (same bucket, no proxy) writes token 8; then the
/// connection is cut. The write was applied, so the call must not say
/// "nothing was written" ([`StaleToken`](fencing_core::Error::StaleToken),
/// [`Contention`](fencing_core::Error::Contention)) nor succeed quietly: it is
/// [`OutcomeUnknown`](fencing_core::Error::OutcomeUnknown). Returns the status
/// line of the lost answer.
pub async fn a_lost_answer_is_an_unknown_outcome(
    through_proxy: Arc<dyn FencedStore>,
    direct: &dyn FencedStore,
    proxy: &dyn LosesAnswers,
    write_prefix: &[u8],
    key: &str,
) -> String {
    use std::time::Duration;

    use fencing_core::Error;
    // Create the key first, so the lost write is an update.
    direct
        .put(key, Bytes::from_static(b"first"), FencingToken::new(6))
        .await
        .expect("the first write");
    proxy.drop_answers(write_prefix, 1);
    let key_owned = key.to_owned();
    let ours = tokio::spawn(async move {
        through_proxy
            .put(
                &key_owned,
                Bytes::from_static(b"ours"),
                FencingToken::new(7),
            )
            .await
    });
    let lost = proxy.wait_dropped(1, Duration::from_secs(30)).await;
    let status = lost[0].clone();
    assert!(
        status.contains(" 200") || status.contains(" 201"),
        "the server should have applied the write whose answer was lost: {status:?}"
    );
    direct
        .put(key, Bytes::from_static(b"newer"), FencingToken::new(8))
        .await
        .expect("the newer holder's write");
    proxy.release();
    let result = tokio::time::timeout(Duration::from_secs(60), ours)
        .await
        .expect("the write returns")
        .expect("no panic");
    match result {
        Err(Error::OutcomeUnknown { .. }) => {}
        other => panic!(
            "the write was applied ({status}) but its answer lost: it must be reported as \
             OutcomeUnknown, got {other:?}"
        ),
    }
    let got = direct.get(key).await.expect("read").expect("value");
    assert_eq!(
        (got.value, got.token),
        (Bytes::from_static(b"newer"), FencingToken::new(8))
    );
    status
}

/// Objects written by a program that knows nothing of fencing (no frame;
/// `put_foreign(key, bytes)` writes one with the SDK): `strict` refuses
/// every operation on them with [`Error::Unfenced`](fencing_core::Error::Unfenced)
/// and leaves them alone; `adopting` (the same backend with
/// `adopt_unfenced(true)`) reads them at mark 0 and fences them, keeping the
/// body, after which `strict` reads them too. An empty foreign object (whose
/// ranged read is a 416 on real stores) is refused and adopted the same way.
pub async fn unfenced_objects_are_refused_unless_adopted<F, Fut>(
    strict: &dyn FencedStore,
    adopting: &dyn FencedStore,
    key: &str,
    put_foreign: F,
) where
    F: Fn(String, &'static [u8]) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use fencing_core::Error;
    put_foreign(key.to_owned(), b"legacy bytes").await;
    for (op, result) in [
        ("mark", strict.mark(key).await.map(drop)),
        ("get", strict.get(key).await.map(drop)),
        (
            "put",
            strict
                .put(key, Bytes::from_static(b"zombie"), FencingToken::new(1))
                .await,
        ),
        (
            "fence",
            strict.fence(key, FencingToken::new(1)).await.map(drop),
        ),
    ] {
        assert!(
            matches!(result, Err(Error::Unfenced { .. })),
            "{op} of a foreign object must be Unfenced, got {result:?}"
        );
    }
    assert_eq!(
        adopting.mark(key).await.expect("adopted mark"),
        Some(FencingToken::ZERO)
    );
    adopting
        .fence(key, FencingToken::new(3))
        .await
        .expect("adopting fence");
    let got = strict
        .get(key)
        .await
        .expect("read")
        .expect("body kept by fence");
    assert_eq!(
        (got.value, got.token),
        (Bytes::from_static(b"legacy bytes"), FencingToken::new(3))
    );

    let empty = format!("{key}-empty");
    put_foreign(empty.clone(), b"").await;
    let mark = strict.mark(&empty).await;
    assert!(matches!(mark, Err(Error::Unfenced { .. })), "{mark:?}");
    assert_eq!(
        adopting.mark(&empty).await.expect("adopted mark"),
        Some(FencingToken::ZERO)
    );
}

/// A backend that counts every request it forwards (reads and writes)
/// and, when given a racer, first lets the racer write the key at the
/// racer's next token before each of its own writes: another writer's
/// write landing between whatever this one read and its write, every time,
/// on the real server.
#[derive(Debug)]
struct Raced<B: BlobBackend> {
    inner: Arc<B>,
    requests: AtomicU64,
    racer: Option<(BlobStore<Arc<B>>, AtomicU64)>,
}

impl<B: BlobBackend> Raced<B> {
    fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl<B: BlobBackend> BlobBackend for Raced<B> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn limits(&self) -> Limits {
        self.inner.limits()
    }

    async fn read_range(
        &self,
        key: &str,
        len: Option<usize>,
    ) -> Result<Option<fencing_core::adapter::blob::StoredObject>> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.inner.read_range(key, len).await
    }

    async fn write(&self, key: &str, write: BlobWrite) -> Result<WriteOutcome> {
        if let Some((racer, token)) = &self.racer {
            let token = FencingToken::new(token.load(Ordering::Relaxed));
            racer
                .put(key, Bytes::from_static(b"the racer's"), token)
                .await
                .expect("the racer's write");
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.inner.write(key, write).await
    }
}

/// A writer whose every write is overtaken by a racer's write at a higher
/// token, as a write under an old token is among many writers: each of its
/// puts must be refused naming the racer's token, and, once the writer has
/// seen its read overtaken, cost two requests (the conditional write on the
/// version it last saw, which fails, and the read that finds the racer's
/// mark), not three (a read that the racer overtakes too, the write, the
/// read again). Returns the requests of the puts after the first.
pub async fn contended_puts_skip_the_read<B: BlobBackend + 'static>(backend: B) -> u64 {
    let backend = Arc::new(backend);
    let key = crate::unique_name("contended");
    let store = BlobStore::new(Raced {
        inner: backend.clone(),
        requests: AtomicU64::new(0),
        racer: Some((BlobStore::new(backend.clone()), AtomicU64::new(0))),
    });
    let puts = 6;
    let mut after_first = 0;
    for i in 0..puts {
        let (ours, theirs) = (10 * i + 1, 10 * i + 5);
        let raced = store.backend();
        if let Some((_, next)) = &raced.racer {
            next.store(theirs, Ordering::Relaxed);
        }
        let before = raced.requests();
        let refused = store
            .put(&key, Bytes::from_static(b"ours"), FencingToken::new(ours))
            .await;
        assert!(
            matches!(
                &refused,
                Err(fencing_core::Error::StaleToken { presented, current, .. })
                    if presented.get() == ours && current.get() == theirs
            ),
            "put {i} at {ours}, overtaken at {theirs}: {refused:?}"
        );
        if i > 0 {
            after_first += raced.requests() - before;
        }
    }
    let stored = BlobStore::new(backend.clone())
        .get(&key)
        .await
        .expect("read")
        .expect("present");
    assert_eq!(
        (stored.value, stored.token.get()),
        (Bytes::from_static(b"the racer's"), 10 * (puts - 1) + 5),
        "the racer's last write is what is stored"
    );
    println!(
        "{}: {after_first} requests for {} overtaken puts",
        backend.name(),
        puts - 1
    );
    assert!(
        after_first <= 2 * (puts - 1),
        "{after_first} requests for {} puts overtaken every time: more than 2 each",
        puts - 1
    );
    after_first
}

/// Two writers taking turns on one key (each put a higher token, none
/// racing): once each has seen the other's writes, a put reads and then
/// writes, two requests, and never tries the version it last saw first
/// (it is always the other's turn since).
pub async fn writers_taking_turns_read_once<B: BlobBackend + 'static>(backend: B) {
    let backend = Arc::new(backend);
    let key = crate::unique_name("turns");
    let writer = || {
        BlobStore::new(Raced {
            inner: backend.clone(),
            requests: AtomicU64::new(0),
            racer: None,
        })
    };
    let writers = [writer(), writer()];
    for turn in 0..10u64 {
        let store = &writers[usize::try_from(turn % 2).expect("0 or 1")];
        let before = store.backend().requests();
        store
            .put(
                &key,
                Bytes::from_static(b"a turn"),
                FencingToken::new(turn + 1),
            )
            .await
            .expect("a put in turn");
        let requests = store.backend().requests() - before;
        // Each writer's first turn reads (cold), its second tries the
        // version of its own last write (trusted then) and loses.
        if turn >= 4 {
            assert_eq!(requests, 2, "turn {turn}: {requests} requests");
        }
    }
}
