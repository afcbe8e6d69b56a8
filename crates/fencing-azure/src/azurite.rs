//! Pointing the client at Azurite, the local Azure Storage emulator, for
//! tests (feature `azurite`).
//!
//! The standard emulator is Azurite (`integration/services.sh up azurite`,
//! or `docker compose up azurite`) with its blob service on
//! `http://127.0.0.1:10000/devstoreaccount1`. The client library has no
//! Shared Key credential, so the well-known development account is reached
//! with an account SAS signed here (HMAC-SHA256 over the account key).
//! Failures are [`fencing_core::Error`]s, so a test can tell "the emulator is not
//! running" ([`Error::Backend`] with `retryable: true`) from a real problem.
//!
//! ```no_run
//! # async fn demo() -> fencing_core::Result<()> {
//! let store = fencing_azure::azurite::store(
//!     "http://127.0.0.1:10000/devstoreaccount1",
//!     "my-test-container",
//! )
//! .await?;
//! # Ok(()) }
//! ```

use azure_core::error::ErrorKind;
use azure_core::http::{ClientOptions, FixedRetryOptions, RetryOptions, Url};
use azure_storage_blob::{BlobContainerClient, BlobContainerClientOptions};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use fencing_core::{Error, Result};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{AzureBackend, AzureStore};

/// Azurite's development account.
pub const DEV_ACCOUNT: &str = "devstoreaccount1";

/// Its published key (the same in every Azurite; not a secret).
pub const DEV_ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The query string of an account SAS for the blob service of `account`,
/// signed with its base64 key: read, write, delete, list, add and create on
/// services, containers and objects, over http or https, until 2099.
///
/// # Errors
/// [`Error::InvalidInput`] if `key_base64` is not base64.
pub fn account_sas(account: &str, key_base64: &str) -> Result<String> {
    let (version, services, resource_types, permissions, expiry, protocol) = (
        "2022-11-02",
        "b",
        "sco",
        "rwdlac",
        "2099-01-01T00:00:00Z",
        "https,http",
    );
    // The account SAS string-to-sign for versions from 2020-12-06: start,
    // IP range and encryption scope are empty.
    let to_sign = format!(
        "{account}\n{permissions}\n{services}\n{resource_types}\n\n{expiry}\n\n{protocol}\n{version}\n\n"
    );
    let key = STANDARD
        .decode(key_base64)
        .map_err(|e| Error::invalid_input(format!("the account key is not base64: {e}")))?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key)
        .map_err(|e| Error::invalid_input(format!("unusable account key: {e}")))?;
    mac.update(to_sign.as_bytes());
    let signature = STANDARD.encode(mac.finalize().into_bytes());
    Ok(format!(
        "sv={version}&ss={services}&srt={resource_types}&sp={permissions}&se={}&spr={}&sig={}",
        encode(expiry),
        encode(protocol),
        encode(&signature)
    ))
}

/// Percent-encodes a query value (base64 and timestamps need no more).
fn encode(value: &str) -> String {
    value
        .chars()
        .map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '-' | '.' | '_' | '~' => c.to_string(),
            other => format!("%{:02X}", u32::from(other)),
        })
        .collect()
}

/// The URL of `container` under `endpoint` (`http://host:port/account`),
/// with an [`account_sas`] for `account`.
///
/// The SAS is a credential, and client errors may show the URL with it:
/// harmless for the development account, not for a real one.
///
/// # Errors
/// [`Error::InvalidInput`] for a key that is not base64 or a URL that does
/// not parse.
pub fn container_url(
    endpoint: &str,
    container: &str,
    account: &str,
    key_base64: &str,
) -> Result<Url> {
    let url = format!(
        "{}/{container}?{}",
        endpoint.trim_end_matches('/'),
        account_sas(account, key_base64)?
    );
    url.parse()
        .map_err(|e| Error::invalid_input(format!("{endpoint:?} is not a usable endpoint: {e}")))
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
    let url = container_url(endpoint, container, DEV_ACCOUNT, DEV_ACCOUNT_KEY)?;
    BlobContainerClient::new(url, None, options)
        .map_err(|e| Error::invalid_input(format!("cannot make a client for {endpoint:?}: {e}")))
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
    let url = container_url(endpoint, container, DEV_ACCOUNT, DEV_ACCOUNT_KEY)?;
    AzureBackend::new(url, None, options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sas_is_signed_and_encoded() {
        let sas = account_sas(DEV_ACCOUNT, DEV_ACCOUNT_KEY).unwrap();
        assert!(
            sas.starts_with("sv=2022-11-02&ss=b&srt=sco&sp=rwdlac&se=2099-01-01T00%3A00%3A00Z&spr=https%2Chttp&sig="),
            "{sas}"
        );
        // An HMAC-SHA256 signature is 32 bytes: 44 base64 characters, with
        // `+`, `/` and `=` percent-encoded.
        let sig = sas.rsplit("sig=").next().unwrap();
        assert!(!sig.contains(['+', '/', '=']), "{sig}");
        assert!(matches!(
            account_sas(DEV_ACCOUNT, "not base64!"),
            Err(Error::InvalidInput { .. })
        ));
        let url = container_url(
            "http://127.0.0.1:10000/devstoreaccount1/",
            "c",
            DEV_ACCOUNT,
            DEV_ACCOUNT_KEY,
        )
        .unwrap();
        assert_eq!(url.path(), "/devstoreaccount1/c");
    }
}
