//! object_store's own clients (arrow-rs) on the emulators, for the tests
//! and the bench of `fencing-object-store`: the S3, GCS and Azure stores
//! an engine would build with object_store's builders, on this run's
//! buckets (created through the adapters' emulator helpers, since
//! object_store creates none).

use std::sync::Arc;

use fencing_core::{Error, Result};
use fencing_harness::env::{AZURE, GCS, S3, Server};
use object_store::ObjectStore;
use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;

/// An emulator object_store can reach: S3 (moto), GCS (fake-gcs-server),
/// Azure (Azurite).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cloud {
    /// moto, through `AmazonS3` with `S3ConditionalPut::ETagMatch`.
    S3,
    /// fake-gcs-server, through `GoogleCloudStorage` without OAuth.
    Gcs,
    /// Azurite, through `MicrosoftAzure` with its account and key.
    Azure,
}

impl Cloud {
    /// The three, in this order.
    pub const ALL: [Cloud; 3] = [Cloud::S3, Cloud::Gcs, Cloud::Azure];

    /// The test server.
    pub fn server(self) -> &'static Server {
        match self {
            Cloud::S3 => &S3,
            Cloud::Gcs => &GCS,
            Cloud::Azure => &AZURE,
        }
    }

    /// A short name, for buckets and messages.
    pub fn name(self) -> &'static str {
        match self {
            Cloud::S3 => "s3",
            Cloud::Gcs => "gcs",
            Cloud::Azure => "azure",
        }
    }

    /// Creates `bucket` on the emulator at `endpoint` (one that exists is
    /// fine) and returns object_store's client on it.
    ///
    /// # Errors
    /// Retryable when nothing answers; not when the emulator refused.
    pub async fn open(self, endpoint: &str, bucket: &str) -> Result<Arc<dyn ObjectStore>> {
        match self {
            Cloud::S3 => {
                fencing_s3::emulator::create_bucket(
                    &fencing_s3::emulator::client(endpoint),
                    bucket,
                )
                .await?;
            }
            Cloud::Gcs => fencing_gcs::emulator::create_bucket(endpoint, bucket).await?,
            Cloud::Azure => {
                let client = fencing_azure::emulator::container_client(endpoint, bucket, None)?;
                fencing_azure::emulator::create_container(&client).await?;
            }
        }
        self.client(endpoint, bucket)
    }

    /// object_store's client on `bucket` at `endpoint`, nothing sent.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when object_store refuses the settings.
    pub fn client(self, endpoint: &str, bucket: &str) -> Result<Arc<dyn ObjectStore>> {
        let refused = |e: object_store::Error| {
            Error::invalid_input(format!(
                "object_store refused the {} settings: {e}",
                self.name()
            ))
        };
        Ok(match self {
            Cloud::S3 => Arc::new(
                AmazonS3Builder::new()
                    .with_endpoint(endpoint)
                    .with_bucket_name(bucket)
                    .with_region("us-east-1")
                    .with_access_key_id("testing")
                    .with_secret_access_key("testing")
                    .with_allow_http(true)
                    .with_conditional_put(S3ConditionalPut::ETagMatch)
                    .build()
                    .map_err(refused)?,
            ),
            Cloud::Gcs => {
                // fake-gcs-server: no OAuth, the emulator's URL as the base.
                let key = format!(
                    r#"{{"gcs_base_url": "{endpoint}", "disable_oauth": true, "client_email": "", "private_key": "", "private_key_id": ""}}"#
                );
                Arc::new(
                    GoogleCloudStorageBuilder::new()
                        .with_bucket_name(bucket)
                        .with_service_account_key(key)
                        .with_client_options(
                            object_store::ClientOptions::new().with_allow_http(true),
                        )
                        .build()
                        .map_err(refused)?,
                )
            }
            Cloud::Azure => {
                // Azurite's account and well-known key, at the endpoint
                // given (path-style: the account is the URL's first
                // segment), so a proxy can stand in front of it.
                Arc::new(
                    MicrosoftAzureBuilder::new()
                        .with_endpoint(endpoint.trim_end_matches('/').to_owned())
                        .with_account(fencing_azure::emulator::DEV_ACCOUNT)
                        .with_access_key(fencing_azure::emulator::DEV_ACCOUNT_KEY)
                        .with_container_name(bucket)
                        .with_allow_http(true)
                        .build()
                        .map_err(refused)?,
                )
            }
        })
    }
}
