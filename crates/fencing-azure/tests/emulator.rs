//! The object-store conformance suite of `fencing_testkit` (the store
//! contract, the zombie scenario, the history checker, a 16-writer race that
//! must lose preconditions) and the Azure-only cases (409 on create, one Put
//! Blob for large values, error classification, the SAS kept out of
//! `Debug`), against Azurite at `FENCING_AZURE_ENDPOINT` (default:
//! `integration/services.sh`'s Azurite at
//! `http://127.0.0.1:10000/devstoreaccount1`). One container per test run,
//! named at random, reached with an account SAS signed by
//! `fencing_azure::emulator`.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use azure_core::http::{ClientOptions, RequestContent, RetryOptions};
use azure_storage_blob::BlobContainerClientOptions;
use bytes::Bytes;
use fencing_azure::{AzureBackend, AzureStore, emulator};
use fencing_core::blob::{BlobBackend, BlobMeta, Precondition, WriteOutcome, frame};
use fencing_core::{Error, FencedStore, FencingToken};
use fencing_harness::env::AZURE;
use fencing_harness::error_chain;
use fencing_harness::proxy::AnswerDroppingProxy;
use fencing_testkit::blob::{AfterTampering, tampering_cannot_lower_the_mark};

fn t(n: u64) -> FencingToken {
    FencingToken::new(n)
}

/// This run's container.
fn container_name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| format!("{}-az", fencing_testkit::unique_prefix()))
}

/// A backend on this run's container (created if needed), or `None` when
/// the run asked to skip Azure. A server that does not answer fails the test.
async fn backend() -> Option<AzureBackend> {
    if AZURE.skipped() {
        return None;
    }
    match emulator::store(&AZURE.endpoint(), container_name()).await {
        Ok(store) => Some(store.backend().clone()),
        Err(e) if e.is_retryable() => AZURE.unavailable(&error_chain(&e)),
        Err(e) => panic!(
            "cannot create container {}: {}",
            container_name(),
            error_chain(&e)
        ),
    }
}

mod suite {
    use super::*;
    fencing_testkit::blob_store_conformance!(backend);
}

/// `If-None-Match: *` on an existing blob answers 409 `BlobAlreadyExists`
/// (not 412); both are a failed precondition. Rewriting the same bytes with
/// a higher token changes the ETag, so a stale `If-Match` fails.
#[tokio::test]
async fn conditions_fail_as_preconditions_and_the_etag_follows_every_write() {
    let Some(backend) = backend().await else {
        return;
    };
    let key = fencing_testkit::unique_name("conditions");
    let meta = |token: u64| BlobMeta {
        token: t(token),
        has_value: true,
    };
    let framed = |token: u64, value: &[u8]| frame::encode(meta(token), value);
    let WriteOutcome::Written(v5) = backend
        .write(&key, framed(5, b"A"), meta(5), &Precondition::Absent)
        .await
        .unwrap()
    else {
        panic!("the first create lost its precondition");
    };
    assert_eq!(
        backend
            .write(&key, framed(5, b"A"), meta(5), &Precondition::Absent)
            .await
            .unwrap(),
        WriteOutcome::PreconditionFailed,
        "a create over an existing blob (409 BlobAlreadyExists) must be a failed precondition"
    );
    let WriteOutcome::Written(v6) = backend
        .write(
            &key,
            framed(6, b"A"),
            meta(6),
            &Precondition::Matches(v5.clone()),
        )
        .await
        .unwrap()
    else {
        panic!("the fencer's rewrite lost its precondition");
    };
    assert_ne!(v5, v6, "same bytes at a higher token must change the ETag");
    assert_eq!(
        backend
            .write(&key, framed(5, b"B"), meta(5), &Precondition::Matches(v5))
            .await
            .unwrap(),
        WriteOutcome::PreconditionFailed,
        "a write conditional on the token-5 version went through"
    );
    let blob = backend.read(&key).await.unwrap().expect("present");
    assert_eq!((blob.bytes, blob.version), (framed(6, b"A"), v6));
    let _ = backend.container().blob_client(&key).delete(None).await;
}

/// Committed blocks of `key`: empty for a single Put Blob, one per staged
/// block for a partitioned upload.
async fn committed_blocks(backend: &AzureBackend, key: &str) -> usize {
    let list = backend
        .container()
        .blob_client(key)
        .block_blob_client()
        .get_block_list(azure_storage_blob::models::BlockListType::Committed, None)
        .await
        .expect("get block list")
        .into_model()
        .expect("a block list");
    list.committed_blocks.map_or(0, |b| b.len())
}

/// A value above the client's upload and download partitions (4 MiB) is
/// still one Put Blob, and comes back whole through the ranged,
/// ETag-locked download.
#[tokio::test]
async fn a_large_value_is_one_put_and_reads_back_whole() {
    let Some(backend) = backend().await else {
        return;
    };
    let store = AzureStore::new(backend.clone());
    let key = fencing_testkit::unique_name("large");
    let value: Bytes = (0..9 * 1024 * 1024)
        .map(|i: u32| i.to_le_bytes()[0] ^ 0x5a)
        .collect::<Vec<u8>>()
        .into();
    store.put(&key, value.clone(), t(1)).await.unwrap();
    let got = store.get(&key).await.unwrap().expect("present");
    assert!(got.value == value, "the large value changed on the way");
    assert_eq!(
        committed_blocks(&backend, &key).await,
        0,
        "the value was uploaded in staged blocks"
    );

    // The control: the client's default upload of the same value stages blocks.
    let control = format!("{key}-control");
    backend
        .container()
        .blob_client(&control)
        .upload(
            <RequestContent<Bytes, azure_core::http::NoFormat> as From<Bytes>>::from(value),
            None,
        )
        .await
        .unwrap();
    assert!(
        committed_blocks(&backend, &control).await > 1,
        "the default upload should have staged blocks"
    );
    for k in [&key, &control] {
        let _ = backend.container().blob_client(k).delete(None).await;
    }
}

#[tokio::test]
async fn a_missing_container_is_a_permanent_backend_error() {
    let Some(_) = backend().await else { return };
    let missing = AzureStore::new(
        emulator::backend(
            &AZURE.endpoint(),
            &format!("{}-missing", container_name()),
            None,
        )
        .expect("a backend"),
    );
    let e = missing
        .put("k", "v".into(), t(1))
        .await
        .expect_err("no such container");
    assert!(
        matches!(
            e,
            Error::Backend {
                backend: "azure",
                retryable: false,
                ..
            }
        ),
        "{e:?}"
    );
    let source = std::error::Error::source(&e).expect("the client error is chained");
    assert!(format!("{source:?}").contains("ContainerNotFound"), "{e:?}");
    let e = missing.mark("k").await.expect_err("no such container");
    assert!(
        matches!(
            e,
            Error::Backend {
                backend: "azure",
                retryable: false,
                ..
            }
        ),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_server_that_refuses_connections_is_a_retryable_backend_error() {
    let options = BlobContainerClientOptions {
        client_options: ClientOptions {
            retry: RetryOptions::none(),
            ..Default::default()
        },
        ..Default::default()
    };
    let store = AzureStore::new(
        emulator::backend(
            "http://127.0.0.1:1/devstoreaccount1",
            "nowhere",
            Some(options),
        )
        .expect("a backend"),
    );
    for result in [
        store.put("k", "v".into(), t(1)).await,
        store.mark("k").await.map(|_| ()),
    ] {
        let e = result.expect_err("nothing listens on port 1");
        assert!(
            matches!(
                e,
                Error::Backend {
                    backend: "azure",
                    retryable: true,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}

/// `emulator::create_container` may be called again on this run's container.
#[tokio::test]
async fn azurite_container_creation_is_idempotent() {
    let Some(backend) = backend().await else {
        return;
    };
    emulator::create_container(backend.container())
        .await
        .expect("creating an existing container again is fine");
}

/// No emulator: a retryable backend error (what a test turns into "start it
/// with integration/services.sh up azurite").
#[tokio::test]
async fn azurite_setup_without_a_server_is_a_retryable_backend_error() {
    let e = emulator::store("http://127.0.0.1:1/devstoreaccount1", "nowhere")
        .await
        .expect_err("nothing listens on port 1");
    assert!(
        matches!(
            e,
            Error::Backend {
                backend: "azure",
                retryable: true,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn limits_are_one_put_blob() {
    let limits = AzureBackend::limits();
    assert_eq!(limits.max_key_len, 1024);
    assert_eq!(
        limits.max_value_len as u64 + fencing_core::blob::FRAME_HEADER_LEN as u64,
        5000 << 20
    );
    assert_eq!(limits.max_token, t(u64::MAX));
    assert!(matches!(
        limits.check_write("k", t(1), limits.max_value_len + 1),
        Err(Error::InvalidInput { .. })
    ));
}

#[test]
fn debug_output_hides_the_sas() {
    let backend =
        emulator::backend("http://127.0.0.1:10000/devstoreaccount1", "c", None).expect("a backend");
    let shown = format!("{backend:?}");
    assert!(
        shown.contains("/devstoreaccount1/c") && !shown.contains("sig="),
        "{shown}"
    );
}

/// A plain Put Blob of bytes that carry no frame.
async fn put_foreign(backend: &AzureBackend, key: &str, body: &'static [u8]) {
    backend
        .container()
        .blob_client(key)
        .upload(
            <RequestContent<Bytes, azure_core::http::NoFormat> as From<Bytes>>::from(
                Bytes::from_static(body),
            ),
            None,
        )
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
        &AzureStore::new(backend.clone()),
        &AzureStore::new(backend.clone()).adopt_unfenced(true),
        &fencing_testkit::unique_name("foreign"),
        |key, body| {
            let be = be.clone();
            async move { put_foreign(&be, &key, body).await }
        },
    )
    .await;
}

/// Set Blob Metadata and Set Blob Properties change the ETag but not the
/// body: the mark, in the body, survives them; a plain overwrite cannot let
/// a zombie in either.
#[tokio::test]
async fn metadata_only_changes_and_foreign_overwrites_cannot_lower_the_mark() {
    let Some(backend) = backend().await else {
        return;
    };
    let store = AzureStore::new(backend.clone());

    let key = fencing_testkit::unique_name("set-metadata");
    let blob = backend.container().blob_client(&key);
    tampering_cannot_lower_the_mark(
        &store,
        &key,
        "Set Blob Metadata zeroing the token hint",
        AfterTampering::MarkKept,
        || async move {
            let metadata = std::collections::HashMap::from([
                ("fencing_token".to_owned(), "0".to_owned()),
                ("owner".to_owned(), "someone else".to_owned()),
            ]);
            blob.set_metadata(&metadata, None)
                .await
                .expect("set metadata");
        },
    )
    .await;

    let key = fencing_testkit::unique_name("clear-metadata");
    let blob = backend.container().blob_client(&key);
    tampering_cannot_lower_the_mark(
        &store,
        &key,
        "Set Blob Metadata clearing all metadata",
        AfterTampering::MarkKept,
        || async move {
            blob.set_metadata(&std::collections::HashMap::new(), None)
                .await
                .expect("clear metadata");
        },
    )
    .await;

    let key = fencing_testkit::unique_name("set-properties");
    let blob = backend.container().blob_client(&key);
    tampering_cannot_lower_the_mark(
        &store,
        &key,
        "Set Blob Properties",
        AfterTampering::MarkKept,
        || async move {
            let options = azure_storage_blob::models::BlobClientSetPropertiesOptions {
                blob_content_type: Some("text/plain".to_owned()),
                ..Default::default()
            };
            blob.set_properties(Some(options))
                .await
                .expect("set properties");
        },
    )
    .await;

    let key = fencing_testkit::unique_name("overwrite");
    let (be, k) = (backend.clone(), key.clone());
    tampering_cannot_lower_the_mark(
        &store,
        &key,
        "a plain Put Blob by a program that knows nothing of fencing",
        AfterTampering::Foreign,
        || async move { put_foreign(&be, &k, b"plain bytes").await },
    )
    .await;
}

/// A lease held on the blob answers 412 `LeaseIdMissing`: not a lost race.
/// Reading again cannot help, so the write fails at once with a typed,
/// non-retryable error instead of 32 futile attempts.
#[tokio::test]
async fn a_lease_on_the_blob_is_a_permanent_error_not_a_lost_race() {
    let Some(backend) = backend().await else {
        return;
    };
    let store = AzureStore::new(backend.clone());
    let key = fencing_testkit::unique_name("leased");
    store.put(&key, "v".into(), t(1)).await.unwrap();
    let blob = backend.container().blob_client(&key);
    blob.acquire_lease(-1, None).await.expect("acquire a lease");
    let started = Instant::now();
    let err = AzureStore::new(backend.clone())
        .put(&key, "w".into(), t(2))
        .await
        .expect_err("the lease blocks the write");
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
    assert!(
        format!("{:?}", std::error::Error::source(&err)).contains("LeaseIdMissing"),
        "{err:?}"
    );
    println!("refused in {:?}: {err}", started.elapsed());
    let got = store.get(&key).await.unwrap().expect("value");
    assert_eq!((got.value, got.token), (Bytes::from("v"), t(1)));
    let _ = blob
        .break_lease(Some(
            azure_storage_blob::models::BlobClientBreakLeaseOptions {
                break_period: Some(0),
                ..Default::default()
            },
        ))
        .await;
}

/// The Azure pipeline retries a request whose connection broke; if the
/// first try was applied and its answer lost, the retry fails its
/// precondition. Our writes go through a client without retries.
#[tokio::test]
async fn a_conditional_write_whose_answer_is_lost_is_an_unknown_outcome() {
    let Some(backend) = backend().await else {
        return;
    };
    let endpoint = AZURE.endpoint();
    let authority = endpoint
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("host:port");
    let proxy = AnswerDroppingProxy::start(authority.parse().expect("a host:port")).await;
    let proxied = endpoint.replacen(authority, &proxy.addr().to_string(), 1);
    let through_proxy =
        AzureStore::new(emulator::backend(&proxied, container_name(), None).expect("a backend"));
    let direct = AzureStore::new(backend.clone());
    let key = fencing_testkit::unique_name("lost-answer");
    let status = fencing_testkit::blob::a_lost_answer_is_an_unknown_outcome(
        Arc::new(through_proxy),
        &direct,
        &proxy,
        b"PUT ",
        &key,
    )
    .await;
    println!("lost answer: {status}");
}
