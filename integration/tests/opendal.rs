//! `fencing-opendal`'s `FencingLayer` on OpenDAL's S3 service against the
//! S3 emulator (moto, `integration/services.sh up s3`; `FENCING_S3_ENDPOINT`):
//! the write contract (stale tokens refused naming both, nothing written;
//! equal and higher accepted; tombstones that keep the mark; the caller's
//! create and compare-and-swap on top; a lost lease; bad input), reads and
//! sizes as the caller counts them, objects written without fencing,
//! interoperability with the fencing blob store (the same bytes, read both
//! ways), and 16 racing writers. Each test writes under a root of its own
//! in this run's bucket.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use fencing_core::adapter::blob::{BlobMeta, frame};
use fencing_core::memory::MemoryIssuer;
use fencing_core::{Error, FencedStore, FencingToken, IssuerExt, Limits, TokenIssuer};
use fencing_harness::env::S3;
use fencing_harness::object_store::{set_up, t};
use fencing_opendal::{DEFAULT_LIMITS, FencingLayer, fencing_error};
use fencing_s3::emulator;
use opendal::raw::oio;
use opendal::raw::{
    Layer, OpCopy, OpCreateDir, OpList, OpPresign, OpRead, OpRename, OpStat, OpWrite, RpCreateDir,
    RpPresign, RpRead, RpRename, RpStat, Service, ServiceInfo, Servicer,
};
use opendal::services::S3 as S3Service;
use opendal::{Buffer, BytesRange, Capability, ErrorKind, OperationContext, Operator};

/// A root of its own in this run's bucket on the S3 emulator.
struct Bucket {
    endpoint: String,
    bucket: String,
    /// The prefix of this test's keys in the bucket (`ft-3f9a0c1b/`).
    prefix: String,
    /// The operator without the layer: the bytes as the bucket holds them.
    raw: Operator,
}

impl Bucket {
    /// An operator on this root with `layer`.
    fn fenced(&self, layer: FencingLayer) -> Operator {
        self.raw.clone().layer(layer)
    }

    /// The bytes the bucket holds at `path`.
    async fn stored(&self, path: &str) -> Vec<u8> {
        self.raw.read(path).await.expect("raw read").to_vec()
    }

    /// The fencing blob store (`fencing_core`'s `BlobStore` on the S3 SDK)
    /// on the same bucket, and the key it knows `path` by.
    async fn blob_store(&self, path: &str) -> (fencing_s3::S3Store, String) {
        let store = emulator::store(&self.endpoint, &self.bucket)
            .await
            .expect("blob store");
        (store, format!("{}{path}", self.prefix))
    }
}

/// This run's bucket (created if needed) with a fresh root, or `None` when
/// the run asked to skip S3 (`FENCING_SKIP=s3`). A server that does not
/// answer fails the test, naming how to start it.
async fn bucket() -> Option<Bucket> {
    // With the `http-transport-reqwest` feature: reqwest is OpenDAL's
    // HTTP transport.
    opendal::install_default();
    let (endpoint, bucket) = set_up(&S3, "opendal", async |endpoint, bucket| {
        emulator::create_bucket(&emulator::client(endpoint), bucket).await?;
        Ok((endpoint.to_owned(), bucket.to_owned()))
    })
    .await?;
    let prefix = format!("{}/", fencing_testkit::unique_prefix());
    let service = S3Service::default()
        .endpoint(&endpoint)
        .bucket(&bucket)
        .region("us-east-1")
        .access_key_id("fencing")
        .secret_access_key("fencing")
        .root(&format!("/{prefix}"))
        .disable_config_load()
        .disable_ec2_metadata();
    let raw = Operator::new(service).expect("an S3 operator");
    Some(Bucket {
        endpoint,
        bucket,
        prefix,
        raw,
    })
}

/// The body a fenced writer stores for `value` at `token`.
fn framed(token: u64, value: &[u8]) -> Vec<u8> {
    let meta = BlobMeta {
        token: t(token),
        has_value: true,
    };
    frame::encode(meta, value).to_vec()
}

/// The body of a delete at `token`.
fn tombstone(token: u64) -> Vec<u8> {
    let meta = BlobMeta {
        token: t(token),
        has_value: false,
    };
    frame::encode(meta, &[]).to_vec()
}

/// The `(presented, current)` tokens of a stale-token refusal, asserting
/// that it is one and that callers cannot mistake it for a lost condition.
fn stale(err: &opendal::Error) -> (FencingToken, FencingToken) {
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    fencing_error(err)
        .and_then(Error::stale_tokens)
        .unwrap_or_else(|| panic!("not a stale token: {err}"))
}

/// Whether `err` is our `what`.
fn ours(err: &opendal::Error, what: fn(&Error) -> bool) -> bool {
    fencing_error(err).is_some_and(what)
}

#[tokio::test]
async fn a_stale_write_is_refused_naming_both_tokens_and_the_object_is_unchanged() {
    let Some(b) = bucket().await else { return };
    let new_holder = b.fenced(FencingLayer::new(t(34)));
    let zombie = b.fenced(FencingLayer::new(t(33)));

    new_holder.write("db/manifest", "v2").await.unwrap();
    let err = zombie.write("db/manifest", "v1-late").await.unwrap_err();
    assert_eq!(stale(&err), (t(33), t(34)));
    assert_ne!(err.kind(), ErrorKind::ConditionNotMatch);
    let text = err.to_string();
    assert!(
        text.contains("presented 33") && text.contains("accepted 34"),
        "{text}"
    );
    assert_eq!(b.stored("db/manifest").await, framed(34, b"v2"));
    assert_eq!(
        new_holder.read("db/manifest").await.unwrap().to_vec(),
        b"v2"
    );
}

#[tokio::test]
async fn equal_and_higher_tokens_are_accepted() {
    let Some(b) = bucket().await else { return };
    let holder = b.fenced(FencingLayer::new(t(7)));
    let same_token = b.fenced(FencingLayer::new(t(7)));
    let next = b.fenced(FencingLayer::new(t(8)));

    holder.write("k", "a").await.unwrap();
    holder.write("k", "b").await.unwrap(); // its own last write: one request
    same_token.write("k", "c").await.unwrap(); // equal, another layer
    assert_eq!(b.stored("k").await, framed(7, b"c"));
    holder.write("k", "d").await.unwrap(); // its remembered ETag is stale: read again
    assert_eq!(b.stored("k").await, framed(7, b"d"));
    next.write("k", "e").await.unwrap();
    assert_eq!(b.stored("k").await, framed(8, b"e"));
    assert_eq!(
        stale(&holder.write("k", "f").await.unwrap_err()),
        (t(7), t(8))
    );
    assert_eq!(b.stored("k").await, framed(8, b"e"));
}

#[tokio::test]
async fn a_remembered_etag_does_not_let_a_zombie_through() {
    let Some(b) = bucket().await else { return };
    let zombie = b.fenced(FencingLayer::new(t(7)));
    let new_holder = b.fenced(FencingLayer::new(t(9)));

    zombie.write("k", "before the pause").await.unwrap();
    new_holder.write("k", "taken over").await.unwrap();
    let err = zombie.write("k", "after the pause").await.unwrap_err();
    assert_eq!(stale(&err), (t(7), t(9)));
    assert_eq!(b.stored("k").await, framed(9, b"taken over"));
}

#[tokio::test]
async fn a_delete_keeps_the_mark_and_hides_the_object() {
    let Some(b) = bucket().await else { return };
    let holder = b.fenced(FencingLayer::new(t(9)));
    let zombie = b.fenced(FencingLayer::new(t(7)));

    holder.write("d/doc", "doc").await.unwrap();
    holder.write("d/other", "other").await.unwrap();
    holder.write("d/sub/x", "x").await.unwrap();
    holder.delete("d/doc").await.unwrap();
    holder.delete("d/sub/x").await.unwrap();
    assert_eq!(b.stored("d/doc").await, tombstone(9));

    assert_eq!(
        holder.read("d/doc").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        holder.stat("d/doc").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(!holder.exists("d/doc").await.unwrap());
    let listed = |entries: Vec<opendal::Entry>| {
        let mut listed: Vec<(String, u64)> = entries
            .into_iter()
            .filter(|e| e.path() != "d/")
            .map(|e| (e.path().to_owned(), e.metadata().content_length()))
            .collect();
        listed.sort();
        listed
    };
    // One level: the directory that holds only a tombstone is gone too.
    assert_eq!(
        listed(holder.list("d/").await.unwrap()),
        [("d/other".to_owned(), 5)]
    );
    assert_eq!(
        listed(holder.list_with("d/").recursive(true).await.unwrap()),
        [("d/other".to_owned(), 5)]
    );

    // The zombie is still refused, writing or deleting.
    assert_eq!(
        stale(&zombie.write("d/doc", "late").await.unwrap_err()),
        (t(7), t(9))
    );
    assert_eq!(
        stale(&zombie.delete("d/other").await.unwrap_err()),
        (t(7), t(9))
    );
    assert_eq!(b.stored("d/doc").await, tombstone(9));
    assert_eq!(b.stored("d/other").await, framed(9, b"other"));

    // Deleting again is a no-op; the path can be written again.
    holder.delete("d/doc").await.unwrap();
    holder.write("d/doc", "again").await.unwrap();
    assert_eq!(holder.read("d/doc").await.unwrap().to_vec(), b"again");
}

#[tokio::test]
async fn a_recursive_delete_leaves_a_tombstone_at_every_live_object() {
    let Some(b) = bucket().await else { return };
    let holder = b.fenced(FencingLayer::new(t(9)));
    holder.write("r/a", "a").await.unwrap();
    holder.write("r/b/c", "c").await.unwrap();
    holder.write("kept", "k").await.unwrap();
    holder.delete_with("r/").recursive(true).await.unwrap();
    assert_eq!(b.stored("r/a").await, tombstone(9));
    assert_eq!(b.stored("r/b/c").await, tombstone(9));
    assert_eq!(b.stored("kept").await, framed(9, b"k"));
    assert!(
        holder
            .list_with("r/")
            .recursive(true)
            .await
            .unwrap()
            .iter()
            .all(|e| e.metadata().is_dir())
    );
}

#[tokio::test]
async fn ranged_reads_and_sizes_are_the_callers() {
    let Some(b) = bucket().await else { return };
    let holder = b.fenced(FencingLayer::new(t(9)));
    let value: Vec<u8> = (0..200_000u32)
        .map(|i| u8::try_from(i % 251).unwrap())
        .collect();
    holder.write("big", value.clone()).await.unwrap();
    holder.write("small", "hello world").await.unwrap();

    let meta = holder.stat("big").await.unwrap();
    assert_eq!(meta.content_length(), 200_000);
    assert_eq!(
        b.raw.stat("big").await.unwrap().content_length(),
        200_017,
        "the bucket holds the frame"
    );
    assert_eq!(holder.read("big").await.unwrap().to_vec(), value);
    let read = async |range: BytesRange| {
        holder
            .read_with("big")
            .range(range)
            .await
            .map(|b| b.to_vec())
    };
    // In the first 64 KiB: one request from the first byte.
    assert_eq!(read((0..10).into()).await.unwrap(), value[0..10]);
    assert_eq!(read((1000..1100).into()).await.unwrap(), value[1000..1100]);
    // Further in: the frame, then the bytes on its ETag.
    assert_eq!(
        read((150_000..150_100).into()).await.unwrap(),
        value[150_000..150_100]
    );
    assert_eq!(read((199_000..).into()).await.unwrap(), value[199_000..]);
    assert_eq!(
        read(BytesRange::suffix(10)).await.unwrap(),
        value[199_990..]
    );
    let err = read((199_995..200_010).into()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RangeNotSatisfied, "{err}");
    // Chunks read concurrently, each through the layer.
    let chunked = holder
        .read_with("big")
        .chunk(64 * 1024)
        .concurrent(4)
        .await
        .unwrap();
    assert_eq!(chunked.to_vec(), value);
    let reader = holder.reader("small").await.unwrap();
    assert_eq!(reader.read(6..).await.unwrap().to_vec(), b"world");

    // The caller's read conditions, on the ETag stat gave.
    let etag = meta.etag().expect("an ETag").to_owned();
    assert_eq!(
        holder
            .read_with("big")
            .if_match(&etag)
            .range(150_000..150_010)
            .await
            .unwrap()
            .to_vec(),
        value[150_000..150_010]
    );
    let err = holder
        .read_with("big")
        .if_match("\"not-the-etag\"")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConditionNotMatch, "{err}");

    let mut sizes: Vec<(String, u64)> = holder
        .list("")
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.metadata().is_file())
        .map(|e| (e.path().to_owned(), e.metadata().content_length()))
        .collect();
    sizes.sort();
    assert_eq!(
        sizes,
        [("big".to_owned(), 200_000), ("small".to_owned(), 11)]
    );
}

/// A create of the very bytes an earlier create stored, by a layer that
/// remembers nothing of the path (another process, a cleared memory): the
/// object is there, so the caller's condition fails. (Written blind, the
/// refused create would find "its own" bytes there and take them as a
/// landed retry: a create reported done that wrote nothing.)
#[tokio::test]
async fn a_create_of_bytes_already_there_is_a_failed_condition_not_a_write() {
    let Some(b) = bucket().await else { return };
    let first = b.fenced(FencingLayer::new(t(9)));
    first
        .write_with("once", "done")
        .if_not_exists(true)
        .await
        .unwrap();
    let again = b.fenced(FencingLayer::new(t(9)));
    let err = again
        .write_with("once", "done")
        .if_not_exists(true)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConditionNotMatch, "{err}");
}

#[tokio::test]
async fn create_and_compare_and_swap_keep_their_meaning() {
    let Some(b) = bucket().await else { return };
    let holder = b.fenced(FencingLayer::new(t(9)));
    let zombie = b.fenced(FencingLayer::new(t(7)));
    let next = b.fenced(FencingLayer::new(t(10)));

    // Create: only where nothing (or a tombstone) is.
    holder
        .write_with("c", "1")
        .if_not_exists(true)
        .await
        .unwrap();
    let err = holder
        .write_with("c", "x")
        .if_not_exists(true)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConditionNotMatch, "{err}");
    let err = holder
        .write_with("c", "x")
        .if_none_match("*")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConditionNotMatch, "{err}");
    assert_eq!(b.stored("c").await, framed(9, b"1"));

    // Compare-and-swap on the ETag stat gave.
    let first = holder.stat("c").await.unwrap().etag().unwrap().to_owned();
    holder.write_with("c", "2").if_match(&first).await.unwrap();
    let err = holder
        .write_with("c", "x")
        .if_match(&first)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConditionNotMatch, "{err}");
    assert!(
        fencing_error(&err).is_none(),
        "a lost CAS is not ours: {err}"
    );
    assert_eq!(b.stored("c").await, framed(9, b"2"));

    // On the right ETag, a stale token is still refused as stale.
    let current = zombie.stat("c").await.unwrap().etag().unwrap().to_owned();
    let err = zombie
        .write_with("c", "x")
        .if_match(&current)
        .await
        .unwrap_err();
    assert_eq!(stale(&err), (t(7), t(9)));
    let err = zombie
        .write_with("c", "x")
        .if_none_match("\"other\"")
        .await
        .unwrap_err();
    assert_eq!(stale(&err), (t(7), t(9)));

    // if_none_match on an ETag: anything but that version.
    let err = next
        .write_with("c", "x")
        .if_none_match(&current)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConditionNotMatch, "{err}");
    next.write_with("c", "3").if_match(&current).await.unwrap();
    assert_eq!(b.stored("c").await, framed(10, b"3"));

    // Deleted: a create succeeds again, under the mark rule.
    next.delete("c").await.unwrap();
    let err = holder
        .write_with("c", "x")
        .if_not_exists(true)
        .await
        .unwrap_err();
    assert_eq!(stale(&err), (t(9), t(10)));
    next.write_with("c", "4").if_not_exists(true).await.unwrap();
    assert_eq!(b.stored("c").await, framed(10, b"4"));

    // A delete on an ETag.
    let err = next
        .delete_with("c")
        .if_match("\"stale\"")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConditionNotMatch, "{err}");
    let etag = next.stat("c").await.unwrap().etag().unwrap().to_owned();
    next.delete_with("c").if_match(&etag).await.unwrap();
    assert_eq!(b.stored("c").await, tombstone(10));
}

#[tokio::test]
async fn a_layer_bound_to_a_lost_lease_writes_nothing() {
    let Some(b) = bucket().await else { return };
    let issuer: Arc<dyn TokenIssuer> = Arc::new(MemoryIssuer::new());
    let guard = issuer
        .lock("db/writer")
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let token = guard.token().get();
    let op = b.fenced(FencingLayer::new(guard.watch()));
    op.write("db/manifest", "mine").await.unwrap();

    // Another holder takes the lease over (a forced release): the
    // keep-alive's next renewal is refused and the lease is lost.
    issuer.release(&guard.lease()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the keep-alive notices");

    let lost = |e: &Error| matches!(e, Error::LeaseLost { .. });
    let err = op.write("db/manifest", "after").await.unwrap_err();
    assert!(ours(&err, lost), "{err}");
    assert_eq!(err.kind(), ErrorKind::PermissionDenied);
    let err = op.delete("db/manifest").await.unwrap_err();
    assert!(ours(&err, lost), "{err}");
    let err = op.copy("db/manifest", "db/copy").await.unwrap_err();
    assert!(ours(&err, lost), "{err}");
    assert_eq!(b.stored("db/manifest").await, framed(token, b"mine"));
    assert!(!b.raw.exists("db/copy").await.unwrap());
    // Reading needs no lease.
    assert_eq!(op.read("db/manifest").await.unwrap().to_vec(), b"mine");
}

#[tokio::test]
async fn bad_input_writes_nothing() {
    let Some(b) = bucket().await else { return };
    let invalid = |e: &Error| matches!(e, Error::InvalidInput { .. });

    let small = b.fenced(FencingLayer::new(t(5)).with_limits(Limits {
        max_value_len: 10,
        ..DEFAULT_LIMITS
    }));
    let err = small.write("v", "eleven byte").await.unwrap_err();
    assert!(ours(&err, invalid), "{err}");
    assert_eq!(err.kind(), ErrorKind::ConfigInvalid);
    // A writer is refused at the chunk that goes over.
    let mut w = small.writer("v").await.unwrap();
    w.write("123456").await.unwrap();
    let err = w.write("789012").await.unwrap_err();
    assert!(ours(&err, invalid), "{err}");
    let _ = w.abort().await;
    assert!(!b.raw.exists("v").await.unwrap());

    let op = b.fenced(FencingLayer::new(t(5)));
    let long = "k".repeat(1100);
    let err = op.write(&long, "x").await.unwrap_err();
    assert!(ours(&err, invalid), "{err}");
    // The key limit counts the root: 1,024 bytes in the bucket.
    let at_limit = "k".repeat(1024 - b.prefix.len());
    op.write(&at_limit, "x").await.unwrap();
    let over = "k".repeat(1025 - b.prefix.len());
    let err = op.write(&over, "x").await.unwrap_err();
    assert!(ours(&err, invalid), "{err}");

    let capped = Limits {
        max_token: t(100),
        ..DEFAULT_LIMITS
    };
    let above = b.fenced(FencingLayer::new(t(101)).with_limits(capped));
    let out_of_range = |e: &Error| matches!(e, Error::TokenOutOfRange { .. });
    let err = above.write("v", "x").await.unwrap_err();
    assert!(ours(&err, out_of_range), "{err}");
    let err = above.delete("v").await.unwrap_err();
    assert!(ours(&err, out_of_range), "{err}");
    assert!(!b.raw.exists("v").await.unwrap());
}

#[tokio::test]
async fn an_object_written_without_the_frame_is_refused_unless_adopted() {
    let Some(b) = bucket().await else { return };
    b.raw.write("plain", "unfenced bytes").await.unwrap();
    let op = b.fenced(FencingLayer::new(t(5)));
    let unfenced = |e: &Error| matches!(e, Error::Unfenced { key } if key == "plain");

    for err in [
        op.read("plain").await.unwrap_err(),
        op.stat("plain").await.unwrap_err(),
        op.write("plain", "mine").await.unwrap_err(),
        op.delete("plain").await.unwrap_err(),
    ] {
        assert!(ours(&err, unfenced), "{err}");
    }
    assert_eq!(b.stored("plain").await, b"unfenced bytes");

    let adopting = b.fenced(FencingLayer::new(t(5)).adopt_unfenced(true));
    assert_eq!(
        adopting.read("plain").await.unwrap().to_vec(),
        b"unfenced bytes"
    );
    assert_eq!(adopting.stat("plain").await.unwrap().content_length(), 14);
    adopting.write("plain", "adopted").await.unwrap();
    assert_eq!(b.stored("plain").await, framed(5, b"adopted"));
    // Now fenced: read by anyone, refused below its mark.
    assert_eq!(op.read("plain").await.unwrap().to_vec(), b"adopted");
    let zombie = b.fenced(FencingLayer::new(t(4)));
    assert_eq!(
        stale(&zombie.write("plain", "x").await.unwrap_err()),
        (t(4), t(5))
    );
}

#[tokio::test]
async fn objects_are_the_fencing_blob_stores_byte_for_byte() {
    let Some(b) = bucket().await else { return };
    let op = b.fenced(FencingLayer::new(t(42)));

    // Written through the layer: the blob store's frame, read by it.
    op.write("interop/a", "value").await.unwrap();
    assert_eq!(
        b.stored("interop/a").await,
        frame::encode(
            BlobMeta {
                token: t(42),
                has_value: true
            },
            b"value"
        )
    );
    let (store, key) = b.blob_store("interop/a").await;
    let got = store
        .get(&key)
        .await
        .unwrap()
        .expect("the blob store reads it");
    assert_eq!((got.value.as_ref(), got.token), (&b"value"[..], t(42)));
    let err = store
        .put(&key, Bytes::from("late"), t(41))
        .await
        .unwrap_err();
    assert_eq!(err.stale_tokens(), Some((t(41), t(42))));
    op.delete("interop/a").await.unwrap();
    assert_eq!(store.get(&key).await.unwrap(), None);
    assert_eq!(store.mark(&key).await.unwrap(), Some(t(42)));

    // Written by the blob store: read through the layer, same mark.
    let (store, key) = b.blob_store("interop/b").await;
    store.put(&key, Bytes::from("blob"), t(50)).await.unwrap();
    assert_eq!(op.read("interop/b").await.unwrap().to_vec(), b"blob");
    assert_eq!(op.stat("interop/b").await.unwrap().content_length(), 4);
    // A fence raises the mark and keeps the value; on an absent key it
    // leaves a marker, absent to readers.
    store.fence(&key, t(60)).await.unwrap();
    assert_eq!(b.stored("interop/b").await, framed(60, b"blob"));
    assert_eq!(op.read("interop/b").await.unwrap().to_vec(), b"blob");
    let fifty_nine = b.fenced(FencingLayer::new(t(59)));
    assert_eq!(
        stale(&fifty_nine.write("interop/b", "x").await.unwrap_err()),
        (t(59), t(60))
    );
    let (store, key) = b.blob_store("interop/c").await;
    store.fence(&key, t(70)).await.unwrap();
    assert_eq!(b.stored("interop/c").await, tombstone(70));
    assert_eq!(
        op.read("interop/c").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        stale(&op.write("interop/c", "x").await.unwrap_err()),
        (t(42), t(70))
    );
}

#[tokio::test]
async fn copy_and_rename_are_fenced_writes() {
    let Some(b) = bucket().await else { return };
    let holder = b.fenced(FencingLayer::new(t(9)));
    let zombie = b.fenced(FencingLayer::new(t(7)));
    holder
        .write_with("src", "payload")
        .content_type("text/plain")
        .await
        .unwrap();

    let copied = holder.copy("src", "dst").await.unwrap();
    assert_eq!(copied.content_length(), 7);
    assert_eq!(b.stored("dst").await, framed(9, b"payload"));
    assert_eq!(
        holder.stat("dst").await.unwrap().content_type(),
        Some("text/plain")
    );
    let err = holder
        .copy_with("src", "dst")
        .if_not_exists(true)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConditionNotMatch, "{err}");
    let err = zombie.copy("src", "dst").await.unwrap_err();
    assert_eq!(stale(&err), (t(7), t(9)));

    holder.rename("src", "moved").await.unwrap();
    assert_eq!(b.stored("src").await, tombstone(9));
    assert_eq!(b.stored("moved").await, framed(9, b"payload"));
    assert_eq!(
        holder.read("src").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let err = zombie.rename("moved", "elsewhere").await.unwrap_err();
    assert_eq!(stale(&err), (t(7), t(9)));
    assert!(!b.raw.exists("elsewhere").await.unwrap());
}

#[tokio::test]
async fn a_chunked_writer_is_one_fenced_put() {
    let Some(b) = bucket().await else { return };
    let holder = b.fenced(FencingLayer::new(t(9)));
    let part: Vec<u8> = (0..2 * 1024 * 1024u32)
        .map(|i| u8::try_from(i % 239).unwrap())
        .collect();
    // 6 MiB in 5 MiB chunks: S3's own writer would upload parts.
    let mut w = holder
        .writer_with("big")
        .chunk(5 * 1024 * 1024)
        .await
        .unwrap();
    for _ in 0..3 {
        w.write(part.clone()).await.unwrap();
    }
    let meta = w.close().await.unwrap();
    assert_eq!(meta.content_length(), 3 * part.len() as u64);
    let whole: Vec<u8> = part.iter().chain(&part).chain(&part).copied().collect();
    assert_eq!(b.stored("big").await, framed(9, &whole));
    // A multipart upload's ETag ends in "-<parts>"; one PUT's is the MD5.
    let etag = b.raw.stat("big").await.unwrap().etag().unwrap().to_owned();
    assert!(!etag.contains('-'), "uploaded in parts: {etag}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_rising_writers_end_with_the_highest_and_no_stale_write_lands() {
    let Some(b) = bucket().await else { return };
    let clock = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for n in 1..=16u64 {
        let op = b.fenced(FencingLayer::new(t(n)).with_max_attempts(200));
        let clock = clock.clone();
        tasks.push(tokio::spawn(async move {
            let mut landed = Vec::new();
            for i in 0..3 {
                let start = clock.fetch_add(1, Ordering::SeqCst);
                match op.write("race", format!("w{n}-{i}")).await {
                    Ok(_) => landed.push((n, start, clock.fetch_add(1, Ordering::SeqCst))),
                    Err(err) => {
                        let (presented, current) = stale(&err);
                        assert!(presented == t(n) && current > presented, "{err}");
                        break; // superseded: a zombie stops
                    }
                }
            }
            landed
        }));
    }
    let mut landed = Vec::new();
    for task in tasks {
        landed.extend(task.await.expect("a writer panicked"));
    }
    assert_eq!(
        landed.iter().filter(|(n, ..)| *n == 16).count(),
        3,
        "the highest token is never refused"
    );
    // A write that started after a higher token's write had landed must
    // have been refused.
    for &(n, start, _) in &landed {
        for &(m, _, end) in &landed {
            assert!(
                !(m > n && end < start),
                "token {n}'s write started after token {m}'s landed, and was accepted"
            );
        }
    }
    assert_eq!(b.stored("race").await, framed(16, b"w16-2"));
}

/// The requests the S3 service underneath the layer was asked for: reads
/// (each a `GET`, ranged or not), writes (each a `PUT`), stats (`HEAD`).
#[derive(Debug, Default)]
struct Requests {
    reads: AtomicUsize,
    writes: AtomicUsize,
    stats: AtomicUsize,
}

impl Requests {
    /// `(reads, writes, stats)` since the last call.
    fn take(&self) -> (usize, usize, usize) {
        (
            self.reads.swap(0, Ordering::SeqCst),
            self.writes.swap(0, Ordering::SeqCst),
            self.stats.swap(0, Ordering::SeqCst),
        )
    }
}

/// A layer under the fencing layer that counts its requests.
#[derive(Debug, Clone)]
struct Counting(Arc<Requests>);

impl Layer for Counting {
    fn apply_service(&self, inner: Servicer) -> Servicer {
        Arc::new(CountingService {
            inner,
            requests: self.0.clone(),
        })
    }
}

#[derive(Debug)]
struct CountingService {
    inner: Servicer,
    requests: Arc<Requests>,
}

struct CountingReader {
    inner: oio::Reader,
    requests: Arc<Requests>,
}

impl oio::Read for CountingReader {
    async fn open(
        &self,
        range: BytesRange,
    ) -> opendal::Result<(RpRead, Box<dyn oio::ReadStreamDyn>)> {
        self.requests.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.open(range).await
    }

    async fn read(&self, range: BytesRange) -> opendal::Result<(RpRead, Buffer)> {
        self.requests.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read(range).await
    }
}

impl Service for CountingService {
    type Reader = CountingReader;
    type Writer = oio::Writer;
    type Lister = oio::Lister;
    type Deleter = oio::Deleter;
    type Copier = oio::Copier;
    type Composer = oio::Composer;

    fn info(&self) -> ServiceInfo {
        self.inner.info()
    }

    fn capability(&self) -> Capability {
        self.inner.capability()
    }

    async fn create_dir(
        &self,
        ctx: &OperationContext,
        path: &str,
        args: OpCreateDir,
    ) -> opendal::Result<RpCreateDir> {
        self.inner.create_dir(ctx, path, args).await
    }

    async fn stat(
        &self,
        ctx: &OperationContext,
        path: &str,
        args: OpStat,
    ) -> opendal::Result<RpStat> {
        self.requests.stats.fetch_add(1, Ordering::SeqCst);
        self.inner.stat(ctx, path, args).await
    }

    fn read(
        &self,
        ctx: &OperationContext,
        path: &str,
        args: OpRead,
    ) -> opendal::Result<CountingReader> {
        Ok(CountingReader {
            inner: self.inner.read(ctx, path, args)?,
            requests: self.requests.clone(),
        })
    }

    fn write(
        &self,
        ctx: &OperationContext,
        path: &str,
        args: OpWrite,
    ) -> opendal::Result<oio::Writer> {
        self.requests.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.write(ctx, path, args)
    }

    fn delete(&self, ctx: &OperationContext) -> opendal::Result<oio::Deleter> {
        self.inner.delete(ctx)
    }

    fn list(
        &self,
        ctx: &OperationContext,
        path: &str,
        args: OpList,
    ) -> opendal::Result<oio::Lister> {
        self.inner.list(ctx, path, args)
    }

    fn copy(
        &self,
        ctx: &OperationContext,
        from: &str,
        to: &str,
        args: OpCopy,
    ) -> opendal::Result<oio::Copier> {
        self.inner.copy(ctx, from, to, args)
    }

    async fn rename(
        &self,
        ctx: &OperationContext,
        from: &str,
        to: &str,
        args: OpRename,
    ) -> opendal::Result<RpRename> {
        self.inner.rename(ctx, from, to, args).await
    }

    async fn presign(
        &self,
        ctx: &OperationContext,
        path: &str,
        args: OpPresign,
    ) -> opendal::Result<RpPresign> {
        self.inner.presign(ctx, path, args).await
    }
}

#[tokio::test]
async fn the_same_holders_next_write_is_one_conditional_request() {
    let Some(b) = bucket().await else { return };
    let requests = Arc::new(Requests::default());
    let holder = b
        .raw
        .clone()
        .layer(Counting(requests.clone()))
        .layer(FencingLayer::new(t(9)));
    let next = b.fenced(FencingLayer::new(t(10)));

    // (reads, writes, stats)
    holder.write("k", "1").await.unwrap();
    assert_eq!(
        requests.take(),
        (1, 1, 0),
        "first write: the frame, the put"
    );
    holder.write("k", "2").await.unwrap();
    assert_eq!(requests.take(), (0, 1, 0), "its own last write: one put");
    let etag = holder.stat("k").await.unwrap().etag().unwrap().to_owned();
    holder.write_with("k", "3").if_match(&etag).await.unwrap();
    assert_eq!(
        requests.take(),
        (1, 1, 0),
        "stat is one read; the CAS on its own ETag one put"
    );
    assert_eq!(b.stored("k").await, framed(9, b"3"));

    // Another writer got in: the remembered ETag fails, the frame is read.
    next.write("k", "4").await.unwrap();
    let err = holder.write("k", "5").await.unwrap_err();
    assert_eq!(stale(&err), (t(9), t(10)));
    assert_eq!(
        requests.take(),
        (1, 1, 1),
        "the failed put, a stat (was it our own write, landed by a retry below?), then the frame"
    );
    let err = holder.write("k", "6").await.unwrap_err();
    assert_eq!(stale(&err), (t(9), t(10)));
    assert_eq!(
        requests.take(),
        (1, 0, 0),
        "refused on the frame: nothing sent"
    );

    // Reads: one request, two for a range far in.
    let big: Vec<u8> = vec![7; 100_000];
    next.write("big", big).await.unwrap();
    assert_eq!(holder.read("k").await.unwrap().to_vec(), b"4");
    assert_eq!(requests.take(), (1, 0, 0));
    assert_eq!(
        holder.read_with("big").range(0..10).await.unwrap().len(),
        10
    );
    assert_eq!(requests.take(), (1, 0, 0));
    assert_eq!(
        holder
            .read_with("big")
            .range(90_000..90_010)
            .await
            .unwrap()
            .len(),
        10
    );
    assert_eq!(requests.take(), (2, 0, 0));
}

/// The S3 SDK on this run's bucket (for keys OpenDAL will not write: `jobs/`).
fn sdk(b: &Bucket) -> fencing_s3::aws_sdk_s3::Client {
    emulator::client(&b.endpoint)
}

/// The bytes the bucket holds under the key `path` (below the root).
async fn stored_key(b: &Bucket, path: &str) -> Vec<u8> {
    let got = sdk(b)
        .get_object()
        .bucket(&b.bucket)
        .key(format!("{}{path}", b.prefix))
        .send()
        .await
        .expect("sdk read");
    got.body.collect().await.expect("body").to_vec()
}

#[tokio::test]
async fn verify_passes_on_the_emulator_even_through_the_layer() {
    let Some(b) = bucket().await else { return };
    // The layer (which checks conditions itself) is not in the probe's way.
    for op in [b.raw.clone(), b.fenced(FencingLayer::new(t(1)))] {
        let checks = fencing_opendal::verify(&op).await.expect("verify");
        assert_eq!(checks.len(), 2, "{checks:?}");
        assert!(checks.iter().all(|c| c.is_safe()), "{checks:?}");
    }
}

#[tokio::test]
async fn verify_flags_s3rver_which_ignores_conditions() {
    use fencing_harness::env::S3RVER;
    if S3RVER.skipped() {
        return;
    }
    opendal::install_default();
    let endpoint = S3RVER.endpoint();
    let bucket = fencing_testkit::unique_prefix();
    let create = {
        use fencing_s3::aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
        let config = fencing_s3::aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("S3RVER", "S3RVER", None, None, "test"))
            .endpoint_url(&endpoint)
            .force_path_style(true)
            .build();
        fencing_s3::aws_sdk_s3::Client::from_conf(config)
    };
    if let Err(e) = emulator::create_bucket(&create, &bucket).await {
        S3RVER.unavailable(&e);
    }
    let service = S3Service::default()
        .endpoint(&endpoint)
        .bucket(&bucket)
        .region("us-east-1")
        .access_key_id("S3RVER")
        .secret_access_key("S3RVER")
        .disable_config_load()
        .disable_ec2_metadata();
    let op = Operator::new(service)
        .expect("an S3 operator")
        .layer(FencingLayer::new(t(1)));
    let checks = fencing_opendal::verify(&op).await.expect("verify");
    let unsafe_: Vec<_> = checks.iter().filter(|c| !c.is_safe()).collect();
    assert_eq!(unsafe_.len(), 2, "{checks:?}");
    assert!(
        unsafe_.iter().all(|c| c.detail.contains("APPLIED")),
        "{checks:?}"
    );
}

#[tokio::test]
async fn errors_carry_no_signature_of_the_url() {
    opendal::install_default();
    // A closed port, and a signature in the endpoint's query: it is in the
    // request's URL, which the service's errors quote.
    let secret = "TOPSECRETSIGNATURE";
    let service = S3Service::default()
        .endpoint(&format!(
            "http://127.0.0.1:9/?sig={secret}&X-Amz-Signature={secret}"
        ))
        .bucket("b")
        .region("us-east-1")
        .access_key_id("fencing")
        .secret_access_key("fencing")
        .disable_config_load()
        .disable_ec2_metadata();
    let raw = Operator::new(service).expect("an S3 operator");
    let err = raw.read("k").await.unwrap_err();
    assert!(
        format!("{err:?}").contains(secret),
        "the test's premise: {err:?}"
    );
    let op = raw.layer(FencingLayer::new(t(1)));
    let errors = [
        op.write("k", "v").await.unwrap_err(),
        op.read("k").await.unwrap_err(),
        op.stat("k").await.unwrap_err(),
        op.delete("k").await.unwrap_err(),
        op.list("d/").await.unwrap_err(),
        op.copy("k", "l").await.unwrap_err(),
    ];
    for err in errors {
        let mut shown = vec![err.to_string(), format!("{err:?}"), format!("{err:#?}")];
        let mut cause = std::error::Error::source(&err);
        while let Some(e) = cause {
            shown.extend([e.to_string(), format!("{e:?}")]);
            cause = e.source();
        }
        for text in shown {
            assert!(!text.contains(secret), "{text}");
        }
        // The kind is the service's (here: a transport failure).
        assert_ne!(err.kind(), ErrorKind::NotFound, "{err}");
    }
}

#[tokio::test]
async fn a_framed_object_at_a_directory_path_keeps_its_value_and_mark() {
    let Some(b) = bucket().await else { return };
    let body = framed(5, b"the job list");
    sdk(&b)
        .put_object()
        .bucket(&b.bucket)
        .key(format!("{}jobs/", b.prefix))
        .body(fencing_s3::aws_sdk_s3::primitives::ByteStream::from(
            body.clone(),
        ))
        .send()
        .await
        .expect("sdk write");
    let op = b.fenced(FencingLayer::new(t(9)));
    let err = op.delete("jobs/").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(
        ours(&err, |e| matches!(e, Error::Unsupported { .. })),
        "{err}"
    );
    let err = op.create_dir("jobs/").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert_eq!(stored_key(&b, "jobs/").await, body);
    // A directory object without a frame is still a directory.
    op.create_dir("empty/").await.unwrap();
    op.delete("empty/").await.unwrap();
    // A recursive delete leaves a tombstone there (at the mark rule), never
    // a raw delete.
    let zombie = b.fenced(FencingLayer::new(t(3)));
    let err = zombie
        .delete_with("jobs/")
        .recursive(true)
        .await
        .unwrap_err();
    assert_eq!(stale(&err), (t(3), t(5)));
    assert_eq!(stored_key(&b, "jobs/").await, body);
    op.delete_with("jobs/").recursive(true).await.unwrap();
    assert_eq!(stored_key(&b, "jobs/").await, tombstone(9));
}

#[tokio::test]
async fn if_match_on_our_own_tombstone_is_a_lost_condition() {
    let Some(b) = bucket().await else { return };
    let op = b.fenced(FencingLayer::new(t(9)));
    op.write("d", "1").await.unwrap();
    op.delete("d").await.unwrap();
    let tomb = b.raw.stat("d").await.unwrap().etag().unwrap().to_owned();
    let err = op.write_with("d", "x").if_match(&tomb).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConditionNotMatch, "{err}");
    let err = op.delete_with("d").if_match(&tomb).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConditionNotMatch, "{err}");
    assert_eq!(b.stored("d").await, tombstone(9));
    assert!(!op.exists("d").await.unwrap());
}

#[tokio::test]
async fn a_create_over_a_newer_holders_object_is_a_lost_condition_naming_the_tokens() {
    let Some(b) = bucket().await else { return };
    let next = b.fenced(FencingLayer::new(t(10)));
    let zombie = b.fenced(FencingLayer::new(t(9)));
    next.write("e", "new").await.unwrap();
    for err in [
        zombie
            .write_with("e", "x")
            .if_not_exists(true)
            .await
            .unwrap_err(),
        zombie
            .write_with("e", "x")
            .if_none_match("*")
            .await
            .unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::ConditionNotMatch, "{err}");
        assert_eq!(
            fencing_error(&err).and_then(Error::stale_tokens),
            Some((t(9), t(10))),
            "{err}"
        );
    }
    assert_eq!(b.stored("e").await, framed(10, b"new"));
}
