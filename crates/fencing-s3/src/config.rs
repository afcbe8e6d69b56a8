//! [`S3Config`]: an S3 store from a URL, the environment or setters.

use std::fmt;
use std::path::PathBuf;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::Credentials;
use fencing_aws::AwsOptions;
#[cfg(doc)]
use fencing_core::Error;
use fencing_core::Result;
use fencing_core::adapter::blob::config::{
    ADOPT_UNFENCED, EMULATOR, ENDPOINT, LEASE_EXPIRY, LEASE_PREFIX, ObjectStoreConfig,
    ObjectStoreKind,
};
use fencing_core::adapter::descriptor::{self, Descriptor, OptionKind, UrlOption};

use crate::{S3Backend, S3Issuer, S3Store};

/// The S3 backend, as the registry, `fence --help` and the README see it.
pub const BACKEND: Descriptor = Descriptor {
    name: "s3",
    title: "S3",
    crate_name: "fencing-s3",
    features: &["s3"],
    schemes: &["s3"],
    shape: "s3://BUCKET",
    options: &[
        ENDPOINT,
        EMULATOR,
        ADOPT_UNFENCED,
        LEASE_PREFIX,
        LEASE_EXPIRY,
        UrlOption::new(
            "region",
            OptionKind::Text,
            "the region (else AWS_REGION, the profile, us-east-1)",
        ),
        UrlOption::new(
            "path_style",
            OptionKind::Bool,
            "path-style addressing (the default with endpoint=)",
        ),
        UrlOption::new(
            "sslrootcert",
            OptionKind::Path,
            "trust the CA certificates in this PEM file instead of the system roots (an https:// endpoint with a private CA)",
        ),
    ],
    // sslrootcert= is its own option above: the endpoint's scheme says
    // whether TLS is used, and the certificate is always checked.
    tls_modes: &[],
    check: |url| S3Config::from_url(url).map(drop),
    open_issuer: Some(|url| {
        Box::pin(
            async move { descriptor::issuer(S3Config::from_url(&url)?.connect_issuer().await?) },
        )
    }),
    open_store: Some(|url| {
        Box::pin(async move { descriptor::store(S3Config::from_url(&url)?.connect_store().await?) })
    }),
};

/// The `s3://` URL's variables and messages.
const KIND: ObjectStoreKind = ObjectStoreKind {
    backend: &BACKEND,
    noun: "bucket",
    env_prefix: "FENCING_S3",
    emulator_endpoint: "the emulator's address",
};

/// How to reach one S3 bucket: parsed from `s3://BUCKET?…`, read from the
/// environment, or set with the `with_*` setters;
/// [`connect_store`](Self::connect_store) opens the store on it and
/// [`connect_issuer`](Self::connect_issuer) the bucket issuer.
///
/// Credentials and region follow AWS's default chain (`aws-config`): the
/// `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN` variables,
/// `AWS_PROFILE` and the shared config files, web identity, the ECS and EC2
/// instance roles (SSO profiles and `credential_process` are not compiled
/// in: pass [`with_credentials`](Self::with_credentials) or build your own
/// client for those). No credentials found is an error when connecting, never
/// a fallback to an emulator's keys: those are used only with `emulator=true`.
///
/// | URL option | meaning |
/// | --- | --- |
/// | `region=R` | the region (else `AWS_REGION`, the profile, `us-east-1`) |
/// | `endpoint=URL` | an S3-compatible endpoint (else `AWS_ENDPOINT_URL_S3`/`AWS_ENDPOINT_URL`, or AWS) |
/// | `path_style=true` | path-style addressing (the default with `endpoint=`) |
/// | `emulator=true` | a local emulator's test keys (`test`/`test`); needs `endpoint=` |
/// | `adopt_unfenced=true` | take over objects written without fencing at mark 0 |
/// | `lease_expiry=server-clocks-agree` | the bucket lease also judges a held record dead by the `Date` of a read against its `Last-Modified`: assumes every server node's clock agrees with the one that stamped it (default `waiter-clock`: no clocks compared) |
/// | `sslrootcert=PATH` | trust the CA certificates in PATH (PEM) instead of the system roots: an `https://` endpoint with a private CA (MinIO, an on-premise S3) |
///
/// The endpoint's scheme says whether TLS is used (AWS itself: always);
/// the certificate and host name are always checked.
///
/// ```
/// let config = fencing_s3::S3Config::from_url(
///     "s3://my-test-bucket?endpoint=http://127.0.0.1:9000&emulator=true",
/// )?;
/// assert_eq!(config.bucket(), "my-test-bucket");
/// assert!(fencing_s3::S3Config::from_url("s3://b?endpont=x").is_err());
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct S3Config {
    common: ObjectStoreConfig,
    region: Option<String>,
    path_style: Option<bool>,
    credentials: Option<Credentials>,
    ca_file: Option<PathBuf>,
}

impl fmt::Debug for S3Config {
    /// Hides the credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("S3Config");
        self.common.debug_fields("bucket", &mut d);
        d.field("region", &self.region)
            .field("path_style", &self.path_style)
            .field("credentials", &self.credentials.as_ref().map(|_| "***"))
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

impl S3Config {
    fencing_core::object_store_config_methods! {
        common, bucket, KIND;
        /// A config for `bucket` with AWS's default chain and nothing else set.
        new;
        /// From the environment: `FENCING_S3_BUCKET` (required),
        /// `FENCING_S3_ENDPOINT`, `FENCING_S3_EMULATOR=true` and
        /// `FENCING_S3_ADOPT_UNFENCED=true`; region, credentials and endpoint
        /// otherwise come from AWS's own variables and files when
        /// connecting.
        ///
        /// # Errors
        /// [`Error::InvalidInput`] without `FENCING_S3_BUCKET`, or for a
        /// variable that is not a strict boolean.
        from_env;
    }

    /// Parses `s3://BUCKET[?region=R&endpoint=URL&path_style=B&emulator=B&adopt_unfenced=B&sslrootcert=PATH]`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for another scheme, no bucket, a path, an
    /// unknown option (naming the known ones), a value that is not a strict
    /// boolean, or `emulator=true` without `endpoint=`.
    pub fn from_url(url: &str) -> Result<Self> {
        let (common, mut parsed) = ObjectStoreConfig::from_url(&KIND, url)?;
        let query = parsed.query();
        let config = Self {
            common,
            region: query.take_nonempty("region")?,
            path_style: query.take_bool("path_style")?,
            credentials: None,
            ca_file: query.take_nonempty("sslrootcert")?.map(PathBuf::from),
        };
        config.common.finish(&KIND, parsed)?;
        Ok(config)
    }

    /// The region.
    #[must_use]
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Path-style (`endpoint/bucket/key`) or virtual-hosted addressing
    /// (path-style is the default with an endpoint).
    #[must_use]
    pub fn with_path_style(mut self, path_style: bool) -> Self {
        self.path_style = Some(path_style);
        self
    }

    /// Trusts the CA certificates in `path` (PEM) instead of the system
    /// roots (URL option `sslrootcert=`).
    #[must_use]
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Static credentials instead of AWS's chain.
    #[must_use]
    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// Whether the emulator's test keys are used.
    pub fn emulator(&self) -> bool {
        self.common.emulator
    }

    /// A client: the emulator's test keys with `emulator=true`, else
    /// [`with_credentials`](Self::with_credentials), else AWS's default
    /// chain, which must find credentials.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when no credentials are found, naming where
    /// they are looked for and `emulator=true`.
    pub async fn client(&self) -> Result<Client> {
        Ok(self.client_and_endpoint().await?.0)
    }

    /// [`client`](Self::client), and the endpoint it talks to (`None`:
    /// AWS itself), as the SDK resolved it: `endpoint=`, else
    /// `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` or the profile's.
    async fn client_and_endpoint(&self) -> Result<(Client, Option<String>)> {
        self.common.validate(&KIND)?;
        let options = AwsOptions {
            target: format!("s3://{}", self.bucket()),
            region: self.region.clone(),
            endpoint: self.endpoint().map(str::to_owned),
            credentials: self.credentials.clone(),
            ca_file: self.ca_file.clone(),
            emulator: self.common.emulator,
        };
        let (sdk, endpoint) = fencing_aws::sdk_config(&options).await?;
        let path_style = self.path_style.unwrap_or(self.endpoint().is_some());
        let config = aws_sdk_s3::config::Builder::from(&sdk).force_path_style(path_style);
        Ok((Client::from_conf(config.build()), endpoint))
    }

    /// Opens the store: [`client`](Self::client), then the backend on the
    /// bucket (nothing is sent to the bucket yet).
    ///
    /// # Errors
    /// As [`client`](Self::client).
    pub async fn connect_store(&self) -> Result<S3Store> {
        let (client, endpoint) = self.client_and_endpoint().await?;
        Ok(self
            .common
            .store(S3Backend::new(client, self.bucket()).with_endpoint(endpoint.as_deref())))
    }

    /// Opens the bucket issuer: [`client`](Self::client), then lease
    /// records under `lease_prefix` in the bucket (nothing is sent yet).
    ///
    /// # Errors
    /// As [`client`](Self::client).
    pub async fn connect_issuer(&self) -> Result<S3Issuer> {
        let (client, endpoint) = self.client_and_endpoint().await?;
        Ok(self
            .common
            .issuer(S3Backend::new(client, self.bucket()).with_endpoint(endpoint.as_deref())))
    }
}

#[cfg(test)]
mod tests {
    use fencing_testkit::refusal::assert_refused;

    use super::*;

    #[test]
    fn good_urls() {
        let c = S3Config::from_url("s3://b").unwrap();
        assert_eq!((c.bucket(), c.endpoint(), c.emulator()), ("b", None, false));
        assert!(!c.common.adopt_unfenced);
        let c = S3Config::from_url(
            "s3://b/?region=eu-west-1&endpoint=http://127.0.0.1:9000&emulator=true&adopt_unfenced=1&path_style=false",
        )
        .unwrap();
        assert_eq!(c.region.as_deref(), Some("eu-west-1"));
        assert_eq!(c.endpoint(), Some("http://127.0.0.1:9000"));
        assert_eq!(
            (c.common.emulator, c.common.adopt_unfenced, c.path_style),
            (true, true, Some(false))
        );
    }

    #[test]
    fn bad_urls_are_invalid_input_naming_the_problem() {
        assert_refused(
            S3Config::from_url,
            &[
                ("gs://b", &["not an S3 URL (s3://BUCKET)"]),
                ("s3://", &["no bucket: expected s3://BUCKET"]),
                ("s3://b/k", &["\"/k\""]),
                (
                    "s3://b?endpont=x",
                    &[
                        "unknown option \"endpont\" in a s3:// URL",
                        "known options: endpoint, emulator, adopt_unfenced, lease_prefix, lease_expiry, region, path_style, sslrootcert",
                    ],
                ),
                ("s3://b?adopt_unfenced=ture", &["adopt_unfenced=\"ture\""]),
                ("s3://b?emulator=true", &["needs endpoint="]),
                ("s3://b?region=", &["region=\"\": needs a value"]),
                ("s3://b?region=a&region=b", &["twice"]),
            ],
        );
    }

    #[test]
    fn debug_hides_credentials() {
        let c = S3Config::new("b")
            .with_credentials(Credentials::new("AKID", "SECRET", None, None, "t"));
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("SECRET") && !shown.contains("AKID"),
            "{shown}"
        );
    }
}
