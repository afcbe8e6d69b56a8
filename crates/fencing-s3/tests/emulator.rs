//! The object-store conformance suite of `fencing_testkit` (the store
//! contract, the zombie scenario, the history checker, a 16-writer race that
//! must lose preconditions) and the S3-only cases (the identical-body ETag =
//! MD5 hazard, objects written without fencing, error classification),
//! against the S3 emulator at `FENCING_S3_ENDPOINT` (default:
//! `integration/services.sh`'s moto on 127.0.0.1:9000). One bucket per test
//! run, named at random.

use aws_sdk_s3::Client;
use aws_sdk_s3::error::DisplayErrorContext;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{MetadataDirective, Tag, Tagging};
use bytes::Bytes;

use fencing_core::{Error, FencedStore};
use fencing_harness::env::{S3, Server};
use fencing_harness::object_store::{self as shared, Emulator, run_bucket, t};
use fencing_s3::{S3Backend, S3Store, emulator};

mod suite {
    fencing_testkit::blob_store_conformance!(super::backend);
}

/// moto through `fencing_s3::emulator` (its test keys).
struct Moto;

impl Emulator for Moto {
    type Backend = S3Backend;
    const SERVER: Server = S3;
    const NAME: &'static str = "s3";

    async fn set_up(endpoint: &str, bucket: &str) -> fencing_core::Result<S3Backend> {
        Ok(emulator::store(endpoint, bucket).await?.backend().clone())
    }

    async fn backend_at(endpoint: &str, bucket: &str) -> S3Backend {
        S3Backend::new(emulator::client(endpoint), bucket)
    }

    /// A plain `PutObject` of bytes that carry no frame.
    async fn put_foreign(backend: S3Backend, key: String, body: &'static [u8]) {
        backend
            .client()
            .put_object()
            .bucket(backend.bucket())
            .key(key)
            .body(ByteStream::from_static(body))
            .send()
            .await
            .expect("raw put");
    }

    async fn delete(backend: S3Backend, key: String) {
        backend
            .client()
            .delete_object()
            .bucket(backend.bucket())
            .key(key)
            .send()
            .await
            .expect("DeleteObject");
    }
}

/// This run's bucket.
fn bucket_name() -> String {
    run_bucket(Moto::NAME)
}

/// A backend on this run's bucket (created if needed), or `None` when the
/// run asked to skip S3. A server that does not answer fails the test.
async fn backend() -> Option<S3Backend> {
    shared::backend::<Moto>().await
}

/// Deletes `keys` (best effort: the bucket is this run's own).
async fn clean_up(backend: &S3Backend, keys: &[&str]) {
    for key in keys {
        let _ = backend
            .client()
            .delete_object()
            .bucket(backend.bucket())
            .key(*key)
            .send()
            .await;
    }
}

/// S3's ETag is the MD5 of the body. A design that kept the token only in
/// metadata would let a stale writer's `If-Match` match again after the
/// same bytes were rewritten with a higher token. The frame prevents that.
#[tokio::test]
async fn identical_bytes_rewritten_with_a_higher_token_are_not_mistaken_for_the_old_version() {
    let Some(backend) = backend().await else {
        return;
    };
    let key = fencing_testkit::unique_name("same-bytes");

    // The emulator behaves like S3: identical bytes, identical ETag, whatever
    // the metadata. This is what fools a metadata-only design.
    let naive = format!("{key}-naive");
    let put_raw = |token: &'static str| {
        backend
            .client()
            .put_object()
            .bucket(backend.bucket())
            .key(&naive)
            .metadata("fencing-token", token)
            .body(ByteStream::from_static(b"A"))
            .send()
    };
    let naive_5 = put_raw("5")
        .await
        .expect("raw put")
        .e_tag()
        .map(str::to_owned);
    let naive_6 = put_raw("6")
        .await
        .expect("raw put")
        .e_tag()
        .map(str::to_owned);
    assert_eq!(
        naive_5, naive_6,
        "the emulator's ETag should be the MD5 of the body, as on S3"
    );
    // ... so a stale writer holding the token-5 ETag would get through.
    backend
        .client()
        .put_object()
        .bucket(backend.bucket())
        .key(&naive)
        .metadata("fencing-token", "5")
        .if_match(naive_5.as_deref().expect("an ETag"))
        .body(ByteStream::from_static(b"B"))
        .send()
        .await
        .expect(
            "a metadata-only design is fooled: If-Match still matches after the token moved to 6",
        );

    // Through the backend: A@5, then the fencer rewrites A@6; a write
    // conditional on the token-5 version fails.
    fencing_testkit::blob::conditional_writes_follow_the_version(&backend, &key, b"A").await;

    // The same through two stores: A's fast path remembers the token-5 ETag.
    let key2 = format!("{key}-stores");
    let holder = S3Store::new(backend.clone());
    let fencer = S3Store::new(backend.clone());
    holder.put(&key2, "A".into(), t(5)).await.unwrap();
    fencer.fence(&key2, t(6)).await.unwrap();
    match holder.put(&key2, "A".into(), t(5)).await {
        Err(Error::StaleToken {
            presented, current, ..
        }) => assert_eq!((presented, current), (t(5), t(6))),
        other => panic!("the warm holder's stale write must be refused, got {other:?}"),
    }
    let got = fencer.get(&key2).await.unwrap().expect("value kept");
    assert_eq!((got.value, got.token), (Bytes::from("A"), t(6)));
    clean_up(&backend, &[&key, &key2, &naive]).await;
}

#[tokio::test]
async fn objects_written_without_fencing_are_refused_unless_adopted() {
    let Some((backend, key)) = shared::unfenced_objects_on::<Moto>().await else {
        return;
    };

    // The frame is really there; the metadata is a hint that agrees.
    let raw = backend
        .client()
        .get_object()
        .bucket(backend.bucket())
        .key(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(
        raw.metadata()
            .and_then(|m| m.get("fencing-token"))
            .map(String::as_str),
        Some("3")
    );
    let raw = raw.body.collect().await.unwrap().into_bytes();
    assert_eq!(&raw[..8], &fencing_s3::FRAME_MAGIC);
    assert_eq!(
        raw.len(),
        fencing_s3::FRAME_HEADER_LEN + "legacy bytes".len()
    );

    let empty = format!("{key}-empty");
    clean_up(&backend, &[&key, &empty]).await;
}

/// Copies `key` onto itself, replacing its metadata with `metadata`.
async fn copy_in_place(client: &Client, bucket: &str, key: String, metadata: &[(&str, &str)]) {
    let mut copy = client
        .copy_object()
        .bucket(bucket)
        .key(&key)
        .copy_source(format!("{bucket}/{key}"))
        .metadata_directive(MetadataDirective::Replace);
    for (name, value) in metadata {
        copy = copy.metadata(*name, *value);
    }
    copy.send().await.expect("copy-in-place");
}

/// The mark lives in the body, which the ETag covers: a copy-in-place that
/// replaces the metadata (dropping or zeroing the token hint), tagging, or a
/// plain overwrite cannot let a zombie in.
#[tokio::test]
async fn metadata_only_changes_and_foreign_overwrites_cannot_lower_the_mark() {
    let Some((backend, store)) = shared::store::<Moto>().await else {
        return;
    };
    let (client, bucket) = (backend.client(), backend.bucket());
    let key = shared::a_metadata_change_cannot_lower_the_mark(
        &store,
        "copy-in-place with REPLACE metadata",
        |key| {
            copy_in_place(
                client,
                bucket,
                key,
                &[("fencing-token", "0"), ("owner", "someone else")],
            )
        },
    )
    .await;
    let key2 = shared::a_metadata_change_cannot_lower_the_mark(
        &store,
        "copy-in-place dropping all metadata",
        |key| copy_in_place(client, bucket, key, &[]),
    )
    .await;
    let key3 = shared::a_metadata_change_cannot_lower_the_mark(
        &store,
        "PutObjectTagging",
        |key| async move {
            let tag = Tag::builder()
                .key("fencing-token")
                .value("0")
                .build()
                .unwrap();
            client
                .put_object_tagging()
                .bucket(bucket)
                .key(key)
                .tagging(Tagging::builder().tag_set(tag).build().unwrap())
                .send()
                .await
                .expect("tagging");
        },
    )
    .await;
    let be = backend.clone();
    let key4 =
        shared::a_foreign_overwrite_cannot_lower_the_mark(&store, "PutObject", |key, body| {
            Moto::put_foreign(be, key, body)
        })
        .await;
    clean_up(&backend, &[&key, &key2, &key3, &key4]).await;
}

/// The SDK retries a conditional `PutObject` by itself; if the first try was
/// applied and its answer lost, the retry fails its precondition. Our
/// write goes out with SDK retries off, and the loop reports the truth.
#[tokio::test]
async fn a_conditional_write_whose_answer_is_lost_is_an_unknown_outcome() {
    if let Some((backend, key)) = shared::a_lost_answer_on::<Moto>(b"PUT ").await {
        clean_up(&backend, &[&key]).await;
    }
}

#[tokio::test]
async fn a_missing_bucket_is_a_permanent_backend_error() {
    let Some((_, e)) = shared::a_missing_bucket_is_permanent::<Moto>().await else {
        return;
    };
    let source = std::error::Error::source(&e).expect("the SDK error is chained");
    assert!(
        format!("{}", DisplayErrorContext(source)).contains("NoSuchBucket"),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_server_that_refuses_connections_is_a_retryable_backend_error() {
    let store = S3Store::new(S3Backend::new(
        emulator::client("http://127.0.0.1:1"),
        "nowhere",
    ));
    shared::refused_connections_are_retryable(&store, "s3").await;
}

/// `emulator::create_bucket` may be called again on this run's bucket.
#[tokio::test]
async fn emulator_bucket_creation_is_idempotent() {
    let Some(backend) = backend().await else {
        return;
    };
    emulator::create_bucket(backend.client(), &bucket_name())
        .await
        .expect("creating an owned bucket again is fine");
    let store = emulator::store(&S3.endpoint(), &bucket_name())
        .await
        .expect("store on the same bucket");
    assert_eq!(store.backend().bucket(), bucket_name());
}

/// No emulator: a retryable backend error (what a test turns into "start it
/// with integration/services.sh up s3").
#[tokio::test]
async fn emulator_setup_without_a_server_is_a_retryable_backend_error() {
    shared::set_up_without_a_server_is_retryable::<Moto>("http://127.0.0.1:1").await;
}

#[test]
fn limits_are_s3s_single_put_limits() {
    fencing_testkit::blob::assert_object_limits(S3Backend::limits(), 1024, 5 << 30);
}

/// A lifecycle rule that expires objects deletes fenced ones, marks and
/// all: `verify` passes a bucket without one and warns, naming the rule,
/// once a rule expires current objects.
#[tokio::test]
async fn verify_warns_of_a_lifecycle_rule_that_expires_objects() {
    use aws_sdk_s3::types::{
        BucketLifecycleConfiguration, ExpirationStatus, LifecycleExpiration, LifecycleRule,
        LifecycleRuleFilter,
    };
    use fencing_core::safety::Verdict;
    if S3.skipped() {
        return;
    }
    let bucket = format!("{}-lifecycle", bucket_name());
    let store = emulator::store(&S3.endpoint(), &bucket)
        .await
        .unwrap_or_else(|e| S3.unavailable(&e));
    let checks = store.verify().await.expect("verify");
    let check = fencing_testkit::safety::check(&checks, "no lifecycle expiration");
    assert_eq!(check.verdict, Verdict::Pass, "{check:?}");

    let rule = LifecycleRule::builder()
        .id("expire-jobs")
        .status(ExpirationStatus::Enabled)
        .filter(LifecycleRuleFilter::builder().prefix("jobs/").build())
        .expiration(LifecycleExpiration::builder().days(30).build())
        .build()
        .expect("a rule");
    store
        .backend()
        .client()
        .put_bucket_lifecycle_configuration()
        .bucket(&bucket)
        .lifecycle_configuration(
            BucketLifecycleConfiguration::builder()
                .rules(rule)
                .build()
                .expect("a configuration"),
        )
        .send()
        .await
        .expect("put the lifecycle rule");
    let checks = store.verify().await.expect("verify");
    let check = fencing_testkit::safety::check(&checks, "no lifecycle expiration");
    assert_eq!(check.verdict, Verdict::Warn, "{check:?}");
    assert!(
        check.detail.contains("\"expire-jobs\"") && check.detail.contains("\"jobs/\""),
        "{check:?}"
    );
}

/// The bucket issuer judges a lease's age by the server's clock alone:
/// `modified` from `Last-Modified`, `server_now` from the `Date` of every
/// answer, a 404 or a 412 included.
#[tokio::test]
async fn reads_carry_the_servers_modified_time_and_answers_feed_its_clock() {
    use fencing_core::adapter::blob::{BlobBackend, BlobWrite, Precondition, WriteOutcome};
    use std::time::Duration;

    let Some(backend) = backend().await else {
        return;
    };
    let (key, empty) = ("server-clock", "server-clock-empty");
    clean_up(&backend, &[key, empty]).await;
    let fresh = async || Moto::backend_at(&S3.endpoint(), &bucket_name()).await;
    assert_eq!(fresh().await.server_now(), None, "no answer seen yet");

    let write = BlobWrite::new(
        Bytes::from_static(b"body"),
        shared::meta(1),
        Precondition::Absent,
    );
    let written = backend.write(key, write.clone()).await.expect("write");
    assert!(matches!(written, WriteOutcome::Written(_)), "{written:?}");
    let read = |object: Option<fencing_core::adapter::blob::StoredObject>| {
        let modified = object.expect("the object").modified.expect("modified");
        let now = backend.server_now().expect("server_now after a read");
        let age = now
            .duration_since(modified)
            .expect("server_now behind modified");
        assert!(age < Duration::from_secs(10), "{age:?}");
    };
    read(backend.read(key).await.expect("read"));
    read(backend.read_prefix(key, 4).await.expect("ranged read"));
    // An empty object answers a ranged GET with 416: HeadObject gives it.
    Moto::put_foreign(backend.clone(), empty.to_owned(), b"").await;
    read(
        backend
            .read_prefix(empty, 4)
            .await
            .expect("ranged read of an empty object"),
    );

    let absent = fresh().await;
    assert!(absent.read("no-such-key").await.expect("read").is_none());
    assert!(absent.server_now().is_some(), "a 404 carries a Date too");
    let refused = fresh().await;
    let outcome = refused.write(key, write).await.expect("write");
    assert!(
        matches!(outcome, WriteOutcome::PreconditionFailed),
        "{outcome:?}"
    );
    assert!(refused.server_now().is_some(), "a 412 carries a Date too");
    clean_up(&backend, &[key, empty]).await;
}

/// The bucket issuer on this emulator: the issuer suite, then its own
/// cases (expiry on the server's clock, one bucket as issuer and store).
mod bucket_issuer {
    use std::sync::Arc;
    use std::time::Duration;

    use fencing_core::TokenIssuer;
    use fencing_harness::object_store;
    use fencing_testkit::issuer::IssuerProfile;

    async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
        Some(Arc::new(object_store::issuer::<super::Moto>().await?))
    }

    fencing_testkit::issuer_conformance!(issuer, IssuerProfile::with_ttl(Duration::from_secs(1)));

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bucket_issuer_cases() {
        object_store::bucket_issuer_cases::<super::Moto>().await;
    }
}
