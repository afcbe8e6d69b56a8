//! The store suite: the [`FencedStore`] contract, one function per clause.
//!
//! Each function takes the store under test and panics with a message on
//! any breach. Run them all with
//! [`store_conformance!`](crate::store_conformance).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fencing_core::memory::MemoryIssuer;
use fencing_core::{Error, FencedStore, FencingToken};
use rand::Rng;

use crate::history::{History, HistoryReport, quick_check};
use crate::unique_name;

/// The lease TTL of the in-memory issuer the zombie and history checks put
/// in front of a store. The in-memory issuer honours any TTL exactly, so
/// this only has to stay well above a store's round trip on a busy machine
/// (a zombie pauses for 1.5 TTLs, and client 2 must write inside its own
/// lease) while keeping the pauses short.
pub const DEFAULT_TTL: Duration = Duration::from_millis(200);

fn t(n: u64) -> FencingToken {
    FencingToken::new(n)
}

async fn assert_state(store: &dyn FencedStore, key: &str, value: Option<&str>, mark: Option<u64>) {
    let got = store.get(key).await.expect("get");
    assert_eq!(
        got.as_ref().map(|v| v.value.clone()),
        value.map(|v| Bytes::copy_from_slice(v.as_bytes())),
        "value of {key:?}"
    );
    if let (Some(v), Some(m)) = (&got, mark) {
        assert_eq!(v.token, t(m), "get's token for {key:?}");
    }
    assert_eq!(
        store.mark(key).await.expect("mark"),
        mark.map(t),
        "mark of {key:?}"
    );
}

/// Writes `value` at `token`, which must be accepted, and checks the
/// store then holds that value under that mark.
async fn accepted(store: &dyn FencedStore, key: &str, value: &str, token: u64, what: &str) {
    let written = store.put(key, value.to_owned().into(), t(token)).await;
    written.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_state(store, key, Some(value), Some(token)).await;
}

/// Asserts that `result` is the refusal a zombie gets: [`Error::StaleToken`]
/// naming `key`, the token `presented` and the store's `current` mark.
///
/// # Panics
/// On any other result, or other fields.
pub fn assert_stale<T: std::fmt::Debug>(
    result: Result<T, Error>,
    key: &str,
    presented: u64,
    current: u64,
) {
    match result {
        Err(Error::StaleToken {
            key: k,
            presented: p,
            current: c,
        }) => {
            assert_eq!(
                (k.as_str(), p, c),
                (key, t(presented), t(current)),
                "StaleToken fields"
            );
        }
        other => panic!(
            "expected StaleToken {{ presented: {presented}, current: {current} }}, got {other:?}"
        ),
    }
}

/// `key` holds a mark and no value; a write one below the mark is refused
/// and changes nothing.
async fn mark_without_value_refuses_a_zombie(store: &dyn FencedStore, key: &str, mark: u64) {
    assert_state(store, key, None, Some(mark)).await;
    let zombie = store.put(key, "zombie".into(), t(mark - 1)).await;
    assert_stale(zombie, key, mark - 1, mark);
    assert_state(store, key, None, Some(mark)).await;
}

/// Equal and higher tokens are accepted; the mark follows.
pub async fn equal_and_higher_accepted(store: &dyn FencedStore) {
    let key = unique_name("accept");
    assert_state(store, &key, None, None).await;
    accepted(store, &key, "a", 5, "first write").await;
    accepted(store, &key, "b", 5, "equal token must be accepted").await;
    accepted(store, &key, "c", 6, "higher token").await;
    accepted(store, &key, "d", 1_000_000, "much higher token").await;
}

/// A lower token is refused with both tokens named, and nothing changes.
pub async fn lower_refused_nothing_applied(store: &dyn FencedStore) {
    let key = unique_name("refuse");
    store
        .put(&key, "holder 34".into(), t(34))
        .await
        .expect("write");
    assert_stale(
        store.put(&key, "zombie 33".into(), t(33)).await,
        &key,
        33,
        34,
    );
    assert_state(store, &key, Some("holder 34"), Some(34)).await;
    assert_stale(store.put(&key, "zombie 1".into(), t(1)).await, &key, 1, 34);
    assert_stale(store.delete(&key, t(2)).await, &key, 2, 34);
    assert_state(store, &key, Some("holder 34"), Some(34)).await;
}

/// `fence` raises the mark without writing; a lower fence is stale.
pub async fn fence_advances_mark(store: &dyn FencedStore) {
    let key = unique_name("fence");
    store.put(&key, "v".into(), t(3)).await.expect("write");
    assert_eq!(store.fence(&key, t(10)).await.expect("fence"), t(10));
    assert_state(store, &key, Some("v"), Some(10)).await;
    assert_stale(store.put(&key, "zombie".into(), t(9)).await, &key, 9, 10);
    assert_eq!(store.fence(&key, t(10)).await.expect("equal fence"), t(10));
    assert_stale(store.fence(&key, t(4)).await, &key, 4, 10);
    accepted(store, &key, "new holder", 10, "the fencer writes").await;

    // Fencing a key with no value leaves a mark but no value.
    let fresh = unique_name("fence-absent");
    store.fence(&fresh, t(7)).await.expect("fence absent key");
    mark_without_value_refuses_a_zombie(store, &fresh, 7).await;
    accepted(store, &fresh, "first", 7, "write at the fenced token").await;
}

/// `delete` removes the value and keeps the mark.
pub async fn delete_keeps_mark(store: &dyn FencedStore) {
    let key = unique_name("delete");
    store.put(&key, "v".into(), t(4)).await.expect("write");
    store.delete(&key, t(5)).await.expect("delete");
    mark_without_value_refuses_a_zombie(store, &key, 5).await;
    accepted(store, &key, "again", 5, "write after delete").await;
}

/// Keys are fenced independently.
pub async fn keys_are_independent(store: &dyn FencedStore) {
    let a = unique_name("indep-a");
    let b = format!("{a}-b");
    store.fence(&a, t(100)).await.expect("fence a");
    accepted(store, &b, "b", 1, "a low token on another key is fine").await;
    assert_state(store, &a, None, Some(100)).await;
}

/// Values come back byte for byte: empty, binary, and large.
pub async fn values_round_trip(store: &dyn FencedStore) {
    let key = unique_name("bytes");
    let size = store.limits().max_value_len.min(256 * 1024);
    let binary: Vec<u8> = (0..=255u8).cycle().take(size).collect();
    for (i, value) in [
        Bytes::new(),
        Bytes::from_static(&[0, 159, 146, 150, 255]),
        Bytes::from(binary),
    ]
    .into_iter()
    .enumerate()
    {
        store
            .put(&key, value.clone(), t(1))
            .await
            .unwrap_or_else(|e| panic!("value #{i}: {e}"));
        let got = store.get(&key).await.expect("get").expect("present");
        assert_eq!(got.value.len(), value.len(), "value #{i} length");
        assert!(got.value == value, "value #{i} changed on the way");
    }
}

/// Bad input is refused with a typed error and writes nothing.
pub async fn bad_input_writes_nothing(store: &dyn FencedStore) {
    let limits = store.limits();
    let key = unique_name("bad-input");
    store.put(&key, "kept".into(), t(2)).await.expect("write");

    for (what, bad_key) in [
        ("an empty key", String::new()),
        ("an oversize key", "k".repeat(limits.max_key_len + 1)),
        // A URL path drops dot segments: GCS and Azure would name the
        // bucket itself. Refused everywhere, so keys stay portable.
        ("the key \".\"", ".".to_owned()),
        ("the key \"..\"", "..".to_owned()),
    ] {
        for (op, result) in [
            (
                "put",
                store.put(&bad_key, "x".into(), t(3)).await.map(|_| ()),
            ),
            ("fence", store.fence(&bad_key, t(3)).await.map(|_| ())),
            ("delete", store.delete(&bad_key, t(3)).await),
        ] {
            assert!(
                matches!(result, Err(Error::InvalidInput { .. })),
                "{op} with {what} must be InvalidInput, got {result:?}"
            );
        }
    }

    if limits.max_token < FencingToken::new(u64::MAX) {
        let above = FencingToken::new(limits.max_token.get() + 1);
        for (op, result) in [
            ("put", store.put(&key, "x".into(), above).await.map(|_| ())),
            ("fence", store.fence(&key, above).await.map(|_| ())),
            ("delete", store.delete(&key, above).await),
        ] {
            assert!(
                matches!(result, Err(Error::TokenOutOfRange { .. })),
                "{op} with token {above} must be TokenOutOfRange, got {result:?}"
            );
        }
    }

    // Only allocate an oversize value where the limit is small enough.
    if limits.max_value_len <= 64 * 1024 * 1024 {
        let huge = Bytes::from(vec![b'x'; limits.max_value_len + 1]);
        let result = store.put(&key, huge, t(3)).await;
        assert!(
            matches!(result, Err(Error::InvalidInput { .. })),
            "a value over {} bytes must be InvalidInput, got {result:?}",
            limits.max_value_len
        );
    }
    assert_state(store, &key, Some("kept"), Some(2)).await;
}

/// 8 tasks × 25 writes with random interleaved tokens on one key: the
/// accepted history never goes backwards, every refusal was truly stale,
/// and the final state is the highest accepted write.
pub async fn racing_writers(store: Arc<dyn FencedStore>) {
    racing_writers_with(store, 8, 25).await;
}

/// [`racing_writers`] with a chosen number of writers and writes each.
pub async fn racing_writers_with(store: Arc<dyn FencedStore>, writers: usize, writes: usize) {
    let key = unique_name("race");
    let history = History::new();
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let (store, history, key) = (store.clone(), history.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..writes {
                // Tokens drift upward with interleaving, so writers race on
                // both sides of the mark.
                let base = (i * writers) as u64;
                let token = t(base + rand::rng().random_range(0..(writers as u64 * 3)) + 1);
                if rand::rng().random_bool(0.1) {
                    let _ = history.fence(&*store, writer, &key, token).await;
                } else {
                    let value = Bytes::from(format!("writer {writer} write {i} token {token}"));
                    let _ = history.put(&*store, writer, &key, value, token).await;
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer panicked");
    }
    let tally = history.check_final(&*store, &key).await;
    assert!(
        tally.violations.is_empty(),
        "racing writers on {}:\n  {}",
        store.name(),
        tally.violations.join("\n  ")
    );
    assert_eq!(
        tally.failed,
        0,
        "writes failed with errors other than StaleToken: {:?}",
        history
            .ops()
            .iter()
            .filter_map(|o| match &o.outcome {
                crate::history::Outcome::Failed(e) => Some(e.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
    );
    assert!(
        tally.accepted > 0 && tally.refused > 0,
        "the race proved nothing: {tally:?}"
    );
}

/// The Figure 9-6 zombie against this store, with an in-memory issuer (so
/// only the store is under test) at `ttl`, with and without fencing on
/// acquire. See [`zombie::zombie_is_refused`](crate::zombie::zombie_is_refused).
pub async fn zombie_is_refused(store: &dyn FencedStore, ttl: Duration) {
    crate::zombie::zombie_is_refused(&MemoryIssuer::new(), store, ttl).await;
}

/// The randomized history checker against this store, with an in-memory
/// issuer at `ttl`. See [`quick_check`].
pub async fn history_checker_finds_no_stale_accept(
    store: Arc<dyn FencedStore>,
    ttl: Duration,
) -> HistoryReport {
    quick_check(Arc::new(MemoryIssuer::new()), store, ttl).await
}

/// [`FencedStore::verify`] runs and finds nothing unsafe (on object stores
/// that includes the server honouring both preconditions), twice in a row.
pub async fn verify_finds_nothing_unsafe(store: &dyn FencedStore) {
    for _ in 0..2 {
        let checks = store.verify().await.expect("the probe runs");
        for check in &checks {
            println!("{}: {} ({})", check.verdict, check.name, check.detail);
        }
        assert!(checks.len() >= 3, "{checks:#?}");
        assert!(
            checks
                .iter()
                .all(|c| c.verdict == fencing_core::safety::Verdict::Pass),
            "{checks:#?}"
        );
    }
}

/// Clause 8 on a store that keeps a floor. `store` must be a store of its
/// own (its tables, its namespace): the floor it raises refuses low tokens
/// on every key, so no other test may share it. The floor refuses at or
/// below it on every key, a key never written included, and changes
/// nothing; it only rises and stays below `max_token`; removing the marks
/// it covers keeps every value and every mark above it, and the holders
/// whose marks went are still refused.
pub async fn floor_refuses_on_every_key(store: &dyn FencedStore) {
    floor_refuses(store, true).await;
}

/// Clause 8 on a store that checks its floor where a key has no mark (a
/// key never written, or one whose mark the floor let go), and lets a key
/// with a mark keep its mark's rule (DynamoDB: reading the floor in every
/// write would make one item every write's transaction). As
/// [`floor_refuses_on_every_key`], except that a token between a key's
/// mark and the floor is accepted on that key.
pub async fn floor_refuses_where_no_mark_is(store: &dyn FencedStore) {
    floor_refuses(store, false).await;
}

/// [`floor_refuses_on_every_key`], or with `on_marked_keys` false
/// [`floor_refuses_where_no_mark_is`].
async fn floor_refuses(store: &dyn FencedStore, on_marked_keys: bool) {
    let key = |what: &str| unique_name(&format!("floor-{what}"));
    let (live, deleted, fenced, above, fresh) = (
        key("live"),
        key("deleted"),
        key("fenced"),
        key("above"),
        key("fresh"),
    );
    assert_eq!(
        store.floor().await.expect("floor"),
        None,
        "a new store has no floor"
    );
    store.put(&live, "live".into(), t(10)).await.expect("put");
    store
        .put(&deleted, "gone".into(), t(20))
        .await
        .expect("put");
    store.delete(&deleted, t(21)).await.expect("delete");
    store.fence(&fenced, t(30)).await.expect("fence");
    store.fence(&above, t(100)).await.expect("fence");

    assert_eq!(store.raise_floor(t(50)).await.expect("raise"), t(50));
    assert_eq!(store.floor().await.expect("floor"), Some(t(50)));
    assert!(
        matches!(
            store.raise_floor(t(40)).await,
            Err(Error::InvalidInput { .. })
        ),
        "a floor is never lowered"
    );
    assert_eq!(
        store
            .raise_floor(t(50))
            .await
            .expect("the same floor again"),
        t(50)
    );
    let max = store.limits().max_token;
    assert!(
        matches!(
            store.raise_floor(max).await,
            Err(Error::TokenOutOfRange { .. })
        ),
        "a floor at max_token would leave no token to write with"
    );
    assert_eq!(store.floor().await.expect("floor"), Some(t(50)));

    // At or below the floor: refused where no mark is, naming floor + 1.
    assert_stale(
        store.put(&fresh, "zombie".into(), t(3)).await,
        &fresh,
        3,
        51,
    );
    assert_stale(store.fence(&fresh, t(50)).await, &fresh, 50, 51);
    assert_state(store, &fresh, None, None).await;
    if on_marked_keys {
        // And on keys with a mark below the floor.
        assert_stale(
            store.put(&live, "zombie".into(), t(50)).await,
            &live,
            50,
            51,
        );
        assert_stale(store.delete(&live, t(49)).await, &live, 49, 51);
        assert_stale(store.fence(&fenced, t(40)).await, &fenced, 40, 51);
    } else {
        // A key with a mark keeps its mark's rule: a token above the mark
        // and at or below the floor is accepted there.
        assert_eq!(
            store.fence(&fenced, t(40)).await.expect("above the mark"),
            t(40)
        );
        assert_stale(store.fence(&fenced, t(35)).await, &fenced, 35, 40);
    }
    assert_state(store, &live, Some("live"), Some(10)).await;
    assert_stale(
        store.put(&above, "zombie".into(), t(99)).await,
        &above,
        99,
        100,
    );

    // The covered marks go; values and higher marks stay.
    let mut removed = store.remove_floored_marks(1).await.expect("remove");
    assert_eq!(removed, 1, "at most the number asked for");
    loop {
        let more = store.remove_floored_marks(100).await.expect("remove");
        if more == 0 {
            break;
        }
        removed += more;
    }
    assert!(
        removed >= 2,
        "the deleted and the fenced keys' marks: {removed}"
    );
    assert_state(store, &deleted, None, None).await;
    assert_state(store, &fenced, None, None).await;
    assert_state(store, &live, Some("live"), Some(10)).await;
    assert_state(store, &above, None, Some(100)).await;

    // The holders whose marks went are refused by the floor.
    assert_stale(
        store.put(&deleted, "zombie".into(), t(21)).await,
        &deleted,
        21,
        51,
    );
    assert_stale(
        store.put(&fenced, "zombie".into(), t(30)).await,
        &fenced,
        30,
        51,
    );
    assert_state(store, &deleted, None, None).await;
    accepted(
        store,
        &deleted,
        "next holder",
        51,
        "a token above the floor",
    )
    .await;
    accepted(
        store,
        &live,
        "next holder",
        51,
        "above the floor, above the mark",
    )
    .await;
}

/// Clause 8 under concurrency, on a store of its own: zombies keep writing
/// a token between the floor and their keys' marks while the floor is
/// raised over those marks and the marks are removed. Every zombie write
/// must be refused, first by its key's mark, then by the floor; a write
/// judged by the old floor that landed after its mark's removal would be
/// accepted here.
pub async fn floor_raised_and_marks_removed_under_zombie_writes(store: Arc<dyn FencedStore>) {
    const KEYS: usize = 24;
    let keys: Vec<String> = (0..KEYS)
        .map(|i| unique_name(&format!("floor-race-{i}")))
        .collect();
    store.raise_floor(t(50)).await.expect("raise");
    for key in &keys {
        store.fence(key, t(60)).await.expect("fence");
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let refused = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut zombies = tokio::task::JoinSet::new();
    for i in 0..4 {
        let (store, keys) = (store.clone(), keys.clone());
        let (stop, refused) = (stop.clone(), refused.clone());
        zombies.spawn(async move {
            let mut round = 0_usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let key = &keys[(round * 4 + i) % KEYS];
                round += 1;
                match store.put(key, "zombie".into(), t(55)).await {
                    Err(Error::StaleToken { .. }) => {
                        refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    other => panic!("a zombie's write at 55 on {key:?} was answered {other:?}"),
                }
                // A store in memory answers at once: let the raiser run.
                tokio::task::yield_now().await;
            }
        });
    }
    // Counted, not timed (on a loaded machine a few milliseconds may see
    // no zombie write at all): as many writes as there are keys before the
    // raise, and as many again after the last mark went.
    zombie_writes(&refused, &mut zombies, KEYS as u64).await;
    store
        .raise_floor(t(70))
        .await
        .expect("raise over the marks");
    let mut removed = 0;
    loop {
        let more = store.remove_floored_marks(5).await.expect("remove");
        if more == 0 {
            break;
        }
        removed += more;
    }
    let after = refused.load(std::sync::atomic::Ordering::Relaxed) + KEYS as u64;
    zombie_writes(&refused, &mut zombies, after).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    while let Some(zombie) = zombies.join_next().await {
        zombie.expect("zombie task");
    }
    assert!(
        removed >= KEYS as u64,
        "every key's mark was covered: {removed}"
    );
    for key in &keys {
        assert!(
            store.get(key).await.expect("get").is_none(),
            "{key:?} holds a zombie's value"
        );
    }
}

/// Waits until the zombies' refused writes number `at_least`; a zombie
/// that ended (its write was accepted: it panicked) fails the test at once.
async fn zombie_writes(
    refused: &std::sync::atomic::AtomicU64,
    zombies: &mut tokio::task::JoinSet<()>,
    at_least: u64,
) {
    let wait = async {
        while refused.load(std::sync::atomic::Ordering::Relaxed) < at_least {
            if let Some(ended) = zombies.try_join_next() {
                ended.expect("zombie task");
                panic!("a zombie stopped before it was told to");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    // A bound against a hang only, far above any run's time.
    assert!(
        tokio::time::timeout(Duration::from_secs(120), wait)
            .await
            .is_ok(),
        "the zombies' writes were not answered: {} refused, {at_least} wanted",
        refused.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// A store that keeps no floor says so by name, for all three calls.
pub async fn keeps_no_floor(store: &dyn FencedStore) {
    let unsupported = |e: Error| matches!(e, Error::Unsupported { .. });
    assert!(unsupported(store.floor().await.expect_err("floor")));
    assert!(unsupported(
        store.raise_floor(t(5)).await.expect_err("raise_floor")
    ));
    assert!(unsupported(
        store
            .remove_floored_marks(5)
            .await
            .expect_err("remove_floored_marks")
    ));
}
