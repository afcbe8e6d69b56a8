//! On OpenDAL's `Memory` service, which has no conditional write on an
//! ETag (`write_with_if_match` is off): the layer refuses every write there
//! with a typed error and writes nothing, while its reads, `stat` and
//! `list` work on objects framed by another writer (put here with the
//! unlayered operator). The contract of writes runs on the S3 emulator
//! (`integration/tests/opendal.rs`).

use fencing_core::adapter::blob::{BlobMeta, frame};
use fencing_core::{Error, FencingToken};
use fencing_opendal::{FencingLayer, fencing_error};
use opendal::services::Memory;
use opendal::{ErrorKind, Operator};

fn t(n: u64) -> FencingToken {
    FencingToken::new(n)
}

/// A memory bucket: the operator without the layer, and one with it.
fn bucket(layer: FencingLayer) -> (Operator, Operator) {
    let raw = Operator::new(Memory::default()).expect("memory");
    let fenced = raw.clone().layer(layer);
    (raw, fenced)
}

/// The body a fenced writer stores: the frame, then the value.
fn framed(token: u64, value: &[u8]) -> Vec<u8> {
    frame::encode(
        BlobMeta {
            token: t(token),
            has_value: true,
        },
        value,
    )
    .to_vec()
}

fn tombstone(token: u64) -> Vec<u8> {
    frame::encode(
        BlobMeta {
            token: t(token),
            has_value: false,
        },
        &[],
    )
    .to_vec()
}

fn is_unsupported_here(err: &opendal::Error) -> bool {
    err.kind() == ErrorKind::Unsupported
        && matches!(
            fencing_error(err),
            Some(Error::Unsupported {
                backend: "memory",
                ..
            })
        )
}

#[test]
fn memory_cannot_condition_a_write_on_an_etag() {
    let cap = Operator::new(Memory::default())
        .expect("memory")
        .info()
        .capability();
    assert!(
        !cap.write_with_if_match,
        "Memory now has write_with_if_match: move the write contract here"
    );
}

#[tokio::test]
async fn every_write_is_refused_and_nothing_is_written() {
    let (raw, fenced) = bucket(FencingLayer::new(t(7)));

    let err = fenced.write("db/manifest", "v1").await.unwrap_err();
    assert!(is_unsupported_here(&err), "{err}");
    assert!(
        err.to_string().contains("write_with_if_match"),
        "names why: {err}"
    );
    assert!(!raw.exists("db/manifest").await.unwrap());

    // The writer is refused at its creation, before any chunk.
    let Err(err) = fenced.writer("db/manifest").await else {
        panic!("a writer was opened");
    };
    assert!(is_unsupported_here(&err), "{err}");

    // Deletes, copies and renames are writes too.
    raw.write("db/old", framed(7, b"v0")).await.unwrap();
    let err = fenced.delete("db/old").await.unwrap_err();
    assert!(is_unsupported_here(&err), "{err}");
    let err = fenced.copy("db/old", "db/new").await.unwrap_err();
    assert!(is_unsupported_here(&err), "{err}");
    let err = fenced.rename("db/old", "db/new").await.unwrap_err();
    assert!(is_unsupported_here(&err), "{err}");
    assert_eq!(raw.read("db/old").await.unwrap().to_vec(), framed(7, b"v0"));
    assert!(!raw.exists("db/new").await.unwrap());
}

#[tokio::test]
async fn append_is_refused_before_anything_else() {
    let (raw, fenced) = bucket(FencingLayer::new(t(7)));
    let err = fenced
        .write_with("log", "entry")
        .append(true)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(
        matches!(fencing_error(&err), Some(Error::Unsupported { operation, .. }) if operation.contains("append")),
        "{err}"
    );
    assert!(!raw.exists("log").await.unwrap());
}

#[tokio::test]
async fn presign_is_refused() {
    let (_, fenced) = bucket(FencingLayer::new(t(7)));
    let err = fenced
        .presign_write("db/manifest", std::time::Duration::from_secs(60))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(
        matches!(fencing_error(&err), Some(Error::Unsupported { operation, .. }) if operation.contains("presign")),
        "refused by the layer, not the service: {err}"
    );
}

#[tokio::test]
async fn reads_hide_the_frame() {
    let (raw, fenced) = bucket(FencingLayer::new(t(7)));
    raw.write("v", framed(9, b"hello world")).await.unwrap();

    assert_eq!(fenced.read("v").await.unwrap().to_vec(), b"hello world");
    assert_eq!(
        fenced.read_with("v").range(6..11).await.unwrap().to_vec(),
        b"world"
    );
    assert_eq!(
        fenced.read_with("v").range(0..5).await.unwrap().to_vec(),
        b"hello"
    );
    assert_eq!(
        fenced.read_with("v").range(4..).await.unwrap().to_vec(),
        b"o world"
    );
    let meta = fenced.stat("v").await.unwrap();
    assert_eq!(meta.content_length(), 11);

    // A range past the value's end is refused, as the service refuses one
    // past the object's (the frame's bytes do not count).
    let err = fenced.read_with("v").range(5..20).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RangeNotSatisfied, "{err}");

    // Through a reader: several ranges, and the size it learns.
    let reader = fenced.reader("v").await.unwrap();
    let parts = reader.fetch(vec![0..2, 9..11]).await.unwrap();
    assert_eq!(parts[0].to_vec(), b"he");
    assert_eq!(parts[1].to_vec(), b"ld");

    // An empty value.
    raw.write("empty", framed(9, b"")).await.unwrap();
    assert!(fenced.read("empty").await.unwrap().is_empty());
    assert_eq!(fenced.stat("empty").await.unwrap().content_length(), 0);
}

#[tokio::test]
async fn a_far_range_of_a_large_value_is_the_callers() {
    let (raw, fenced) = bucket(FencingLayer::new(t(7)));
    let value: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    raw.write("big", framed(9, &value)).await.unwrap();

    let got = fenced
        .read_with("big")
        .range(150_000..150_100)
        .await
        .unwrap();
    assert_eq!(got.to_vec(), value[150_000..150_100]);
    let got = fenced.read_with("big").range(199_990..).await.unwrap();
    assert_eq!(got.to_vec(), value[199_990..]);
    let got = fenced
        .read_with("big")
        .chunk(65_536)
        .concurrent(3)
        .await
        .unwrap();
    assert_eq!(got.to_vec(), value);
    assert_eq!(
        fenced.stat("big").await.unwrap().content_length(),
        value.len() as u64
    );
}

#[tokio::test]
async fn a_tombstone_is_absent() {
    let (raw, fenced) = bucket(FencingLayer::new(t(7)));
    raw.write("gone", tombstone(9)).await.unwrap();

    let err = fenced.read("gone").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let err = fenced.stat("gone").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(!fenced.exists("gone").await.unwrap());
}

#[tokio::test]
async fn listings_hide_tombstones_and_show_the_callers_sizes() {
    let (raw, fenced) = bucket(FencingLayer::new(t(7)));
    raw.write("d/a", framed(9, b"abc")).await.unwrap();
    raw.write("d/empty", framed(9, b"")).await.unwrap();
    raw.write("d/gone", tombstone(9)).await.unwrap();
    raw.write("d/sub/gone", tombstone(9)).await.unwrap();
    raw.write("d/live/x", framed(9, b"x")).await.unwrap();

    let mut listed: Vec<(String, u64)> = fenced
        .list_with("d/")
        .recursive(true)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.metadata().is_file())
        .map(|e| (e.path().to_owned(), e.metadata().content_length()))
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            ("d/a".to_owned(), 3),
            ("d/empty".to_owned(), 0),
            ("d/live/x".to_owned(), 1)
        ]
    );

    // One level: a directory that holds only tombstones is absent too.
    let mut names: Vec<String> = fenced
        .list("d/")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path().to_owned())
        .filter(|p| p != "d/")
        .collect();
    names.sort();
    assert_eq!(names, ["d/a", "d/empty", "d/live/"]);
}

#[tokio::test]
async fn an_object_without_the_frame_is_refused_unless_adopted() {
    let (raw, fenced) = bucket(FencingLayer::new(t(7)));
    raw.write("plain", "written without fencing").await.unwrap();

    for err in [
        fenced.read("plain").await.unwrap_err(),
        fenced.stat("plain").await.unwrap_err(),
    ] {
        assert!(
            matches!(fencing_error(&err), Some(Error::Unfenced { key }) if key == "plain"),
            "{err}"
        );
        assert_ne!(err.kind(), ErrorKind::NotFound);
    }

    let adopting = raw
        .clone()
        .layer(FencingLayer::new(t(7)).adopt_unfenced(true));
    assert_eq!(
        adopting.read("plain").await.unwrap().to_vec(),
        b"written without fencing"
    );
    assert_eq!(
        adopting
            .read_with("plain")
            .range(8..15)
            .await
            .unwrap()
            .to_vec(),
        b"without"
    );
    assert_eq!(
        adopting.stat("plain").await.unwrap().content_length(),
        "written without fencing".len() as u64
    );
    // Short and empty objects too.
    raw.write("short", "abc").await.unwrap();
    raw.write("nothing", "").await.unwrap();
    assert_eq!(adopting.read("short").await.unwrap().to_vec(), b"abc");
    assert!(adopting.read("nothing").await.unwrap().is_empty());
    assert!(fencing_error(&fenced.read("nothing").await.unwrap_err()).is_some());
    let mut sizes: Vec<(String, u64)> = adopting
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
        [
            ("nothing".to_owned(), 0),
            ("plain".to_owned(), 23),
            ("short".to_owned(), 3)
        ]
    );
}

#[tokio::test]
async fn a_damaged_frame_is_refused_even_when_adopting() {
    let (raw, _) = bucket(FencingLayer::new(t(7)));
    let adopting = raw
        .clone()
        .layer(FencingLayer::new(t(7)).adopt_unfenced(true));
    let mut damaged = framed(9, b"x");
    damaged[16] = b'?';
    raw.write("damaged", damaged).await.unwrap();
    let err = adopting.read("damaged").await.unwrap_err();
    assert!(err.to_string().contains("not a valid frame"), "{err}");
}
