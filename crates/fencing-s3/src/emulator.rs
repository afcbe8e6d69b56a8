//! Pointing the SDK at a local S3 emulator, for tests (feature `emulator`).
//!
//! The standard emulator is moto (`integration/services.sh up s3`, or
//! `docker compose up s3`) on `http://127.0.0.1:9000`; any S3-compatible
//! server that accepts static test keys and path-style addressing works.
//! Failures are [`fencing_core::Error`]s, so a test can tell "the emulator is not
//! running" ([`Error::Backend`] with `retryable: true`) from a real problem.
//!
//! ```no_run
//! # async fn demo() -> fencing_core::Result<()> {
//! let store = fencing_s3::emulator::store("http://127.0.0.1:9000", "my-test-bucket").await?;
//! # Ok(()) }
//! ```

use aws_sdk_s3::Client;
use aws_sdk_s3::error::DisplayErrorContext;
use fencing_core::{Error, Result};

use crate::{S3Backend, S3Store};

/// A client for the emulator at `endpoint`: static test credentials, region
/// `us-east-1`, path-style addressing, the SDK's default retries (what
/// `S3Config::from_url("s3://B?endpoint=…&emulator=true")` builds).
pub fn client(endpoint: &str) -> Client {
    let sdk = fencing_aws::emulator_config(endpoint, None, None);
    Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk)
            .force_path_style(true)
            .build(),
    )
}

/// Creates `bucket`; one this account owns already is fine.
///
/// # Errors
/// [`Error::Backend`] from backend `"s3"`: retryable when no answer came
/// back (nothing listening, a timeout) or the server asked to retry, not
/// retryable when it refused (a bucket owned by someone else, a bad name,
/// wrong credentials). The SDK error is the `source()`.
pub async fn create_bucket(client: &Client, bucket: &str) -> Result<()> {
    let Err(e) = client.create_bucket().bucket(bucket).send().await else {
        return Ok(());
    };
    if e.as_service_error()
        .is_some_and(|s| s.is_bucket_already_owned_by_you())
    {
        tracing::debug!(bucket, "bucket exists already; reusing it");
        return Ok(());
    }
    let retryable = match e.raw_response().map(|r| r.status().as_u16()) {
        None => true,
        Some(status) => status == 429 || status >= 500,
    };
    tracing::debug!(bucket, retryable, error = %DisplayErrorContext(&e), "cannot create bucket");
    Err(Error::backend("s3", retryable, e))
}

/// A fenced store on `bucket` at the emulator at `endpoint`, creating the
/// bucket if needed: [`client`], then [`create_bucket`].
///
/// # Errors
/// As [`create_bucket`].
pub async fn store(endpoint: &str, bucket: &str) -> Result<S3Store> {
    let client = client(endpoint);
    create_bucket(&client, bucket).await?;
    Ok(S3Backend::new(client, bucket)
        .with_endpoint(Some(endpoint))
        .into_store())
}
