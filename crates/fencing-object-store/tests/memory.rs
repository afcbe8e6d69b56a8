//! On object_store's `InMemory`: object_store's own conformance functions
//! on a `FencedObjectStore`, the fencing blob-store suite on an
//! `ObjectStoreBackend`, and the fenced store's own contract through the
//! `ObjectStore` interface (stale puts refused naming both tokens,
//! tombstones that keep the mark, the put modes, staged multipart uploads,
//! bad input). The emulators run the same in `integration/tests`.

use std::sync::Arc;

use bytes::Bytes;
use fencing_core::adapter::blob::{BlobStore, FRAME_HEADER_LEN};
use fencing_core::{Error, FencedStore, FencingToken, Limits};
use fencing_object_store::conformance::Hooked;
use fencing_object_store::{FencedObjectStore, ObjectStoreBackend, fencing_error};
use futures_util::TryStreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, Extensions, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode,
    PutOptions, PutPayload, RenameOptions, UpdateVersion,
};

mod suite {
    use super::*;

    async fn store() -> Option<Arc<FencedObjectStore<InMemory>>> {
        Some(Arc::new(FencedObjectStore::new(
            InMemory::new(),
            FencingToken::new(1),
        )))
    }

    fencing_object_store::object_store_suite!(store);
}

mod blob {
    use super::*;

    /// `InMemory` answers within one poll, so racing writers would never
    /// interleave: a millisecond per call, as a server's round trip, lets
    /// them race.
    async fn backend() -> Option<ObjectStoreBackend> {
        use object_store::throttle::{ThrottleConfig, ThrottledStore};
        let config = ThrottleConfig {
            wait_get_per_call: std::time::Duration::from_millis(1),
            wait_put_per_call: std::time::Duration::from_millis(1),
            ..ThrottleConfig::default()
        };
        Some(ObjectStoreBackend::new(Arc::new(ThrottledStore::new(
            InMemory::new(),
            config,
        ))))
    }

    fencing_testkit::blob_store_conformance!(backend);
}

fn t(n: u64) -> FencingToken {
    FencingToken::new(n)
}

/// Two writers on one bucket: tokens 7 and 9.
fn writers() -> (
    Arc<InMemory>,
    FencedObjectStore<Arc<InMemory>>,
    FencedObjectStore<Arc<InMemory>>,
) {
    let bucket = Arc::new(InMemory::new());
    let old = FencedObjectStore::new(bucket.clone(), t(7));
    let new = FencedObjectStore::new(bucket.clone(), t(9));
    (bucket, old, new)
}

/// The fencing error behind `err`, which must be one.
fn fencing(err: &object_store::Error) -> &Error {
    fencing_error(err).unwrap_or_else(|| panic!("not a fencing error: {err:?}"))
}

fn assert_stale(err: &object_store::Error, presented: u64, current: u64) {
    assert_eq!(
        fencing(err).stale_tokens(),
        Some((t(presented), t(current))),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&presented.to_string()) && text.contains(&current.to_string()),
        "{text}"
    );
}

fn at(offset: u64) -> usize {
    usize::try_from(offset).expect("fits")
}

async fn read(store: &dyn ObjectStore, path: &Path) -> Bytes {
    store.get(path).await.unwrap().bytes().await.unwrap()
}

#[tokio::test]
async fn a_stale_put_is_refused_naming_both_tokens_and_nothing_is_written() {
    let (_, old, new) = writers();
    let path = Path::from("db/manifest");
    old.put(&path, "v1".into()).await.unwrap();
    new.put(&path, "v2".into()).await.unwrap();
    let err = old.put(&path, "v1-late".into()).await.unwrap_err();
    assert_stale(&err, 7, 9);
    assert_eq!(read(&new, &path).await, "v2");
    // Every mode keeps the rule.
    let v = new.head(&path).await.unwrap();
    let update = UpdateVersion {
        e_tag: v.e_tag,
        version: v.version,
    };
    let err = old
        .put_opts(&path, "x".into(), PutMode::Update(update).into())
        .await
        .unwrap_err();
    assert_stale(&err, 7, 9);
    assert_eq!(read(&new, &path).await, "v2");
}

#[tokio::test]
async fn a_delete_keeps_the_mark_and_hides_the_object() {
    let (bucket, old, new) = writers();
    let path = Path::from("wal/000001");
    new.put(&path, "entry".into()).await.unwrap();
    new.delete(&path).await.unwrap();
    for err in [
        new.get(&path).await.unwrap_err(),
        new.head(&path).await.map(|_| ()).unwrap_err(),
    ] {
        assert!(matches!(err, object_store::Error::NotFound { .. }), "{err}");
    }
    let listed: Vec<_> = new.list(None).try_collect().await.unwrap();
    assert!(listed.is_empty(), "{listed:?}");
    // The tombstone is there underneath, with the mark.
    assert_eq!(
        bucket.head(&path).await.unwrap().size,
        FRAME_HEADER_LEN as u64
    );
    let err = old.put(&path, "zombie".into()).await.unwrap_err();
    assert_stale(&err, 7, 9);
    let err = old.delete(&path).await.unwrap_err();
    assert_stale(&err, 7, 9);
    // A create over a tombstone is a create (the key is absent to callers).
    new.put_opts(&path, "again".into(), PutMode::Create.into())
        .await
        .unwrap();
    assert_eq!(read(&new, &path).await, "again");
}

#[tokio::test]
async fn create_over_a_newer_holders_object_is_already_exists_carrying_the_stale_token() {
    let (_, old, new) = writers();
    let path = Path::from("wal/000007.sst");
    new.put_opts(&path, "new".into(), PutMode::Create.into())
        .await
        .unwrap();
    let err = old
        .put_opts(&path, "old".into(), PutMode::Create.into())
        .await
        .unwrap_err();
    // What an engine's protocol expects, so it stops as it would.
    assert!(
        matches!(err, object_store::Error::AlreadyExists { .. }),
        "{err}"
    );
    assert_eq!(fencing(&err).stale_tokens(), Some((t(7), t(9))));
    assert_eq!(read(&new, &path).await, "new");
}

#[tokio::test]
async fn create_refuses_a_stale_token_over_a_tombstone() {
    let (_, old, new) = writers();
    let path = Path::from("leader");
    new.delete(&path).await.unwrap();
    let err = old
        .put_opts(&path, "me".into(), PutMode::Create.into())
        .await
        .unwrap_err();
    assert_stale(&err, 7, 9);
}

#[tokio::test]
async fn a_token_in_the_call_wins_over_the_bound_one() {
    let bucket = Arc::new(InMemory::new());
    let store = FencedObjectStore::new(bucket.clone(), t(5));
    let path = Path::from("k");
    let mut extensions = Extensions::new();
    extensions.insert(t(8));
    let options = PutOptions {
        extensions: extensions.clone(),
        ..PutOptions::default()
    };
    store
        .put_opts(&path, "eight".into(), options)
        .await
        .unwrap();
    let err = store.put(&path, "five".into()).await.unwrap_err();
    assert_stale(&err, 5, 8);
    // copy and rename take theirs too.
    let to = Path::from("k2");
    let copy = CopyOptions::new().with_extensions(extensions.clone());
    store.copy_opts(&path, &to, copy).await.unwrap();
    let err = store.put(&to, "five".into()).await.unwrap_err();
    assert_stale(&err, 5, 8);
    let renamed = Path::from("k3");
    let rename = RenameOptions::new().with_extensions(extensions);
    store.rename_opts(&to, &renamed, rename).await.unwrap();
    let err = store.put(&to, "five".into()).await.unwrap_err();
    assert_stale(&err, 5, 8);
}

#[tokio::test]
async fn an_unbound_store_refuses_a_write_without_a_token() {
    let store = FencedObjectStore::unbound(InMemory::new());
    let path = Path::from("k");
    let err = store.put(&path, "v".into()).await.unwrap_err();
    assert!(matches!(fencing(&err), Error::InvalidInput { .. }), "{err}");
    let err = store.delete(&path).await.unwrap_err();
    assert!(matches!(fencing(&err), Error::InvalidInput { .. }), "{err}");
    assert!(
        store
            .inner()
            .list(None)
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_store_bound_to_a_lost_lease_stops_writing() {
    use fencing_core::memory::MemoryIssuer;
    use fencing_core::{IssuerExt, TokenIssuer};
    let issuer: Arc<dyn TokenIssuer> = Arc::new(MemoryIssuer::new());
    let guard = issuer
        .lock("db/writer")
        .ttl(std::time::Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let store = FencedObjectStore::new(InMemory::new(), guard.watch());
    let path = Path::from("db/manifest");
    store.put(&path, "mine".into()).await.unwrap();
    // Another holder takes the lease over (a forced release), so the
    // keep-alive's next renewal is refused and the lease is lost.
    let lease = guard.lease();
    issuer.release(&lease).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), guard.lost())
        .await
        .expect("the keep-alive notices");
    let err = store.put(&path, "after".into()).await.unwrap_err();
    assert!(matches!(fencing(&err), Error::LeaseLost { .. }), "{err}");
    assert_eq!(read(&store, &path).await, "mine");
}

#[tokio::test]
async fn update_is_one_compare_and_swap_with_the_mark_on_top() {
    let (_, _, store) = writers();
    let path = Path::from("cas");
    let first = store
        .put_opts(&path, "1".into(), PutMode::Create.into())
        .await
        .unwrap();
    let err = store
        .put_opts(&path, "x".into(), PutMode::Create.into())
        .await
        .unwrap_err();
    assert!(
        matches!(err, object_store::Error::AlreadyExists { .. }),
        "{err}"
    );
    let second = store
        .put_opts(
            &path,
            "2".into(),
            PutMode::Update(first.clone().into()).into(),
        )
        .await
        .unwrap();
    let err = store
        .put_opts(&path, "3".into(), PutMode::Update(first.into()).into())
        .await
        .unwrap_err();
    assert!(
        matches!(err, object_store::Error::Precondition { .. }),
        "{err}"
    );
    // A version this store did not write itself is read and checked.
    let other = FencedObjectStore::new(store.inner().clone(), t(9));
    other
        .put_opts(&path, "3".into(), PutMode::Update(second.into()).into())
        .await
        .unwrap();
    assert_eq!(read(&store, &path).await, "3");
}

#[tokio::test]
async fn ranges_heads_and_sizes_are_the_callers() {
    let (bucket, _, store) = writers();
    let path = Path::from("blob");
    let value: Bytes = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    store.put(&path, value.clone().into()).await.unwrap();
    assert_eq!(
        bucket.head(&path).await.unwrap().size,
        value.len() as u64 + 17
    );
    assert_eq!(store.head(&path).await.unwrap().size, value.len() as u64);
    for range in [0..1, 5..70_000, 100_000..200_000, 199_999..200_000] {
        let got = store.get_range(&path, range.clone()).await.unwrap();
        let want = value.slice(at(range.start)..at(range.end));
        assert_eq!(got, want, "{range:?}");
    }
    for (range, want) in [
        (GetRange::Suffix(10), 199_990..200_000),
        (GetRange::Offset(150_000), 150_000..200_000),
        (GetRange::Suffix(300_000), 0..200_000),
    ] {
        let result = store
            .get_opts(&path, GetOptions::new().with_range(Some(range.clone())))
            .await
            .unwrap();
        assert_eq!(result.range, want, "{range:?}");
        assert_eq!(result.meta.size, 200_000);
        let got = result.bytes().await.unwrap();
        assert_eq!(got, value.slice(at(want.start)..at(want.end)));
    }
    assert_eq!(read(&store, &path).await, value);
}

#[tokio::test]
async fn a_multipart_upload_is_staged_until_its_fenced_put() {
    let (bucket, old, new) = writers();
    let path = Path::from("sst/000042.sst");
    new.put(&path, "new".into()).await.unwrap();
    let mut upload = old.put_multipart(&path).await.unwrap();
    upload
        .put_part(PutPayload::from(vec![1u8; 1024]))
        .await
        .unwrap();
    // Nothing reached the store.
    assert_eq!(read(&new, &path).await, "new");
    let err = upload.complete().await.unwrap_err();
    assert_stale(&err, 7, 9);
    assert_eq!(read(&new, &path).await, "new");
    // Over the staging limit: refused at the part.
    let small = FencedObjectStore::new(bucket, t(9)).with_max_staged_len(1000);
    let mut upload = small.put_multipart(&path).await.unwrap();
    let err = upload
        .put_part(PutPayload::from(vec![0u8; 1001]))
        .await
        .unwrap_err();
    assert!(matches!(fencing(&err), Error::InvalidInput { .. }), "{err}");
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_written() {
    let bucket = Arc::new(InMemory::new());
    let limits = Limits {
        max_key_len: 16,
        max_value_len: 8,
        max_token: t(100),
    };
    let store = FencedObjectStore::new(bucket.clone(), t(5)).with_limits(limits);
    let over = FencedObjectStore::new(bucket.clone(), t(101)).with_limits(limits);
    let long_key = Path::from("k".repeat(17));
    let cases = [
        store.put(&Path::from("k"), vec![0u8; 9].into()).await,
        store.put(&long_key, "v".into()).await,
        over.put(&Path::from("k"), "v".into()).await,
    ];
    for case in cases {
        let err = case.unwrap_err();
        assert!(
            matches!(
                fencing(&err),
                Error::InvalidInput { .. } | Error::TokenOutOfRange { .. }
            ),
            "{err}"
        );
    }
    assert!(
        bucket
            .list(None)
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn objects_written_without_fencing_are_refused_unless_adopted() {
    let bucket = Arc::new(InMemory::new());
    let path = Path::from("legacy");
    bucket.put(&path, "plain bytes".into()).await.unwrap();
    let store = FencedObjectStore::new(bucket.clone(), t(3));
    for err in [
        store.get(&path).await.map(|_| ()).unwrap_err(),
        store.put(&path, "v".into()).await.map(|_| ()).unwrap_err(),
    ] {
        assert!(matches!(fencing(&err), Error::Unfenced { .. }), "{err}");
    }
    assert_eq!(read(&*bucket, &path).await, "plain bytes");
    let adopting = FencedObjectStore::new(bucket.clone(), t(3)).adopt_unfenced(true);
    assert_eq!(read(&adopting, &path).await, "plain bytes");
    let listed: Vec<_> = adopting.list(None).try_collect().await.unwrap();
    assert_eq!(listed[0].size, 11);
    adopting.put(&path, "fenced".into()).await.unwrap();
    assert_eq!(read(&store, &path).await, "fenced");
}

#[tokio::test]
async fn the_two_ways_in_share_one_frame_and_one_mark() {
    let bucket = Arc::new(InMemory::new());
    let blob = BlobStore::new(ObjectStoreBackend::new(bucket.clone()));
    let objects = FencedObjectStore::new(bucket, t(4));
    blob.put("shared", Bytes::from_static(b"from blob"), t(6))
        .await
        .unwrap();
    assert_eq!(read(&objects, &Path::from("shared")).await, "from blob");
    let err = objects
        .put(&Path::from("shared"), "late".into())
        .await
        .unwrap_err();
    assert_stale(&err, 4, 6);
}

#[tokio::test]
async fn keys_object_store_would_rename_are_refused() {
    let blob = BlobStore::new(ObjectStoreBackend::new(Arc::new(InMemory::new())));
    for key in ["a/", "/a", "a//b", "a/./b"] {
        let err = blob
            .put(key, Bytes::from_static(b"v"), t(1))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{key:?}: {err}");
    }
    blob.put("a/b:c%d", Bytes::from_static(b"v"), t(1))
        .await
        .unwrap();
}

#[tokio::test]
async fn verify_passes_on_a_store_that_honours_preconditions() {
    let blob = BlobStore::new(ObjectStoreBackend::new(Arc::new(InMemory::new())));
    let checks = blob.verify().await.unwrap();
    assert!(checks.iter().all(|c| c.is_safe()), "{checks:?}");
    let fenced = FencedObjectStore::new(InMemory::new(), t(1));
    let checks = fenced.verify().await.unwrap();
    assert!(checks.iter().all(|c| c.is_safe()), "{checks:?}");
}

#[tokio::test]
async fn verify_refuses_a_local_file_system_which_cannot_condition_an_update() {
    let dir = std::env::temp_dir().join(format!("fencing-os-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let local = object_store::local::LocalFileSystem::new_with_prefix(&dir).unwrap();
    let fenced = FencedObjectStore::new(local, t(1));
    let err = fenced.verify().await.unwrap_err();
    assert!(
        err.to_string().contains("not supported") || err.chain().contains("not supported"),
        "{}",
        err.chain()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_rename_of_a_newer_holders_object_writes_nothing() {
    let (bucket, old, new) = writers();
    let (from, to) = (Path::from("seg/a"), Path::from("seg/b"));
    new.put(&from, "new".into()).await.unwrap();
    let err = old.rename(&from, &to).await.unwrap_err();
    assert_stale(&err, 7, 9);
    assert!(
        bucket.head(&to).await.is_err(),
        "the destination was written"
    );
    assert_eq!(read(&new, &from).await, "new");
}

#[tokio::test]
async fn a_tombstones_version_updates_nothing() {
    let (bucket, _, store) = writers();
    let path = Path::from("gone");
    store.put(&path, "v".into()).await.unwrap();
    store.delete(&path).await.unwrap();
    let tombstone = bucket.head(&path).await.unwrap();
    let at = UpdateVersion {
        e_tag: tombstone.e_tag,
        version: tombstone.version,
    };
    let err = store
        .put_opts(&path, "back".into(), PutMode::Update(at).into())
        .await
        .unwrap_err();
    assert!(
        matches!(err, object_store::Error::Precondition { .. }),
        "{err}"
    );
    assert!(store.get(&path).await.is_err());
}

#[tokio::test]
async fn a_short_unfenced_object_is_listed_as_it_is() {
    let (bucket, _, store) = writers();
    bucket
        .put(&Path::from("legacy/short"), "x".repeat(17).into())
        .await
        .unwrap();
    store
        .put(&Path::from("legacy/fenced"), "v".into())
        .await
        .unwrap();
    let mut listed: Vec<_> = store
        .list(Some(&Path::from("legacy")))
        .map_ok(|m| (m.location.to_string(), m.size))
        .try_collect()
        .await
        .unwrap();
    listed.sort();
    assert_eq!(
        listed,
        [
            ("legacy/fenced".to_owned(), 1),
            ("legacy/short".to_owned(), 17)
        ]
    );
}

/// `InMemory` under a [`Hooked`] store (requests counted), and a switch
/// that loses the answer of the next put after it landed (a transport
/// failure after sending).
fn counted() -> (Arc<Hooked>, Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::Ordering::SeqCst;
    let lose = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lose_next = lose.clone();
    let bucket = Hooked::new(Arc::new(InMemory::new())).after_put(move |_, answer| {
        let answer = match answer {
            Ok(_) if lose_next.swap(false, SeqCst) => Err(object_store::Error::Generic {
                store: "Hooked",
                source: "connection reset after the request was sent".into(),
            }),
            answer => answer,
        };
        Box::pin(std::future::ready(answer))
    });
    (Arc::new(bucket), lose)
}

/// What a write costs: a cold put reads the frame and puts; the same
/// holder's next put is one conditional put; after another writer's, the
/// remembered version fails and the frame is read.
#[tokio::test]
async fn the_same_holders_next_put_is_one_conditional_request() {
    let (bucket, _) = counted();
    let holder = FencedObjectStore::new(bucket.clone(), t(9));
    let next = FencedObjectStore::new(bucket.clone(), t(10));
    let path = Path::from("k");
    holder.put(&path, "1".into()).await.unwrap();
    assert_eq!(
        bucket.take_requests(),
        (1, 1),
        "first put: the frame, the put"
    );
    holder.put(&path, "2".into()).await.unwrap();
    assert_eq!(
        bucket.take_requests(),
        (0, 1),
        "its own last write: one put"
    );
    next.put(&path, "3".into()).await.unwrap();
    bucket.take_requests();
    let err = holder.put(&path, "4".into()).await.unwrap_err();
    assert_stale(&err, 9, 10);
    assert_eq!(
        bucket.take_requests(),
        (1, 1),
        "the remembered version fails, then the frame refuses"
    );
    let err = holder.put(&path, "5".into()).await.unwrap_err();
    assert_stale(&err, 9, 10);
    assert_eq!(
        bucket.take_requests(),
        (1, 0),
        "refused on the frame: nothing sent"
    );
}

/// A put applied whose answer was lost is settled by reading: the object
/// is at our write's version, whose mark the token is not below, so the
/// write is sent again on it and lands (one value, ours), where it was
/// reported as an unknown outcome at once before the engine. (A newer
/// holder's write in between makes it unknown, never stale: the engine's
/// model checker and its unit tests.)
#[tokio::test]
async fn a_lost_answer_on_a_put_is_settled_by_writing_again() {
    let (bucket, lose_next_answer) = counted();
    let holder = FencedObjectStore::new(bucket.clone(), t(9));
    let path = Path::from("k");
    holder.put(&path, "1".into()).await.unwrap();
    bucket.take_requests();
    lose_next_answer.store(true, std::sync::atomic::Ordering::SeqCst);
    holder
        .put(&path, "2".into())
        .await
        .expect("settled, not unknown");
    assert_eq!(
        bucket.take_requests(),
        (1, 2),
        "the put whose answer was lost, the frame read, the put again"
    );
    assert_eq!(read(&holder, &path).await, "2");
}
