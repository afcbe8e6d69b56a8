#![doc = include_str!("../README.md")]

mod config;
#[cfg(feature = "emulator")]
pub mod emulator;
mod error;

pub use config::{BACKEND, GcsConfig};

/// The Google Cloud Storage client this crate is built on, so yours matches its version.
pub use google_cloud_storage;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::BytesMut;
use fencing_core::adapter::blob::{
    BlobBackend, BlobStore, BlobVersion, BlobWrite, FRAME_HEADER_LEN, Precondition, ServerClock,
    StoredObject, WriteOutcome,
};
use fencing_core::{Error, FencingToken, Limits, Result};
use google_cloud_gax::retry_policy::NeverRetry;
use google_cloud_storage::client::Storage;
use google_cloud_storage::model_ext::ReadRange;

use crate::error::{Failure, Op, classify};

/// A fenced store on GCS: the shared compare-and-swap loop of
/// [`fencing_core::adapter::blob::BlobStore`] on a [`GcsBackend`].
pub type GcsStore = BlobStore<GcsBackend>;

/// A fenced lease that needs nothing but the bucket: the shared bucket
/// issuer of [`fencing_core::adapter::blob::BlobIssuer`] on a
/// [`GcsBackend`], one lease record per resource under its prefix.
pub type GcsIssuer = fencing_core::adapter::blob::BlobIssuer<GcsBackend>;

/// A fenced [`GcsStore`] on `bucket`, through your configured `client`.
///
/// The same as `GcsStore::new(GcsBackend::new(client, bucket))`.
pub fn gcs_store(client: Storage, bucket: impl Into<String>) -> GcsStore {
    BlobStore::new(GcsBackend::new(client, bucket))
}

/// The largest value this crate writes: 16 MiB, sent as one multipart
/// upload (`uploadType=multipart`), the only upload kind whose
/// `ifGenerationMatch` every server (the emulator included) honours.
pub const MAX_VALUE_LEN: usize = 16 * 1024 * 1024;

/// GCS object names are 1 to 1024 bytes of UTF-8.
const GCS_MAX_KEY_LEN: usize = 1024;

/// The [`BlobBackend`] for one GCS bucket: reads and conditional
/// single-request uploads with `ifGenerationMatch` (`0` when the object must
/// not exist). The generation changes on every write, so it is the version.
///
/// It takes your own [`Storage`] client, already configured with
/// credentials and endpoint.
#[derive(Clone, Debug)]
pub struct GcsBackend {
    client: Storage,
    /// `projects/_/buckets/<name>`, as the client expects it.
    bucket: String,
    /// For `verify`'s transport check; unknown for a caller's own client.
    endpoint: Option<String>,
    /// The server's time as this backend learns it, for
    /// [`BlobBackend::server_now`]; shared by clones, which talk to the
    /// same server.
    clock: Arc<ServerClock>,
}

impl GcsBackend {
    /// A backend writing to `bucket` (`my-bucket` or
    /// `projects/_/buckets/my-bucket`) through `client`. Nothing is sent
    /// until the first operation; a missing bucket is then an
    /// [`Error::Backend`] that is not retryable.
    pub fn new(client: Storage, bucket: impl Into<String>) -> Self {
        let bucket = bucket.into();
        let bucket = if bucket.starts_with("projects/") {
            bucket
        } else {
            format!("projects/_/buckets/{bucket}")
        };
        Self {
            client,
            bucket,
            endpoint: None,
            clock: Arc::default(),
        }
    }

    /// Names the endpoint `client` talks to (`None`: Google's own), for
    /// `verify`'s transport check; [`GcsConfig`] does it.
    #[must_use]
    pub fn with_endpoint(mut self, endpoint: Option<&str>) -> Self {
        self.endpoint = Some(endpoint.map_or_else(
            || "https://storage.googleapis.com".to_owned(),
            fencing_core::redact,
        ));
        self
    }

    /// The bucket, as `projects/_/buckets/<name>`.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The client.
    pub fn client(&self) -> &Storage {
        &self.client
    }

    /// Wraps the backend in the shared fenced-write loop.
    pub fn into_store(self) -> GcsStore {
        BlobStore::new(self)
    }

    /// The limits this backend enforces before sending anything: keys up to
    /// 1024 bytes, values up to [`MAX_VALUE_LEN`], any `u64` token.
    pub fn limits() -> Limits {
        Limits {
            max_key_len: GCS_MAX_KEY_LEN,
            max_value_len: MAX_VALUE_LEN,
            max_token: FencingToken::new(u64::MAX),
        }
    }

    /// Feeds the clock the `Date` of an error answer (a 404, a 412, a 416);
    /// a failure without an answer carries no headers.
    fn observe_error(&self, err: &google_cloud_storage::Error) {
        let date = err
            .http_headers()
            .and_then(|headers| headers.get("date"))
            .and_then(|date| date.to_str().ok())
            .and_then(|date| httpdate::parse_http_date(date).ok());
        if let Some(date) = date {
            self.clock.observe(date);
        }
    }
}

/// A protobuf timestamp's parts as a `SystemTime`; `None` before the epoch
/// or out of range.
fn system_time(seconds: i64, nanos: i32) -> Option<SystemTime> {
    let since_epoch = Duration::new(u64::try_from(seconds).ok()?, u32::try_from(nanos).ok()?);
    SystemTime::UNIX_EPOCH.checked_add(since_epoch)
}

#[async_trait]
impl BlobBackend for GcsBackend {
    fn name(&self) -> &'static str {
        "gcs"
    }

    fn endpoint(&self) -> Option<String> {
        self.endpoint.clone()
    }

    fn limits(&self) -> Limits {
        Self::limits()
    }

    /// What the client lets us see of the server's clock: the `update_time`
    /// of each object this backend wrote (the server's time at that write)
    /// and the `Date` of error answers. A successful read exposes no
    /// headers and adds nothing.
    fn server_now(&self) -> Option<SystemTime> {
        self.clock.now()
    }

    /// A media download, whole or ranged (the generation and the frame
    /// header together).
    async fn read_range(&self, key: &str, len: Option<usize>) -> Result<Option<StoredObject>> {
        let op = if len.is_some() { Op::Head } else { Op::Read };
        let mut request = self.client.read_object(&self.bucket, key);
        if let Some(len) = len {
            request =
                request.set_read_range(ReadRange::head(u64::try_from(len).unwrap_or(u64::MAX)));
        }
        let result = request.send().await;
        if let Err(err) = &result {
            self.observe_error(err);
        }
        let mut response = match result {
            Ok(response) => response,
            Err(err) => match classify(op, &self.bucket, key, err) {
                Failure::NotFound => return Ok(None),
                // An empty object has no range to read: read it whole.
                Failure::EmptyRange => return self.read_range(key, None).await,
                Failure::PreconditionFailed => {
                    return Err(Error::backend(
                        "gcs",
                        false,
                        format!(
                            "unexpected precondition failure reading {key:?}: no precondition was sent"
                        ),
                    ));
                }
                Failure::Error(e) => return Err(e),
            },
        };
        // A download tells neither the object's update time nor a `Date`
        // (generations look like microsecond timestamps, but GCS does not
        // promise it): `modified` stays unknown, and the bucket issuer
        // judges expiry on the waiter's own clock.
        let version = BlobVersion::new(response.object().generation.to_string());
        let mut bytes = BytesMut::new();
        while let Some(chunk) = response.next().await {
            let chunk = chunk.map_err(|err| match classify(op, &self.bucket, key, err) {
                Failure::Error(e) => e,
                _ => Error::backend("gcs", true, format!("reading {key:?} was cut short")),
            })?;
            bytes.extend_from_slice(&chunk);
        }
        Ok(Some(StoredObject::new(version, bytes.freeze())))
    }

    /// A generation no object has: real ones are microsecond timestamps.
    fn unmatchable_version(&self) -> BlobVersion {
        BlobVersion::new("1")
    }

    async fn write(&self, key: &str, write: BlobWrite) -> Result<WriteOutcome> {
        let (op, generation) = match &write.precondition {
            Precondition::Absent => (Op::Create, 0),
            Precondition::Matches(version) => {
                let generation = version.as_str().parse::<i64>().map_err(|_| {
                    Error::invalid_input(format!("{:?} is not a GCS generation", version.as_str()))
                })?;
                (Op::Update, generation)
            }
        };
        let result = self
            .client
            .write_object(&self.bucket, key, write.body)
            .set_content_type("application/octet-stream")
            .set_metadata(write.hint.to_pairs())
            .set_if_generation_match(generation)
            // The client would retry an upload with a generation
            // precondition (it counts as idempotent); a retry of an applied
            // upload fails its precondition and would look like a lost race.
            .with_retry_policy(NeverRetry)
            // Keep every value we accept on the single-request multipart
            // path: a resumable upload's preconditions are not honoured by
            // the emulator.
            .with_resumable_upload_threshold(MAX_VALUE_LEN + FRAME_HEADER_LEN + 1)
            // Buffered: the checksums go in the metadata part up front. The
            // unbuffered path appends them as a third multipart part, which
            // fake-gcs-server stores as the object's content.
            .send_buffered()
            .await;
        match result {
            Ok(object) => {
                // Set by the server as it wrote: its clock at this answer,
                // or a moment before it (never ahead).
                let written =
                    (object.update_time.as_ref()).and_then(|t| system_time(t.seconds(), t.nanos()));
                if let Some(written) = written {
                    self.clock.observe(written);
                }
                Ok(WriteOutcome::Written(BlobVersion::new(
                    object.generation.to_string(),
                )))
            }
            Err(err) => {
                self.observe_error(&err);
                classify(op, &self.bucket, key, err).into_write_outcome("gcs", key)
            }
        }
    }
}
