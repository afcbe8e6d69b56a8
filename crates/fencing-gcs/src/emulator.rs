//! Pointing the client at a local GCS emulator, for tests (feature
//! `emulator`).
//!
//! The standard emulator is fake-gcs-server (`integration/services.sh up
//! gcs`, or `docker compose up gcs`) on `http://127.0.0.1:4443`, reached
//! with anonymous credentials. The `Storage` client creates buckets over
//! gRPC only, so [`create_bucket`] uses the emulator's JSON API. Failures
//! are [`fencing_core::Error`]s, so a test can tell "the emulator is not running"
//! ([`Error::Backend`] with `retryable: true`) from a real problem.
//!
//! ```no_run
//! # async fn demo() -> fencing_core::Result<()> {
//! let store = fencing_gcs::emulator::store("http://127.0.0.1:4443", "my-test-bucket").await?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use fencing_core::{Error, Result};
use google_cloud_auth::credentials::anonymous;
use google_cloud_storage::builder::storage::ClientBuilder;
use google_cloud_storage::client::Storage;

use crate::{GcsBackend, GcsStore};

/// How long bucket creation may take before it counts as no answer.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// A client builder for the emulator at `endpoint`, with anonymous
/// credentials; add your own options (a retry policy, say) and `build()`.
pub fn builder(endpoint: &str) -> ClientBuilder {
    Storage::builder()
        .with_endpoint(endpoint)
        .with_credentials(anonymous::Builder::new().build())
}

/// A client for the emulator at `endpoint`, with anonymous credentials and
/// the client's default retry policy (which retries a refused connection
/// for a long time: see [`builder`] to set another).
///
/// # Errors
/// [`Error::Backend`] (not retryable) if the client cannot be built.
pub async fn client(endpoint: &str) -> Result<Storage> {
    builder(endpoint)
        .build()
        .await
        .map_err(|e| Error::backend("gcs", false, e))
}

/// Creates `bucket` over the emulator's JSON API
/// (`POST /storage/v1/b`); one that exists already is fine.
///
/// # Errors
/// [`Error::InvalidInput`] for a bucket name with characters GCS does not
/// allow. [`Error::Backend`] from backend `"gcs"`: retryable when no answer
/// came back (nothing listening, a timeout) or the server failed, not
/// retryable when it refused the request.
pub async fn create_bucket(endpoint: &str, bucket: &str) -> Result<()> {
    let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c);
    if bucket.is_empty() || !bucket.chars().all(valid) {
        return Err(Error::invalid_input(format!(
            "{bucket:?} is not a GCS bucket name (lowercase letters, digits, '-', '_', '.')"
        )));
    }
    let url = format!(
        "{}/storage/v1/b?project=test",
        endpoint.trim_end_matches('/')
    );
    let http = reqwest::Client::builder()
        .timeout(CREATE_TIMEOUT)
        .build()
        .map_err(|e| Error::backend("gcs", false, e))?;
    let response = http
        .post(&url)
        .header("content-type", "application/json")
        .body(format!("{{\"name\":\"{bucket}\"}}"))
        .send()
        .await
        .map_err(|e| Error::backend("gcs", true, e))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    if status == reqwest::StatusCode::CONFLICT {
        tracing::debug!(bucket, "bucket exists already; reusing it");
        return Ok(());
    }
    let body = response.text().await.unwrap_or_default();
    let retryable = status == reqwest::StatusCode::TOO_MANY_REQUESTS || status.is_server_error();
    tracing::debug!(bucket, %status, "cannot create bucket");
    Err(Error::backend(
        "gcs",
        retryable,
        format!(
            "creating bucket {bucket} at {url}: {status} {}",
            body.trim()
        ),
    ))
}

/// A fenced store on `bucket` at the emulator at `endpoint`, creating the
/// bucket if needed: [`create_bucket`], then [`client`].
///
/// # Errors
/// As [`create_bucket`] and [`client`].
pub async fn store(endpoint: &str, bucket: &str) -> Result<GcsStore> {
    create_bucket(endpoint, bucket).await?;
    Ok(GcsBackend::new(client(endpoint).await?, bucket)
        .with_endpoint(Some(endpoint))
        .into_store())
}
