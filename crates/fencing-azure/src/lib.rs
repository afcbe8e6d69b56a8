#![doc = include_str!("../README.md")]

mod config;
#[cfg(feature = "emulator")]
pub mod emulator;
mod error;
mod sas;

pub use config::{AzureConfig, BACKEND, DEFAULT_SAS_LIFETIME};
pub use sas::account_sas;

/// The Azure SDK crates this crate is built on, so yours match their versions.
pub use {azure_core, azure_storage_blob};

use std::collections::HashMap;
use std::fmt;
use std::num::NonZero;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use azure_core::credentials::TokenCredential;
use azure_core::error::ErrorKind;
use azure_core::http::headers::{HeaderName, Headers};
use azure_core::http::{Etag, NoFormat, RequestContent, RetryOptions, Url};
use azure_core::time::{OffsetDateTime, parse_rfc7231};
use azure_storage_blob::models::{
    BlobClientDeleteOptions, BlobClientDownloadOptions, BlockBlobClientUploadOptions,
};
use azure_storage_blob::{BlobContainerClient, BlobContainerClientOptions};
use bytes::Bytes;
use fencing_core::adapter::blob::{
    BlobBackend, BlobMeta, BlobStore, BlobVersion, BlobWrite, FRAME_HEADER_LEN, Precondition,
    ServerClock, StoredObject, WriteOutcome,
};
use fencing_core::{Error, FencingToken, Limits, Result};

use crate::error::{Failure, Op, classify};

/// A fenced store on Azure Blob Storage: the shared compare-and-swap loop of
/// [`fencing_core::adapter::blob::BlobStore`] on an [`AzureBackend`].
pub type AzureStore = BlobStore<AzureBackend>;

/// A fenced lease that needs nothing but the container: the shared bucket
/// issuer of [`fencing_core::adapter::blob::BlobIssuer`] on a
/// [`AzureBackend`], one lease record per resource under its prefix.
pub type AzureIssuer = fencing_core::adapter::blob::BlobIssuer<AzureBackend>;

/// A fenced [`AzureStore`] on the container at `container_url`.
///
/// The same as `AzureStore::new(AzureBackend::new(container_url, credential, options)?)`.
///
/// # Errors
/// As [`AzureBackend::new`].
pub fn azure_store(
    container_url: Url,
    credential: Option<Arc<dyn TokenCredential>>,
    options: Option<BlobContainerClientOptions>,
) -> Result<AzureStore> {
    AzureBackend::new(container_url, credential, options).map(BlobStore::new)
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

/// The [`BlobBackend`] for one Azure Blob container: a ranged Get Blob for
/// the frame header, Get Blob, and a single-request Put Blob with
/// `If-Match: <ETag>` or `If-None-Match: *`. The ETag changes on every
/// write, metadata included.
///
/// It holds two clients on the container: one for reads, with your options,
/// and one for conditional writes, with the same options but **no retries**:
/// the Azure pipeline retries a request whose connection broke, and a retry
/// of a write that was applied fails its precondition, which would read as
/// a lost race ("nothing was written"). The fenced-write loop retries
/// instead, and knows what it sent.
#[derive(Clone)]
pub struct AzureBackend {
    reads: Arc<BlobContainerClient>,
    writes: Arc<BlobContainerClient>,
    /// Fed with the `Date` of every answer, for [`BlobBackend::server_now`];
    /// shared by clones, which talk to the same server.
    clock: Arc<ServerClock>,
}

impl fmt::Debug for AzureBackend {
    /// Shows the container URL without its query, which may hold a SAS.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = self.reads.url();
        f.debug_struct("AzureBackend")
            .field(
                "container",
                &format_args!("{}{}", url.origin().ascii_serialization(), url.path()),
            )
            .finish()
    }
}

impl AzureBackend {
    /// A backend on the container at `container_url`
    /// (`https://ACCOUNT.blob.core.windows.net/CONTAINER`, with a SAS in its
    /// query, or with an Entra ID `credential`). Reads use `options`;
    /// writes use the same options with retries off. Nothing is sent until
    /// the first operation; a missing container is then an
    /// [`Error::Backend`] that is not retryable.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a URL the client refuses (not a base URL,
    /// a credential over plain http).
    pub fn new(
        container_url: Url,
        credential: Option<Arc<dyn TokenCredential>>,
        options: Option<BlobContainerClientOptions>,
    ) -> Result<Self> {
        let options = options.unwrap_or_default();
        let mut no_retries = options.clone();
        no_retries.client_options.retry = RetryOptions::none();
        let client = |options| {
            BlobContainerClient::new(container_url.clone(), credential.clone(), Some(options))
                .map_err(|e| Error::invalid_input(format!("cannot make an Azure client: {e}")))
        };
        Ok(Self::from_clients(client(options)?, client(no_retries)?))
    }

    /// A backend on two clients you built for the same container: `reads`
    /// as you like, `writes` with `RetryOptions::none()` (see the type's
    /// docs for why).
    pub fn from_clients(
        reads: impl Into<Arc<BlobContainerClient>>,
        writes: impl Into<Arc<BlobContainerClient>>,
    ) -> Self {
        Self {
            reads: reads.into(),
            writes: writes.into(),
            clock: Arc::default(),
        }
    }

    /// The client reads go through.
    pub fn container(&self) -> &Arc<BlobContainerClient> {
        &self.reads
    }

    /// Wraps the backend in the shared fenced-write loop.
    pub fn into_store(self) -> AzureStore {
        BlobStore::new(self)
    }

    /// The limits this backend enforces before sending anything: names up to
    /// 1024 bytes, values up to 5000 MiB (one Put Blob) less the frame, any
    /// `u64` token.
    pub fn limits() -> Limits {
        Limits {
            max_key_len: AZURE_MAX_KEY_LEN,
            max_value_len: usize::try_from(PUT_BLOB_MAX).unwrap_or(usize::MAX) - FRAME_HEADER_LEN,
            max_token: FencingToken::new(u64::MAX),
        }
    }

    /// Feeds the clock an answer's `Date`, and returns it; an unreadable
    /// one only costs the estimate.
    fn observe(&self, headers: &Headers) -> Option<SystemTime> {
        let date = headers
            .get_optional_str(&HeaderName::from_static("date"))
            .and_then(|date| parse_rfc7231(date).ok())
            .and_then(system_time);
        if let Some(date) = date {
            self.clock.observe(date);
        }
        date
    }

    /// Feeds the clock the `Date` of an error answer (a 404, a 412, a 409);
    /// a failure without an answer has none.
    fn observe_error(&self, err: &azure_core::Error) {
        if let ErrorKind::HttpResponse {
            raw_response: Some(response),
            ..
        } = err.kind()
        {
            self.observe(response.headers());
        }
    }

    fn container_name(&self) -> String {
        self.reads
            .url()
            .path_segments()
            .and_then(|mut s| s.next_back().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// `None` before the epoch (or after 2554).
fn system_time(time: OffsetDateTime) -> Option<SystemTime> {
    let nanos = u64::try_from(time.unix_timestamp_nanos()).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_nanos(nanos))
}

fn version_from(etag: Option<Etag>) -> BlobVersion {
    BlobVersion::new(etag.map_or_else(|| UNKNOWN_ETAG.to_owned(), |e| e.to_string()))
}

/// Azure metadata names must be C# identifiers: the hint's `fencing-token`
/// and `fencing-state` are stored as `fencing_token` and `fencing_state`.
fn metadata_for(hint: BlobMeta) -> HashMap<String, String> {
    hint.to_pairs()
        .into_iter()
        .map(|(k, v)| (k.replace('-', "_"), v))
        .collect()
}

#[async_trait]
impl BlobBackend for AzureBackend {
    fn name(&self) -> &'static str {
        "azure"
    }

    fn endpoint(&self) -> Option<String> {
        // The origin only: the query may hold a SAS.
        Some(self.reads.url().origin().ascii_serialization())
    }

    fn limits(&self) -> Limits {
        Self::limits()
    }

    /// The `Date` of the latest answer to a read or write, run on by the
    /// monotonic clock.
    fn server_now(&self) -> Option<SystemTime> {
        self.clock.now()
    }

    /// Get Blob, whole or ranged (the ETag and the frame header together).
    /// A large blob is downloaded in ranges, each conditional on the first
    /// range's ETag; if the blob changes in between, the read starts over.
    async fn read_range(&self, key: &str, len: Option<usize>) -> Result<Option<StoredObject>> {
        let op = if len.is_some() { Op::Head } else { Op::Read };
        let client = self.reads.blob_client(key);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let options = BlobClientDownloadOptions {
                range: len.map(|len| (0..len.max(1)).into()),
                ..Default::default()
            };
            let result = match client.download(Some(options)).await {
                Ok(response) => {
                    let answered = self.observe(&response.headers);
                    response
                        .body
                        .collect()
                        .await
                        .map(|body| (response.properties, body, answered))
                }
                Err(err) => {
                    self.observe_error(&err);
                    Err(err)
                }
            };
            match result {
                Ok((properties, bytes, answered)) => {
                    let modified = properties.last_modified.and_then(system_time);
                    return Ok(Some(
                        StoredObject::new(version_from(properties.etag), bytes)
                            .modified_at(modified)
                            .answered_at(answered),
                    ));
                }
                Err(err) => match classify(op, &self.container_name(), key, err) {
                    Failure::NotFound => return Ok(None),
                    // An empty blob has no range to read: read it whole.
                    Failure::EmptyRange => return self.read_range(key, None).await,
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

    fn deletes_conditionally(&self) -> bool {
        true
    }

    /// Delete Blob with `If-Match`, on the client that writes (no
    /// retries): a precondition failed or a blob gone is `false`.
    async fn delete_if(&self, key: &str, version: &BlobVersion) -> Result<bool> {
        let options = BlobClientDeleteOptions {
            if_match: Some(Etag::from(version.as_str().to_owned())),
            ..Default::default()
        };
        match self.writes.blob_client(key).delete(Some(options)).await {
            Ok(deleted) => {
                self.observe(deleted.headers());
                Ok(true)
            }
            Err(err) => {
                self.observe_error(&err);
                match classify(Op::Update, &self.container_name(), key, err) {
                    Failure::PreconditionFailed | Failure::NotFound => Ok(false),
                    Failure::Error(e) => Err(e),
                    Failure::EmptyRange => Err(Error::backend(
                        "azure",
                        false,
                        format!("an empty range on Delete Blob {key:?}"),
                    )),
                }
            }
        }
    }

    async fn write(&self, key: &str, write: BlobWrite) -> Result<WriteOutcome> {
        let BlobWrite {
            body,
            hint,
            precondition,
        } = write;
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
            metadata: Some(metadata_for(hint)),
            blob_content_type: Some("application/octet-stream".to_owned()),
            // One Put Blob: a partition as large as the value. Staged blocks
            // would be fenced only at their commit.
            partition_size: NonZero::new(len),
            ..Default::default()
        };
        let result = self
            .writes
            .blob_client(key)
            .upload(
                <RequestContent<Bytes, NoFormat> as From<Bytes>>::from(body),
                Some(options),
            )
            .await;
        match result {
            Ok(uploaded) => {
                self.observe(uploaded.raw_response.headers());
                Ok(WriteOutcome::Written(version_from(uploaded.etag)))
            }
            Err(err) => {
                self.observe_error(&err);
                classify(op, &self.container_name(), key, err).into_write_outcome("azure", key)
            }
        }
    }
}
