//! The object-store conformance suite of `fencing_testkit` (the store
//! contract, the zombie scenario, the history checker, a 16-writer race that
//! must lose preconditions) and the GCS-only cases (preconditions up to the
//! 16 MiB single-request limit, error classification), against the GCS
//! emulator at `FENCING_GCS_ENDPOINT` (default: `integration/services.sh`'s
//! fake-gcs-server on 127.0.0.1:4443).
//! One bucket per test run, named at random, created over the emulator's
//! JSON API (the client library creates buckets over gRPC only).

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use fencing_core::blob::{BlobBackend, BlobMeta, Precondition, WriteOutcome};
use fencing_core::{Error, FencedStore, FencingToken};
use fencing_gcs::{GcsBackend, GcsStore, MAX_VALUE_LEN, emulator};
use fencing_harness::env::GCS;
use fencing_harness::error_chain;
use fencing_harness::proxy::AnswerDroppingProxy;
use fencing_testkit::blob::{AfterTampering, tampering_cannot_lower_the_mark};
use google_cloud_gax::retry_policy::{AlwaysRetry, RetryPolicyExt};

fn t(n: u64) -> FencingToken {
    FencingToken::new(n)
}

/// This run's bucket.
fn bucket_name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| format!("{}-gcs", fencing_testkit::unique_prefix()))
}

/// A backend on this run's bucket (created if needed), or `None` when the
/// run asked to skip GCS. A server that does not answer fails the test.
async fn backend() -> Option<GcsBackend> {
    if GCS.skipped() {
        return None;
    }
    match emulator::store(&GCS.endpoint(), bucket_name()).await {
        Ok(store) => Some(store.backend().clone()),
        Err(e) if e.is_retryable() => GCS.unavailable(&error_chain(&e)),
        Err(e) => panic!(
            "cannot create bucket {}: {}",
            bucket_name(),
            error_chain(&e)
        ),
    }
}

mod suite {
    use super::*;
    fencing_testkit::blob_store_conformance!(backend);
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
        let value = Bytes::from(vec![b'g'; size]);
        let meta = |token: u64| BlobMeta {
            token: t(token),
            has_value: true,
        };
        let WriteOutcome::Written(first) = backend
            .write(&key, value.clone(), meta(1), &Precondition::Absent)
            .await
            .unwrap()
        else {
            panic!("the first create lost its precondition");
        };
        assert_eq!(
            backend
                .write(&key, value.clone(), meta(1), &Precondition::Absent)
                .await
                .unwrap(),
            WriteOutcome::PreconditionFailed,
            "{size} bytes: ifGenerationMatch=0 on an existing object must fail"
        );
        let WriteOutcome::Written(second) = backend
            .write(
                &key,
                value.clone(),
                meta(2),
                &Precondition::Matches(first.clone()),
            )
            .await
            .unwrap()
        else {
            panic!("{size} bytes: the update at the current generation lost its precondition");
        };
        assert_ne!(first, second, "the generation changes on every write");
        assert_eq!(
            backend
                .write(&key, value.clone(), meta(1), &Precondition::Matches(first))
                .await
                .unwrap(),
            WriteOutcome::PreconditionFailed,
            "{size} bytes: a write at an old generation must fail"
        );
        let blob = backend.read(&key).await.unwrap().expect("present");
        assert_eq!((blob.bytes.len(), blob.version), (size, second));
    }
}

#[tokio::test]
async fn a_missing_bucket_is_a_permanent_backend_error() {
    let Some(backend) = backend().await else {
        return;
    };
    let missing = GcsStore::new(GcsBackend::new(
        backend.client().clone(),
        format!("{}-missing", bucket_name()),
    ));
    let e = missing
        .put("k", "v".into(), t(1))
        .await
        .expect_err("no such bucket");
    assert!(
        matches!(
            e,
            Error::Backend {
                backend: "gcs",
                retryable: false,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        std::error::Error::source(&e).is_some(),
        "the client error is chained"
    );
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
    for result in [
        store.put("k", "v".into(), t(1)).await,
        store.mark("k").await.map(|_| ()),
    ] {
        let e = result.expect_err("nothing listens on port 1");
        assert!(
            matches!(
                e,
                Error::Backend {
                    backend: "gcs",
                    retryable: true,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}

/// `emulator::create_bucket` may be called again on this run's bucket.
#[tokio::test]
async fn emulator_bucket_creation_is_idempotent() {
    if backend().await.is_none() {
        return;
    }
    emulator::create_bucket(&GCS.endpoint(), bucket_name())
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
    let e = emulator::store("http://127.0.0.1:1", "nowhere")
        .await
        .expect_err("nothing listens on port 1");
    assert!(
        matches!(
            e,
            Error::Backend {
                backend: "gcs",
                retryable: true,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn limits_are_the_single_request_upload_limits() {
    let limits = GcsBackend::limits();
    assert_eq!((limits.max_key_len, limits.max_value_len), (1024, 16 << 20));
    assert_eq!(limits.max_token, t(u64::MAX));
}

/// The emulator's JSON API, for what the client library offers over gRPC
/// only (metadata patches, rewrites).
async fn json_api(method: reqwest::Method, path: &str, body: &str) {
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

/// A plain upload of bytes that carry no frame.
async fn put_foreign(backend: &GcsBackend, key: &str, body: &'static [u8]) {
    backend
        .client()
        .write_object(backend.bucket(), key, Bytes::from_static(body))
        .send_buffered()
        .await
        .expect("plain upload");
}

#[tokio::test]
async fn objects_written_without_fencing_are_refused_unless_adopted() {
    let Some(backend) = backend().await else {
        return;
    };
    let be = backend.clone();
    fencing_testkit::blob::unfenced_objects_are_refused_unless_adopted(
        &GcsStore::new(backend.clone()),
        &GcsStore::new(backend.clone()).adopt_unfenced(true),
        &fencing_testkit::unique_name("foreign"),
        |key, body| {
            let be = be.clone();
            async move { put_foreign(&be, &key, body).await }
        },
    )
    .await;
}

/// A metadata patch keeps the generation, so a mark kept in metadata could
/// be dropped without the precondition noticing; the frame is in the body.
/// A rewrite onto itself and a plain overwrite cannot let a zombie in either.
#[tokio::test]
async fn metadata_only_changes_and_foreign_overwrites_cannot_lower_the_mark() {
    let Some(backend) = backend().await else {
        return;
    };
    let store = GcsStore::new(backend.clone());
    let bucket = bucket_name();
    let object = |key: &str| format!("b/{bucket}/o/{}", key.replace('/', "%2F"));

    let key = fencing_testkit::unique_name("patch");
    let path = object(&key);
    tampering_cannot_lower_the_mark(
        &store,
        &key,
        "a metadata PATCH zeroing the token hint",
        AfterTampering::MarkKept,
        || async move {
            json_api(
                reqwest::Method::PATCH,
                &path,
                r#"{"metadata":{"fencing-token":"0","fencing-state":"value","owner":"someone else"}}"#,
            )
            .await;
        },
    )
    .await;

    let key = fencing_testkit::unique_name("patch-drop");
    let path = object(&key);
    tampering_cannot_lower_the_mark(
        &store,
        &key,
        "a metadata PATCH removing the token hint",
        AfterTampering::MarkKept,
        || async move {
            json_api(
                reqwest::Method::PATCH,
                &path,
                r#"{"metadata":{"fencing-token":null,"fencing-state":null}}"#,
            )
            .await;
        },
    )
    .await;

    let key = fencing_testkit::unique_name("rewrite");
    let path = object(&key);
    tampering_cannot_lower_the_mark(
        &store,
        &key,
        "a rewrite of the object onto itself",
        AfterTampering::MarkKept,
        || async move {
            json_api(
                reqwest::Method::POST,
                &format!("{path}/rewriteTo/{path}"),
                "{}",
            )
            .await;
        },
    )
    .await;

    let key = fencing_testkit::unique_name("overwrite");
    let (be, k) = (backend.clone(), key.clone());
    tampering_cannot_lower_the_mark(
        &store,
        &key,
        "a plain upload by a program that knows nothing of fencing",
        AfterTampering::Foreign,
        || async move { put_foreign(&be, &k, b"plain bytes").await },
    )
    .await;
}

/// The client retries an upload with `ifGenerationMatch` by itself; if the
/// first try was applied and its answer lost, the retry fails its
/// precondition. Our upload goes out with the client's retries off.
#[tokio::test]
async fn a_conditional_write_whose_answer_is_lost_is_an_unknown_outcome() {
    let Some(backend) = backend().await else {
        return;
    };
    let target = GCS
        .endpoint()
        .trim_start_matches("http://")
        .parse()
        .expect("a host:port endpoint");
    let proxy = AnswerDroppingProxy::start(target).await;
    let client = emulator::client(&format!("http://{}", proxy.addr()))
        .await
        .expect("client");
    let through_proxy = GcsStore::new(GcsBackend::new(client, bucket_name()));
    let direct = GcsStore::new(backend.clone());
    let key = fencing_testkit::unique_name("lost-answer");
    let status = fencing_testkit::blob::a_lost_answer_is_an_unknown_outcome(
        Arc::new(through_proxy),
        &direct,
        &proxy,
        b"POST /upload/",
        &key,
    )
    .await;
    println!("lost answer: {status}");
}
