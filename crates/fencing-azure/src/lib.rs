#![doc = include_str!("../README.md")]

#[cfg(feature = "azurite")]
pub mod azurite;
mod error;

use std::collections::HashMap;
use std::fmt;
use std::num::NonZero;
use std::sync::Arc;

use async_trait::async_trait;
use azure_core::http::{Etag, NoFormat, RequestContent};
use azure_storage_blob::models::{
    BlobClientGetPropertiesResultHeaders, BlockBlobClientUploadOptions,
};
use azure_storage_blob::{BlobContainerClient, BlobServiceClient};
use bytes::Bytes;
use fencing::blob::{
    Blob, BlobBackend, BlobHead, BlobMeta, BlobStore, BlobVersion, Precondition,
    STATE_METADATA_KEY, TOKEN_METADATA_KEY, WriteOutcome,
};
use fencing::{Error, FencingToken, Limits, Result};

use crate::error::{Failure, Op, classify};

/// A fenced store on Azure Blob Storage: the shared compare-and-swap loop of
/// [`fencing::blob::BlobStore`] on an [`AzureBackend`].
pub type AzureStore = BlobStore<AzureBackend>;

/// A fenced [`AzureStore`] on the container your `container` client points
/// at.
///
/// The same as `AzureStore::new(AzureBackend::new(container))`.
pub fn azure_store(container: impl Into<Arc<BlobContainerClient>>) -> AzureStore {
    BlobStore::new(AzureBackend::new(container))
}

/// The largest block blob one Put Blob request may carry: 5000 MiB.
const PUT_BLOB_MAX: u64 = 5000 * 1024 * 1024;

/// Blob names are 1 to 1024 characters.
const AZURE_MAX_KEY_LEN: usize = 1024;

/// An ETag no blob has, for a write whose response carried none: the next
/// fast-path write then fails its precondition and reads again.
const UNKNOWN_ETAG: &str = "\"fencing-azure-unknown-etag\"";

/// How often a read restarts when the blob changes between the ranges of a
/// partitioned download.
const READ_ATTEMPTS: u32 = 5;

/// The [`BlobBackend`] for one Azure Blob container: Get Blob Properties,
/// Get Blob, and a single-request Put Blob with `If-Match: <ETag>` or
/// `If-None-Match: *`. The ETag changes on every write, metadata included.
///
/// It takes your own [`BlobContainerClient`], already configured with its
/// URL, credential (Entra ID) or SAS, and options.
#[derive(Clone)]
pub struct AzureBackend {
    container: Arc<BlobContainerClient>,
}

impl fmt::Debug for AzureBackend {
    /// Shows the container URL without its query, which may hold a SAS.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = self.container.url();
        f.debug_struct("AzureBackend")
            .field(
                "container",
                &format_args!("{}{}", url.origin().ascii_serialization(), url.path()),
            )
            .finish()
    }
}

impl AzureBackend {
    /// A backend writing to the container `container` points at. Nothing is
    /// sent until the first operation; a missing container is then an
    /// [`Error::Backend`] that is not retryable.
    pub fn new(container: impl Into<Arc<BlobContainerClient>>) -> Self {
        Self {
            container: container.into(),
        }
    }

    /// A backend on `container` of the account `service` points at.
    pub fn from_service(service: &BlobServiceClient, container: &str) -> Self {
        Self::new(service.blob_container_client(container))
    }

    /// The container client.
    pub fn container(&self) -> &Arc<BlobContainerClient> {
        &self.container
    }

    /// Wraps the backend in the shared fenced-write loop.
    pub fn into_store(self) -> AzureStore {
        BlobStore::new(self)
    }

    /// The limits this backend enforces before sending anything: names up to
    /// 1024 bytes, values up to 5000 MiB (one Put Blob), any `u64` token.
    pub fn limits() -> Limits {
        Limits {
            max_key_len: AZURE_MAX_KEY_LEN,
            max_value_len: usize::try_from(PUT_BLOB_MAX).unwrap_or(usize::MAX),
            max_token: FencingToken::new(u64::MAX),
        }
    }

    fn container_name(&self) -> String {
        self.container
            .url()
            .path_segments()
            .and_then(|mut s| s.next_back().map(str::to_owned))
            .unwrap_or_default()
    }
}

fn version_from(etag: Option<Etag>) -> BlobVersion {
    BlobVersion::new(etag.map_or_else(|| UNKNOWN_ETAG.to_owned(), |e| e.to_string()))
}

/// Azure metadata names must be C# identifiers: the core's `fencing-token`
/// and `fencing-state` are stored as `fencing_token` and `fencing_state`.
fn azure_name(name: &str) -> String {
    name.replace('-', "_")
}

/// The metadata pairs for a write.
fn metadata_for(meta: BlobMeta) -> HashMap<String, String> {
    meta.to_pairs()
        .into_iter()
        .map(|(k, v)| (azure_name(k), v))
        .collect()
}

/// The fencing metadata read back from a blob's metadata.
fn meta_from(metadata: &HashMap<String, String>) -> Result<BlobMeta> {
    let ours = [TOKEN_METADATA_KEY, STATE_METADATA_KEY];
    BlobMeta::from_pairs(metadata.iter().filter_map(|(k, v)| {
        ours.iter()
            .find(|name| k.eq_ignore_ascii_case(&azure_name(name)))
            .map(|name| (*name, v.as_str()))
    }))
}

fn unreadable(what: &str, err: azure_core::Error) -> Error {
    Error::backend(
        "azure",
        false,
        format!("unreadable {what} in an Azure response: {err}"),
    )
}

#[async_trait]
impl BlobBackend for AzureBackend {
    fn name(&self) -> &'static str {
        "azure"
    }

    fn limits(&self) -> Limits {
        Self::limits()
    }

    async fn head(&self, key: &str) -> Result<Option<BlobHead>> {
        let response = match self.container.blob_client(key).get_properties(None).await {
            Ok(response) => response,
            Err(err) => {
                return match classify(Op::Head, &self.container_name(), key, err) {
                    Failure::NotFound => Ok(None),
                    Failure::PreconditionFailed => Err(Error::backend(
                        "azure",
                        true,
                        format!("unexpected precondition failure reading {key:?}"),
                    )),
                    Failure::Error(e) => Err(e),
                };
            }
        };
        let etag = response.etag().map_err(|e| unreadable("ETag", e))?;
        let metadata = response.metadata().map_err(|e| unreadable("metadata", e))?;
        Ok(Some(BlobHead {
            version: version_from(etag),
            meta: meta_from(&metadata)?,
        }))
    }

    /// A large blob is downloaded in ranges, each conditional on the first
    /// range's ETag; if the blob changes in between, the read starts over.
    async fn read(&self, key: &str) -> Result<Option<Blob>> {
        let client = self.container.blob_client(key);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = match client.download(None).await {
                Ok(response) => response
                    .body
                    .collect()
                    .await
                    .map(|body| (response.properties, body)),
                Err(err) => Err(err),
            };
            match result {
                Ok((properties, body)) => {
                    return Ok(Some(Blob {
                        head: BlobHead {
                            version: version_from(properties.etag),
                            meta: meta_from(&properties.metadata)?,
                        },
                        body,
                    }));
                }
                Err(err) => match classify(Op::Read, &self.container_name(), key, err) {
                    Failure::NotFound => return Ok(None),
                    Failure::PreconditionFailed if attempt < READ_ATTEMPTS => {
                        tracing::debug!(
                            key,
                            attempt,
                            "blob changed during a ranged download; reading again"
                        );
                    }
                    Failure::PreconditionFailed => {
                        return Err(Error::Contention {
                            key: key.to_owned(),
                            attempts: READ_ATTEMPTS,
                        });
                    }
                    Failure::Error(e) => return Err(e),
                },
            }
        }
    }

    async fn write(
        &self,
        key: &str,
        body: Bytes,
        meta: BlobMeta,
        precondition: &Precondition,
    ) -> Result<WriteOutcome> {
        let len = u64::try_from(body.len()).unwrap_or(u64::MAX).max(1);
        let (op, if_match, if_none_match) = match precondition {
            Precondition::Absent => (Op::Create, None, Some(Etag::from("*"))),
            Precondition::Matches(version) => (
                Op::Update,
                Some(Etag::from(version.as_str().to_owned())),
                None,
            ),
        };
        let options = BlockBlobClientUploadOptions {
            if_match,
            if_none_match,
            metadata: Some(metadata_for(meta)),
            blob_content_type: Some("application/octet-stream".to_owned()),
            // One Put Blob: a partition as large as the value. Staged blocks
            // would be fenced only at their commit.
            partition_size: NonZero::new(len),
            ..Default::default()
        };
        let result = self
            .container
            .blob_client(key)
            .upload(
                <RequestContent<Bytes, NoFormat> as From<Bytes>>::from(body),
                Some(options),
            )
            .await;
        match result {
            Ok(uploaded) => Ok(WriteOutcome::Written(version_from(uploaded.etag))),
            Err(err) => match classify(op, &self.container_name(), key, err) {
                Failure::PreconditionFailed => Ok(WriteOutcome::PreconditionFailed),
                Failure::NotFound => Err(Error::backend(
                    "azure",
                    false,
                    format!("unexpected 'not found' writing {key:?}"),
                )),
                Failure::Error(e) => Err(e),
            },
        }
    }
}
