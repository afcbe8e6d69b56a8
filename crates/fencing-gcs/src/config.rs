//! [`GcsConfig`]: a GCS store from a URL, the environment or setters.

use std::fmt;

use fencing_core::adapter::blob::config::{
    ADOPT_UNFENCED, EMULATOR, ENDPOINT, LEASE_PREFIX, ObjectStoreConfig, ObjectStoreKind,
};
use fencing_core::adapter::descriptor::{self, Descriptor};
use fencing_core::adapter::url::env;
use fencing_core::{Error, Result};
use google_cloud_auth::credentials::{Credentials, anonymous};
use google_cloud_storage::client::Storage;

use crate::{GcsBackend, GcsIssuer, GcsStore};

/// The GCS backend, as the registry, `fence --help` and the README see it.
pub const BACKEND: Descriptor = Descriptor {
    name: "gcs",
    title: "GCS",
    crate_name: "fencing-gcs",
    features: &["gcs"],
    schemes: &["gs"],
    shape: "gs://BUCKET",
    options: &[ENDPOINT, EMULATOR, ADOPT_UNFENCED, LEASE_PREFIX],
    // The endpoint's scheme says whether TLS is used.
    tls_modes: &[],
    check: |url| GcsConfig::from_url(url).map(drop),
    open_issuer: Some(|url| {
        Box::pin(
            async move { descriptor::issuer(GcsConfig::from_url(&url)?.connect_issuer().await?) },
        )
    }),
    open_store: Some(|url| {
        Box::pin(
            async move { descriptor::store(GcsConfig::from_url(&url)?.connect_store().await?) },
        )
    }),
};

/// The `gs://` URL's variables and messages.
const KIND: ObjectStoreKind = ObjectStoreKind {
    backend: &BACKEND,
    noun: "bucket",
    env_prefix: "FENCING_GCS",
    emulator_endpoint: "the emulator's address",
};

/// How to reach one GCS bucket: parsed from `gs://BUCKET?…`, read from the
/// environment, or set with the `with_*` setters;
/// [`connect_store`](Self::connect_store) opens the store on it and
/// [`connect_issuer`](Self::connect_issuer) the bucket issuer.
///
/// Credentials are Google's application default credentials (the client
/// builder's default: `GOOGLE_APPLICATION_CREDENTIALS`, the file `gcloud auth
/// application-default login` writes, or the metadata server on Google
/// Cloud), or your own with [`with_credentials`](Self::with_credentials).
/// With a custom `endpoint=` they must come from a credentials file or
/// [`with_credentials`](Self::with_credentials); an emulator's anonymous
/// access is used only with `emulator=true`, never as a fallback.
///
/// | URL option | meaning |
/// | --- | --- |
/// | `endpoint=URL` | another endpoint than `https://storage.googleapis.com` |
/// | `emulator=true` | anonymous credentials for a local emulator (fake-gcs-server); needs `endpoint=` |
/// | `adopt_unfenced=true` | take over objects written without fencing at mark 0 |
///
/// ```
/// let config = fencing_gcs::GcsConfig::from_url(
///     "gs://my-test-bucket?endpoint=http://127.0.0.1:4443&emulator=true",
/// )?;
/// assert_eq!(config.bucket(), "my-test-bucket");
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct GcsConfig {
    common: ObjectStoreConfig,
    credentials: Option<Credentials>,
}

impl fmt::Debug for GcsConfig {
    /// Hides the credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("GcsConfig");
        self.common.debug_fields("bucket", &mut d);
        d.field("credentials", &self.credentials.as_ref().map(|_| "***"))
            .finish()
    }
}

impl GcsConfig {
    fencing_core::object_store_config_methods! {
        common, bucket, KIND;
        /// A config for `bucket` with application default credentials.
        new;
        /// From the environment: `FENCING_GCS_BUCKET` (required),
        /// `FENCING_GCS_ENDPOINT`, `FENCING_GCS_EMULATOR=true`,
        /// `FENCING_GCS_ADOPT_UNFENCED=true`; credentials as the type's docs say.
        ///
        /// # Errors
        /// [`Error::InvalidInput`] without `FENCING_GCS_BUCKET`, or for a
        /// variable that is not a strict boolean.
        from_env;
    }

    /// Parses `gs://BUCKET[?endpoint=URL&emulator=B&adopt_unfenced=B]`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for another scheme, no bucket, a path, an
    /// unknown option (naming the known ones), a value that is not a strict
    /// boolean, or `emulator=true` without `endpoint=`.
    pub fn from_url(url: &str) -> Result<Self> {
        let (common, parsed) = ObjectStoreConfig::from_url(&KIND, url)?;
        common.finish(&KIND, parsed)?;
        Ok(Self {
            common,
            credentials: None,
        })
    }

    /// Your own credentials instead of application default credentials.
    #[must_use]
    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// A client, with the credentials the type's docs describe.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a custom endpoint with neither
    /// credentials nor `emulator=true` (naming both); [`Error::Backend`] if
    /// the client cannot be built (an unreadable credentials file).
    pub async fn client(&self) -> Result<Storage> {
        self.common.validate(&KIND)?;
        let mut builder = Storage::builder();
        if self.common.emulator {
            builder = builder.with_credentials(anonymous::Builder::new().build());
        } else if let Some(credentials) = &self.credentials {
            builder = builder.with_credentials(credentials.clone());
        } else if self.endpoint().is_some() && !adc_file_present() {
            return Err(Error::invalid_input(format!(
                "no Google credentials for gs://{} at a custom endpoint: set \
                 GOOGLE_APPLICATION_CREDENTIALS (or run `gcloud auth application-default login`); \
                 for a local emulator add emulator=true to the URL",
                self.bucket()
            )));
        }
        if let Some(endpoint) = self.endpoint() {
            builder = builder.with_endpoint(endpoint);
        }
        builder
            .build()
            .await
            .map_err(|e| Error::backend("gcs", false, e))
    }

    /// Opens the store: [`client`](Self::client), then the backend on the
    /// bucket (nothing is sent to the bucket yet).
    ///
    /// # Errors
    /// As [`client`](Self::client).
    pub async fn connect_store(&self) -> Result<GcsStore> {
        let client = self.client().await?;
        Ok(self
            .common
            .store(GcsBackend::new(client, self.bucket()).with_endpoint(self.endpoint())))
    }

    /// Opens the bucket issuer: [`client`](Self::client), then lease
    /// records under `lease_prefix` in the bucket (nothing is sent yet).
    ///
    /// # Errors
    /// As [`client`](Self::client).
    pub async fn connect_issuer(&self) -> Result<GcsIssuer> {
        let client = self.client().await?;
        Ok(self
            .common
            .issuer(GcsBackend::new(client, self.bucket()).with_endpoint(self.endpoint())))
    }
}

/// Whether application default credentials come from a file (the variable
/// or gcloud's well-known path), not only the metadata server.
fn adc_file_present() -> bool {
    if env("GOOGLE_APPLICATION_CREDENTIALS").is_some() {
        return true;
    }
    std::env::var_os("HOME").is_some_and(|home| {
        std::path::Path::new(&home)
            .join(".config/gcloud/application_default_credentials.json")
            .is_file()
    })
}

#[cfg(test)]
mod tests {
    use fencing_testkit::refusal::assert_refused;

    use super::*;

    #[test]
    fn good_urls() {
        let c = GcsConfig::from_url("gs://b").unwrap();
        assert_eq!(
            (c.bucket(), c.endpoint(), c.common.emulator),
            ("b", None, false)
        );
        let c = GcsConfig::from_url(
            "gs://b?endpoint=http://127.0.0.1:4443&emulator=yes&adopt_unfenced=true",
        )
        .unwrap();
        assert_eq!(c.endpoint(), Some("http://127.0.0.1:4443"));
        assert!(c.common.emulator && c.common.adopt_unfenced);
    }

    #[test]
    fn bad_urls_are_invalid_input_naming_the_problem() {
        assert_refused(
            GcsConfig::from_url,
            &[
                ("s3://b", &["not a GCS URL (gs://BUCKET)"]),
                ("gs://?endpoint=x", &["no bucket: expected gs://BUCKET"]),
                ("gs://b/o", &["\"/o\""]),
                (
                    "gs://b?region=x",
                    &[
                        "unknown option \"region\" in a gs:// URL",
                        "known options: endpoint, emulator, adopt_unfenced, lease_prefix",
                    ],
                ),
                ("gs://b?emulator=on", &["emulator=\"on\""]),
                ("gs://b?emulator=true", &["needs endpoint="]),
            ],
        );
    }
}
