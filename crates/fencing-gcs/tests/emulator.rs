//! The object-store conformance suite of `fencing_testkit` (the store
//! contract, the zombie scenario, the history checker, a 16-writer race that
//! must lose preconditions) and the GCS-only cases (preconditions up to the
//! 16 MiB single-request limit, error classification), against the GCS
//! emulator at `FENCING_GCS_ENDPOINT` (default: `integration/services.sh`'s
//! fake-gcs-server on 127.0.0.1:4443).
//! One bucket per test run, named at random, created over the emulator's
//! JSON API (the client library creates buckets over gRPC only).

use bytes::Bytes;

use fencing_core::Error;
use fencing_gcs::{GcsBackend, GcsStore, MAX_VALUE_LEN, emulator};
use fencing_harness::env::{GCS, Server};
use fencing_harness::object_store::{self as shared, Emulator, run_bucket};
use google_cloud_gax::retry_policy::{AlwaysRetry, RetryPolicyExt};

mod suite {
    fencing_testkit::blob_store_conformance!(super::backend);
}

/// fake-gcs-server through `fencing_gcs::emulator` (anonymous).
struct FakeGcs;

impl Emulator for FakeGcs {
    type Backend = GcsBackend;
    const SERVER: Server = GCS;
    const NAME: &'static str = "gcs";
    const READS_TELL_MODIFIED: bool = false;

    async fn set_up(endpoint: &str, bucket: &str) -> fencing_core::Result<GcsBackend> {
        Ok(emulator::store(endpoint, bucket).await?.backend().clone())
    }

    async fn backend_at(endpoint: &str, bucket: &str) -> GcsBackend {
        let client = emulator::client(endpoint).await.expect("client");
        GcsBackend::new(client, bucket)
    }

    /// A plain upload of bytes that carry no frame.
    async fn put_foreign(backend: GcsBackend, key: String, body: &'static [u8]) {
        backend
            .client()
            .write_object(backend.bucket(), key, Bytes::from_static(body))
            .send_buffered()
            .await
            .expect("plain upload");
    }

    /// A JSON API delete (the client library deletes over gRPC only).
    async fn delete(backend: GcsBackend, key: String) {
        let bucket = backend.bucket();
        let bucket = bucket.strip_prefix("projects/_/buckets/").unwrap_or(bucket);
        let path = format!("b/{bucket}/o/{}", key.replace('/', "%2F"));
        json_api(reqwest::Method::DELETE, path, "").await;
    }
}

/// This run's bucket.
fn bucket_name() -> String {
    run_bucket(FakeGcs::NAME)
}

/// A backend on this run's bucket (created if needed), or `None` when the
/// run asked to skip GCS. A server that does not answer fails the test.
async fn backend() -> Option<GcsBackend> {
    shared::backend::<FakeGcs>().await
}

/// The upload path really carries `ifGenerationMatch` and the server really
/// checks it, up to the largest value we accept (a media or resumable upload
/// would be accepted here by the emulator, whatever the generation).
#[tokio::test]
async fn the_upload_path_honours_generation_preconditions_up_to_the_limit() {
    let Some(backend) = backend().await else {
        return;
    };
    for size in [1, MAX_VALUE_LEN] {
        let key = fencing_testkit::unique_name(&format!("precondition-{size}"));
        let value = vec![b'g'; size];
        fencing_testkit::blob::conditional_writes_follow_the_version(&backend, &key, &value).await;
    }
}

#[tokio::test]
async fn a_missing_bucket_is_a_permanent_backend_error() {
    shared::a_missing_bucket_is_permanent::<FakeGcs>().await;
}

#[tokio::test]
async fn a_server_that_refuses_connections_is_a_retryable_backend_error() {
    // One attempt: the client's default policy retries a refused connection
    // for minutes.
    let client = emulator::builder("http://127.0.0.1:1")
        .with_retry_policy(AlwaysRetry.with_attempt_limit(1))
        .build()
        .await
        .unwrap();
    let store = GcsStore::new(GcsBackend::new(client, "nowhere"));
    shared::refused_connections_are_retryable(&store, "gcs").await;
}

/// `emulator::create_bucket` may be called again on this run's bucket.
#[tokio::test]
async fn emulator_bucket_creation_is_idempotent() {
    if backend().await.is_none() {
        return;
    }
    emulator::create_bucket(&GCS.endpoint(), &bucket_name())
        .await
        .expect("creating an existing bucket again is fine");
    assert!(matches!(
        emulator::create_bucket(&GCS.endpoint(), "Not A Bucket").await,
        Err(Error::InvalidInput { .. })
    ));
}

/// No emulator: a retryable backend error (what a test turns into "start it
/// with integration/services.sh up gcs").
#[tokio::test]
async fn emulator_setup_without_a_server_is_a_retryable_backend_error() {
    shared::set_up_without_a_server_is_retryable::<FakeGcs>("http://127.0.0.1:1").await;
}

#[test]
fn limits_are_the_single_request_upload_limits() {
    let max_object = (16 << 20) + fencing_core::adapter::blob::FRAME_HEADER_LEN as u64;
    fencing_testkit::blob::assert_object_limits(GcsBackend::limits(), 1024, max_object);
}

/// The emulator's JSON API, for what the client library offers over gRPC
/// only (metadata patches, rewrites).
async fn json_api(method: reqwest::Method, path: String, body: &str) {
    let url = format!("{}/storage/v1/{path}", GCS.endpoint().trim_end_matches('/'));
    let response = reqwest::Client::new()
        .request(method, &url)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    assert!(status.is_success(), "{url}: {status} {text}");
}

#[tokio::test]
async fn objects_written_without_fencing_are_refused_unless_adopted() {
    shared::unfenced_objects_on::<FakeGcs>().await;
}

/// A metadata patch keeps the generation, so a mark kept in metadata could
/// be dropped without the precondition noticing; the frame is in the body.
/// A rewrite onto itself and a plain overwrite cannot let a zombie in either.
#[tokio::test]
async fn metadata_only_changes_and_foreign_overwrites_cannot_lower_the_mark() {
    let Some((backend, store)) = shared::store::<FakeGcs>().await else {
        return;
    };
    let bucket = bucket_name();
    let object = |key: &str| format!("b/{bucket}/o/{}", key.replace('/', "%2F"));

    shared::a_metadata_change_cannot_lower_the_mark(
        &store,
        "a metadata PATCH zeroing the token hint",
        |key| {
            let body = r#"{"metadata":{"fencing-token":"0","fencing-state":"value","owner":"someone else"}}"#;
            json_api(reqwest::Method::PATCH, object(&key), body)
        },
    )
    .await;
    shared::a_metadata_change_cannot_lower_the_mark(
        &store,
        "a metadata PATCH removing the token hint",
        |key| {
            let body = r#"{"metadata":{"fencing-token":null,"fencing-state":null}}"#;
            json_api(reqwest::Method::PATCH, object(&key), body)
        },
    )
    .await;
    shared::a_metadata_change_cannot_lower_the_mark(
        &store,
        "a rewrite of the object onto itself",
        |key| {
            let path = object(&key);
            json_api(
                reqwest::Method::POST,
                format!("{path}/rewriteTo/{path}"),
                "{}",
            )
        },
    )
    .await;
    shared::a_foreign_overwrite_cannot_lower_the_mark(&store, "upload", |key, body| {
        FakeGcs::put_foreign(backend, key, body)
    })
    .await;
}

/// The client retries an upload with `ifGenerationMatch` by itself; if the
/// first try was applied and its answer lost, the retry fails its
/// precondition. Our upload goes out with the client's retries off.
#[tokio::test]
async fn a_conditional_write_whose_answer_is_lost_is_an_unknown_outcome() {
    shared::a_lost_answer_on::<FakeGcs>(b"POST /upload/").await;
}

/// The bucket issuer judges a lease's age by the server's clock alone. The
/// client shows it in a written object's `update_time` and in the `Date` of
/// error answers (a 404, a 412); a successful download shows neither a
/// `Date` nor a modification time, so `modified` stays unknown.
#[tokio::test]
async fn writes_and_error_answers_feed_the_servers_clock() {
    use fencing_core::adapter::blob::{BlobBackend, BlobWrite, Precondition, WriteOutcome};
    use std::time::Duration;

    if backend().await.is_none() {
        return;
    }
    let key = fencing_testkit::unique_name("server-clock");
    let fresh = async || FakeGcs::backend_at(&GCS.endpoint(), &bucket_name()).await;
    let writer = fresh().await;
    assert_eq!(writer.server_now(), None, "no answer seen yet");
    let write = BlobWrite::new(
        Bytes::from_static(b"body"),
        shared::meta(1),
        Precondition::Absent,
    );
    let written = writer.write(&key, write.clone()).await.expect("write");
    assert!(matches!(written, WriteOutcome::Written(_)), "{written:?}");
    assert!(
        writer.server_now().is_some(),
        "the written object's update_time"
    );
    let read = writer.read(&key).await.expect("read").expect("the object");
    assert_eq!(read.modified, None, "a download that tells its update time");

    let absent = fresh().await;
    assert!(absent.read("no-such-key").await.expect("read").is_none());
    let after_404 = absent.server_now().expect("a 404 carries a Date");
    let after_write = writer.server_now().expect("server_now");
    // Two estimates of the same clock: a write's time and a later Date
    // (whole seconds) agree to within the test's own pace.
    let apart = after_404
        .duration_since(after_write)
        .unwrap_or_else(|e| e.duration());
    assert!(apart < Duration::from_secs(10), "{apart:?} apart");

    let refused = fresh().await;
    let outcome = refused.write(&key, write).await.expect("write");
    assert!(
        matches!(outcome, WriteOutcome::PreconditionFailed),
        "{outcome:?}"
    );
    assert!(refused.server_now().is_some(), "a 412 carries a Date");
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
        Some(Arc::new(object_store::issuer::<super::FakeGcs>().await?))
    }

    fencing_testkit::issuer_conformance!(issuer, IssuerProfile::with_ttl(Duration::from_secs(1)));

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bucket_issuer_cases() {
        object_store::bucket_issuer_cases::<super::FakeGcs>().await;
    }
}
