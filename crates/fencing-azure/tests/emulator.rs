//! The object-store conformance suite of `fencing_testkit` (the store
//! contract, the zombie scenario, the history checker, a 16-writer race that
//! must lose preconditions) and the Azure-only cases (409 on create, one Put
//! Blob for large values, error classification, the SAS kept out of
//! `Debug`), against Azurite at `FENCING_AZURE_ENDPOINT` (default:
//! `integration/services.sh`'s Azurite at
//! `http://127.0.0.1:10000/devstoreaccount1`). One container per test run,
//! named at random, reached with an account SAS signed by
//! `fencing_azure::emulator`.

use std::collections::HashMap;
use std::time::Instant;

use azure_core::http::{ClientOptions, RequestContent, RetryOptions};
use azure_storage_blob::BlobContainerClientOptions;
use bytes::Bytes;
use fencing_azure::{AzureBackend, AzureStore, emulator};

use fencing_core::FencedStore;
use fencing_harness::env::{AZURE, Server};
use fencing_harness::object_store::{self as shared, Emulator, assert_backend_error, t};

mod suite {
    fencing_testkit::blob_store_conformance!(super::backend);
}

/// Azurite through `fencing_azure::emulator` (its development account).
struct Azurite;

impl Emulator for Azurite {
    type Backend = AzureBackend;
    const SERVER: Server = AZURE;
    const NAME: &'static str = "azure";

    async fn set_up(endpoint: &str, container: &str) -> fencing_core::Result<AzureBackend> {
        let store = emulator::store(endpoint, container).await?;
        Ok(store.backend().clone())
    }

    async fn backend_at(endpoint: &str, container: &str) -> AzureBackend {
        emulator::backend(endpoint, container, None).expect("a backend")
    }

    /// A plain Put Blob of bytes that carry no frame.
    async fn put_foreign(backend: AzureBackend, key: String, body: &'static [u8]) {
        backend
            .container()
            .blob_client(&key)
            .upload(
                <RequestContent<Bytes, azure_core::http::NoFormat> as From<Bytes>>::from(
                    Bytes::from_static(body),
                ),
                None,
            )
            .await
            .expect("plain upload");
    }

    async fn delete(backend: AzureBackend, key: String) {
        backend
            .container()
            .blob_client(&key)
            .delete(None)
            .await
            .expect("Delete Blob");
    }
}

/// A backend on this run's container (created if needed), or `None` when
/// the run asked to skip Azure. A server that does not answer fails the test.
async fn backend() -> Option<AzureBackend> {
    shared::backend::<Azurite>().await
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
    fencing_testkit::blob::conditional_writes_follow_the_version(&backend, &key, b"A").await;
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
    let Some((backend, store)) = shared::store::<Azurite>().await else {
        return;
    };
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
    let Some((missing, e)) = shared::a_missing_bucket_is_permanent::<Azurite>().await else {
        return;
    };
    assert!(
        format!("{:?}", std::error::Error::source(&e)).contains("ContainerNotFound"),
        "{e:?}"
    );
    assert_backend_error(missing.mark("k").await, "azure", false);
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
    shared::refused_connections_are_retryable(&store, "azure").await;
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
    shared::set_up_without_a_server_is_retryable::<Azurite>("http://127.0.0.1:1/devstoreaccount1")
        .await;
}

#[test]
fn limits_are_one_put_blob() {
    fencing_testkit::blob::assert_object_limits(AzureBackend::limits(), 1024, 5000 << 20);
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

#[tokio::test]
async fn objects_written_without_fencing_are_refused_unless_adopted() {
    shared::unfenced_objects_on::<Azurite>().await;
}

/// Set Blob Metadata and Set Blob Properties change the ETag but not the
/// body: the mark, in the body, survives them; a plain overwrite cannot let
/// a zombie in either.
#[tokio::test]
async fn metadata_only_changes_and_foreign_overwrites_cannot_lower_the_mark() {
    let Some((backend, store)) = shared::store::<Azurite>().await else {
        return;
    };

    let blob = |key: String| backend.container().blob_client(&key);
    let zeroed = HashMap::from([
        ("fencing_token".to_owned(), "0".to_owned()),
        ("owner".to_owned(), "someone else".to_owned()),
    ]);
    for (what, metadata) in [
        ("Set Blob Metadata zeroing the token hint", zeroed),
        ("Set Blob Metadata clearing all metadata", HashMap::new()),
    ] {
        shared::a_metadata_change_cannot_lower_the_mark(&store, what, |key| async move {
            let set = blob(key).set_metadata(&metadata, None).await;
            set.expect("set metadata");
        })
        .await;
    }
    shared::a_metadata_change_cannot_lower_the_mark(
        &store,
        "Set Blob Properties",
        |key| async move {
            let options = azure_storage_blob::models::BlobClientSetPropertiesOptions {
                blob_content_type: Some("text/plain".to_owned()),
                ..Default::default()
            };
            let set = blob(key).set_properties(Some(options)).await;
            set.expect("set properties");
        },
    )
    .await;
    shared::a_foreign_overwrite_cannot_lower_the_mark(&store, "Put Blob", |key, body| {
        Azurite::put_foreign(backend, key, body)
    })
    .await;
}

/// A lease held on the blob answers 412 `LeaseIdMissing`: not a lost race.
/// Reading again cannot help, so the write fails at once with a typed,
/// non-retryable error instead of 32 futile attempts.
#[tokio::test]
async fn a_lease_on_the_blob_is_a_permanent_error_not_a_lost_race() {
    let Some((backend, store)) = shared::store::<Azurite>().await else {
        return;
    };
    let key = fencing_testkit::unique_name("leased");
    store.put(&key, "v".into(), t(1)).await.unwrap();
    let blob = backend.container().blob_client(&key);
    blob.acquire_lease(-1, None).await.expect("acquire a lease");
    let started = Instant::now();
    let other = AzureStore::new(backend.clone());
    let err = assert_backend_error(other.put(&key, "w".into(), t(2)).await, "azure", false);
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
    shared::a_lost_answer_on::<Azurite>(b"PUT ").await;
}

/// A SAS whose signature Azurite does not accept, and a signed SAS to a
/// port nobody listens on: the client's messages carry the request URL,
/// `sig=` and all; no link of the error chain may show it.
#[tokio::test]
async fn a_sas_never_shows_in_an_error_chain() {
    if backend().await.is_none() {
        return;
    }
    const SIG: &str = "c2lnbmF0dXJlLXRoYXQtbXVzdC1ub3Qtc2hvdw";
    let sas = format!(
        "sv=2023-11-03%26ss=b%26srt=sco%26sp=rwdlac%26se=2099-01-01T00:00:00Z%26spr=https,http%26sig={SIG}"
    );
    let container = fencing_harness::object_store::run_bucket("azure");
    let url = format!("az://{container}?endpoint={}&sas={sas}", AZURE.endpoint());
    let store = fencing_azure::AzureConfig::from_url(&url)
        .expect("URL")
        .connect_store()
        .await
        .expect("store");
    let err = store
        .put("k", "v".into(), t(1))
        .await
        .expect_err("a signature the account does not accept");
    fencing_harness::env::assert_no_secret("refused signature", &err, SIG);
    assert!(
        matches!(
            err,
            fencing_core::Error::Unauthenticated {
                backend: "azure",
                ..
            }
        ),
        "{err:?}"
    );

    // Refused: the error's text is where the client puts the request URL.
    let options = BlobContainerClientOptions {
        client_options: ClientOptions {
            retry: RetryOptions::none(),
            ..Default::default()
        },
        ..Default::default()
    };
    let nowhere = AzureStore::new(
        emulator::backend(
            "http://127.0.0.1:1/devstoreaccount1",
            "nowhere",
            Some(options),
        )
        .expect("a backend"),
    );
    let err = nowhere
        .put("k", "v".into(), t(1))
        .await
        .expect_err("refused");
    let shown = format!("{err:?} {}", err.chain());
    assert!(
        shown.contains("sig=***") || !shown.contains("sig="),
        "{shown}"
    );
    assert!(
        !shown
            .split("sig=")
            .skip(1)
            .any(|after| !after.starts_with("***")),
        "a signature shows: {shown}"
    );
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
        Some(Arc::new(object_store::issuer::<super::Azurite>().await?))
    }

    fencing_testkit::issuer_conformance!(issuer, IssuerProfile::with_ttl(Duration::from_secs(1)));

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bucket_issuer_cases() {
        object_store::bucket_issuer_cases::<super::Azurite>().await;
    }
}

/// The bucket issuer judges a lease's age by the server's clock alone:
/// `modified` from `Last-Modified`, `server_now` from the `Date` of every
/// answer, a 404, a 409 and a 412 included.
#[tokio::test]
async fn reads_carry_the_servers_modified_time_and_answers_feed_its_clock() {
    use fencing_core::adapter::blob::{
        BlobBackend, BlobVersion, BlobWrite, Precondition, StoredObject, WriteOutcome,
    };
    use std::time::Duration;

    if backend().await.is_none() {
        return;
    }
    let key = fencing_testkit::unique_name("server-clock");
    let fresh =
        async || Azurite::backend_at(&AZURE.endpoint(), &shared::run_bucket(Azurite::NAME)).await;
    let backend = fresh().await;
    assert_eq!(backend.server_now(), None, "no answer seen yet");
    let write =
        |precondition| BlobWrite::new(Bytes::from_static(b"body"), shared::meta(1), precondition);
    let written = backend
        .write(&key, write(Precondition::Absent))
        .await
        .expect("write");
    assert!(matches!(written, WriteOutcome::Written(_)), "{written:?}");
    assert!(backend.server_now().is_some(), "a write's Date");
    let read = |object: Option<StoredObject>| {
        let modified = object.expect("the blob").modified.expect("modified");
        let now = backend.server_now().expect("server_now after a read");
        let age = now
            .duration_since(modified)
            .expect("server_now behind modified");
        assert!(age < Duration::from_secs(10), "{age:?}");
    };
    read(backend.read(&key).await.expect("read"));
    read(backend.read_prefix(&key, 4).await.expect("ranged read"));

    let absent = fresh().await;
    assert!(absent.read("no-such-key").await.expect("read").is_none());
    assert!(absent.server_now().is_some(), "a 404 carries a Date too");
    let exists = fresh().await;
    let outcome = exists
        .write(&key, write(Precondition::Absent))
        .await
        .expect("write");
    assert!(
        matches!(outcome, WriteOutcome::PreconditionFailed),
        "{outcome:?}"
    );
    assert!(exists.server_now().is_some(), "a 409 carries a Date too");
    let stale = fresh().await;
    let other = Precondition::Matches(BlobVersion::new("\"0x8D000000000000\""));
    let outcome = stale.write(&key, write(other)).await.expect("write");
    assert!(
        matches!(outcome, WriteOutcome::PreconditionFailed),
        "{outcome:?}"
    );
    assert!(stale.server_now().is_some(), "a 412 carries a Date too");
    let _ = backend.container().blob_client(&key).delete(None).await;
}
