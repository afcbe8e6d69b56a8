//! Setting up Azurite, the local Azure Storage emulator, for tests (feature
//! `emulator`).
//!
//! The standard emulator is Azurite (`integration/services.sh up azurite`,
//! or `docker compose up azurite`) with its blob service on
//! `http://127.0.0.1:10000/devstoreaccount1`, reached with its well-known
//! development account: what [`AzureConfig`] does with `emulator=true`.
//! This module adds container creation and one-call stores. Failures are
//! [`fencing_core::Error`]s, so a test can tell "the emulator is not
//! running" ([`Error::Backend`] with `retryable: true`) from a real problem.
//!
//! ```no_run
//! # async fn demo() -> fencing_core::Result<()> {
//! let store = fencing_azure::emulator::store(
//!     "http://127.0.0.1:10000/devstoreaccount1",
//!     "my-test-container",
//! )
//! .await?;
//! # Ok(()) }
//! ```

use azure_core::error::ErrorKind;
use azure_core::http::{ClientOptions, FixedRetryOptions, RetryOptions};
use azure_storage_blob::{BlobContainerClient, BlobContainerClientOptions};
use fencing_core::{Error, Result};

use crate::{AzureBackend, AzureConfig, AzureStore};

/// Azurite's development account.
pub const DEV_ACCOUNT: &str = crate::config::EMULATOR_ACCOUNT;

/// Its published key (the same in every Azurite; not a secret).
pub const DEV_ACCOUNT_KEY: &str = crate::config::EMULATOR_ACCOUNT_KEY;

fn config(endpoint: &str, container: &str) -> AzureConfig {
    AzureConfig::new(container)
        .with_endpoint(endpoint)
        .with_emulator(true)
}

/// A client for `container` of the [`DEV_ACCOUNT`] at `endpoint`, with the
/// client's default options unless `options` are given (a retry policy,
/// say).
///
/// # Errors
/// [`Error::InvalidInput`] for an endpoint that is not a URL.
pub fn container_client(
    endpoint: &str,
    container: &str,
    options: Option<BlobContainerClientOptions>,
) -> Result<BlobContainerClient> {
    let (url, token) = config(endpoint, container).container_url()?;
    BlobContainerClient::new(url, token, options).map_err(|e| {
        Error::invalid_input(format!(
            "cannot make a client for {:?}: {e}",
            fencing_core::redact(endpoint)
        ))
    })
}

/// Creates the container `client` points at; one that exists already is
/// fine.
///
/// # Errors
/// [`Error::Backend`] from backend `"azure"`: retryable when no answer came
/// back (nothing listening, a dropped connection) or the server failed, not
/// retryable when it refused (a bad name, a wrong key). The client error is
/// the `source()`.
pub async fn create_container(client: &BlobContainerClient) -> Result<()> {
    let Err(e) = client.create(None).await else {
        return Ok(());
    };
    let retryable = match e.kind() {
        ErrorKind::HttpResponse { error_code, .. }
            if error_code.as_deref() == Some("ContainerAlreadyExists") =>
        {
            tracing::debug!("container exists already; reusing it");
            return Ok(());
        }
        ErrorKind::HttpResponse { status, .. } => {
            let status = u16::from(*status);
            status == 429 || status >= 500
        }
        ErrorKind::Connection | ErrorKind::Io => true,
        _ => false,
    };
    tracing::debug!(retryable, error = %e, "cannot create container");
    Err(Error::backend("azure", retryable, e))
}

/// A fenced store on `container` of the [`DEV_ACCOUNT`] at `endpoint`,
/// creating the container if needed: [`container_client`], then
/// [`create_container`].
///
/// The container is created with three quick retries, so a missing
/// emulator is reported within a second or so (the client's default policy
/// takes over a minute to give up on a refused connection); the store's
/// client has the default options.
///
/// # Errors
/// As [`container_client`] and [`create_container`].
pub async fn store(endpoint: &str, container: &str) -> Result<AzureStore> {
    let quick = BlobContainerClientOptions {
        client_options: ClientOptions {
            retry: RetryOptions::fixed(FixedRetryOptions {
                delay: azure_core::time::Duration::milliseconds(200),
                max_retries: 3,
                max_total_elapsed: azure_core::time::Duration::seconds(5),
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    create_container(&container_client(endpoint, container, Some(quick))?).await?;
    Ok(backend(endpoint, container, None)?.into_store())
}

/// A backend on `container` of the [`DEV_ACCOUNT`] at `endpoint`: reads
/// with `options` (the client's defaults if `None`), writes without retries.
///
/// # Errors
/// [`Error::InvalidInput`] for an endpoint that is not a URL.
pub fn backend(
    endpoint: &str,
    container: &str,
    options: Option<BlobContainerClientOptions>,
) -> Result<AzureBackend> {
    let mut config = config(endpoint, container);
    if let Some(options) = options {
        config = config.with_options(options);
    }
    config.backend()
}
