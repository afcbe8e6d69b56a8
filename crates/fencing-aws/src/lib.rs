#![doc = include_str!("../README.md")]

mod date;
mod triage;

pub use date::ObserveDate;
pub use triage::{Unanswered, unanswered};

use std::path::{Path, PathBuf};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_smithy_http_client::tls;
use aws_types::sdk_config::SharedHttpClient;
use fencing_core::tls::TlsOptions;
use fencing_core::{Error, Result};

/// The access key and secret of an emulator (`emulator=true`): moto takes
/// any.
pub const EMULATOR_KEY: &str = "test";

/// The region when neither the URL, `AWS_REGION` nor the profile names one.
pub const DEFAULT_REGION: &str = "us-east-1";

/// How one adapter reaches AWS (or an emulator): what its URL and setters
/// said.
#[derive(Clone, Debug, Default)]
pub struct AwsOptions {
    /// What is being opened, for messages: `s3://BUCKET`, `dynamodb://TABLE`.
    pub target: String,
    /// `region=`, else AWS's chain, else [`DEFAULT_REGION`].
    pub region: Option<String>,
    /// `endpoint=`, else `AWS_ENDPOINT_URL_*` / the profile's, else AWS.
    pub endpoint: Option<String>,
    /// Credentials set in code, instead of AWS's chain.
    pub credentials: Option<Credentials>,
    /// `sslrootcert=`: trust this CA file instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// `emulator=true`: the emulator's test keys at `endpoint`.
    pub emulator: bool,
}

/// The SDK configuration for `options`, and the endpoint it talks to
/// (`None`: AWS itself) as the SDK resolved it, for `verify`'s transport
/// check. A service's config builds on it (`aws_sdk_s3::config::Builder::from`).
///
/// With `emulator`, the [`EMULATOR_KEY`]s at `endpoint`; otherwise AWS's
/// credential chain, **checked now**: no credentials is an error naming
/// where they are looked for and `emulator=true`, never a silent fallback
/// to test keys.
///
/// # Errors
/// [`Error::InvalidInput`] without credentials, for a CA file that cannot
/// be read or holds no certificate, or `sslrootcert=` with a plaintext
/// endpoint.
pub async fn sdk_config(options: &AwsOptions) -> Result<(SdkConfig, Option<String>)> {
    require_https(options.ca_file.as_deref(), options.endpoint.as_deref())?;
    let http = options.ca_file.as_deref().map(https_client).transpose()?;
    if options.emulator {
        let endpoint = options.endpoint.clone().unwrap_or_default();
        let config = emulator_config(&endpoint, options.region.as_deref(), http);
        return Ok((config, Some(endpoint)));
    }
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(http) = http {
        loader = loader.http_client(http);
    }
    if let Some(region) = &options.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(endpoint) = &options.endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    if let Some(credentials) = &options.credentials {
        loader = loader.credentials_provider(credentials.clone());
    }
    let sdk = loader.load().await;
    let found = match sdk.credentials_provider() {
        Some(provider) => provider
            .provide_credentials()
            .await
            .map(drop)
            .map_err(|e| e.to_string()),
        None => Err("no credentials provider".to_owned()),
    };
    if let Err(why) = found {
        return Err(Error::invalid_input(format!(
            "no AWS credentials for {} ({why}): set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, \
             AWS_PROFILE or an instance role; for a local emulator add emulator=true to the URL",
            options.target
        )));
    }
    let sdk = match sdk.region() {
        Some(_) => sdk,
        None => sdk
            .into_builder()
            .region(Region::new(DEFAULT_REGION))
            .build(),
    };
    // The endpoint may come from AWS_ENDPOINT_URL or the profile.
    let endpoint = sdk.endpoint_url().map(str::to_owned);
    require_https(options.ca_file.as_deref(), endpoint.as_deref())?;
    Ok((sdk, endpoint))
}

/// An emulator's SDK configuration: the [`EMULATOR_KEY`]s at `endpoint`,
/// `region` or [`DEFAULT_REGION`], the SDK's default retries (a write that
/// must not be retried turns them off itself), and `http` (a CA of its
/// own) if given.
pub fn emulator_config(
    endpoint: &str,
    region: Option<&str>,
    http: Option<SharedHttpClient>,
) -> SdkConfig {
    let mut config = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.unwrap_or(DEFAULT_REGION).to_owned()))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            EMULATOR_KEY,
            EMULATOR_KEY,
            None,
            None,
            "fencing-emulator",
        )))
        .endpoint_url(endpoint);
    if let Some(http) = http {
        config = config.http_client(http);
    }
    config.build()
}

/// `sslrootcert=` is a CA for TLS: a plaintext endpoint would never use
/// it, and the caller meant TLS. (No endpoint: AWS itself, over HTTPS.)
///
/// # Errors
/// [`Error::InvalidInput`] for a CA file with an `http://` endpoint.
pub fn require_https(ca_file: Option<&Path>, endpoint: Option<&str>) -> Result<()> {
    match endpoint {
        Some(e) if ca_file.is_some() && !e.starts_with("https://") => Err(Error::invalid_input(
            "sslrootcert= is for an https:// endpoint; this one is plaintext",
        )),
        _ => Ok(()),
    }
}

/// The SDK's own HTTPS client (rustls on aws-lc-rs), trusting the CA
/// certificates in `ca_file` instead of the system roots, as `sslrootcert`
/// means everywhere.
///
/// # Errors
/// [`Error::InvalidInput`] naming the file when it cannot be read or holds
/// no certificate.
pub fn https_client(ca_file: &Path) -> Result<SharedHttpClient> {
    let pem = TlsOptions::new()
        .with_ca_file(ca_file)
        .read_ca()?
        .unwrap_or_default();
    let trust = tls::TrustStore::empty().with_pem_certificate(pem);
    let context = tls::TlsContext::builder()
        .with_trust_store(trust)
        .build()
        .map_err(|e| Error::invalid_input(format!("CA file {}: {e}", ca_file.display())))?;
    Ok(aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::AwsLc,
        ))
        .tls_context(context)
        .build_https())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_emulator_gets_the_test_keys_and_the_default_region() {
        let options = AwsOptions {
            target: "s3://b".into(),
            endpoint: Some("http://127.0.0.1:9000".into()),
            emulator: true,
            ..AwsOptions::default()
        };
        let (sdk, endpoint) = sdk_config(&options).await.unwrap();
        assert_eq!(endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(sdk.region().map(Region::as_ref), Some(DEFAULT_REGION));
        let keys = sdk
            .credentials_provider()
            .unwrap()
            .provide_credentials()
            .await
            .unwrap();
        assert_eq!(keys.access_key_id(), EMULATOR_KEY);
    }

    #[tokio::test]
    async fn a_ca_file_with_a_plaintext_endpoint_is_refused() {
        let options = AwsOptions {
            target: "s3://b".into(),
            endpoint: Some("http://127.0.0.1:9000".into()),
            emulator: true,
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..AwsOptions::default()
        };
        let e = sdk_config(&options).await.unwrap_err().to_string();
        assert!(e.contains("plaintext"), "{e}");
    }

    #[tokio::test]
    async fn an_unreadable_ca_file_is_named() {
        let options = AwsOptions {
            target: "s3://b".into(),
            endpoint: Some("https://127.0.0.1:9443".into()),
            emulator: true,
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..AwsOptions::default()
        };
        let e = sdk_config(&options).await.unwrap_err().to_string();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }
}
