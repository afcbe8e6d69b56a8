#![doc = include_str!("../README.md")]

mod config;
#[cfg(feature = "emulator")]
pub mod emulator;
mod error;

pub use config::{BACKEND, S3Config};

/// The AWS SDK this crate is built on, so your client matches its version.
pub use aws_sdk_s3;

use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::{ByteStream, DateTime};
use aws_sdk_s3::types::ExpirationStatus;
use bytes::Bytes;
use fencing_aws::ObserveDate;
use fencing_core::adapter::blob::{
    BlobBackend, BlobStore, BlobVersion, BlobWrite, Precondition, ServerClock, StoredObject,
    WriteOutcome,
};
pub use fencing_core::adapter::blob::{FRAME_HEADER_LEN, FRAME_MAGIC};
use fencing_core::safety::SafetyCheck;
use fencing_core::{Error, Limits, Result};

use crate::error::{Failure, Op, classify};

/// A fenced store on S3: the shared compare-and-swap loop of
/// [`fencing_core::adapter::blob::BlobStore`] on an [`S3Backend`].
pub type S3Store = BlobStore<S3Backend>;

/// A fenced lease that needs nothing but the bucket: the shared bucket
/// issuer of [`fencing_core::adapter::blob::BlobIssuer`] on a
/// [`S3Backend`], one lease record per resource under its prefix.
pub type S3Issuer = fencing_core::adapter::blob::BlobIssuer<S3Backend>;

/// A fenced [`S3Store`] on `bucket`, through your configured `client`.
///
/// The same as `S3Store::new(S3Backend::new(client, bucket))`.
pub fn s3_store(client: Client, bucket: impl Into<String>) -> S3Store {
    BlobStore::new(S3Backend::new(client, bucket))
}

/// An ETag that no object has, for a write whose response carried none: the
/// next fast-path write then fails its precondition and reads again.
const UNKNOWN_ETAG: &str = "\"fencing-s3-unknown-etag\"";

/// The [`BlobBackend`] for one S3 bucket: head, read and conditional
/// `PutObject` (`If-Match: <ETag>`, `If-None-Match: *`).
///
/// It takes your own [`aws_sdk_s3::Client`], already configured with
/// credentials, region and endpoint. Objects are stored *framed* (see the
/// crate docs) so that the ETag covers the token.
#[derive(Clone, Debug)]
pub struct S3Backend {
    client: Client,
    bucket: String,
    /// For `verify`'s transport check; unknown for a caller's own client.
    endpoint: Option<String>,
    /// Fed with the `Date` of every answer, for [`BlobBackend::server_now`];
    /// shared by clones, which talk to the same server.
    clock: Arc<ServerClock>,
}

impl S3Backend {
    /// A backend writing to `bucket` through `client`. Nothing is sent until
    /// the first operation; a missing bucket is then an
    /// [`Error::Backend`] that is not retryable.
    pub fn new(client: Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
            endpoint: None,
            clock: Arc::default(),
        }
    }

    /// Names the endpoint `client` talks to (`None`: AWS itself), for
    /// `verify`'s transport check; [`S3Config`] does it.
    #[must_use]
    pub fn with_endpoint(mut self, endpoint: Option<&str>) -> Self {
        self.endpoint = Some(endpoint.map_or_else(
            || "https://s3.amazonaws.com".to_owned(),
            fencing_core::redact,
        ));
        self
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Wraps the backend in the shared fenced-write loop.
    pub fn into_store(self) -> S3Store {
        BlobStore::new(self)
    }

    /// The limits this backend enforces before sending anything: keys up to
    /// 1024 bytes, values up to 5 GiB less the frame header, any `u64` token.
    pub fn limits() -> Limits {
        fencing_core::adapter::blob::S3_LIMITS
    }
}

fn version_from(e_tag: Option<&str>) -> BlobVersion {
    BlobVersion::new(e_tag.unwrap_or(UNKNOWN_ETAG))
}

/// The SDK's time as a `SystemTime`; `None` for one it cannot represent.
fn system_time(time: Option<&DateTime>) -> Option<SystemTime> {
    time.and_then(|t| SystemTime::try_from(*t).ok())
}

impl S3Backend {
    /// The interceptor that feeds this backend's clock, for one request;
    /// a clone of it tells the `Date` of the answer the request returned.
    fn observe_date(&self) -> ObserveDate {
        ObserveDate::new(&self.clock)
    }

    /// A ranged GET of an empty object answers 416 with no ETag: ask HEAD
    /// for the version (an empty object has no frame: it is foreign).
    async fn head_empty(&self, key: &str) -> Result<Option<StoredObject>> {
        let date = self.observe_date();
        let result = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .customize()
            .interceptor(date.clone())
            .send()
            .await;
        match result {
            Ok(output) => Ok(Some(
                StoredObject::new(version_from(output.e_tag()), Bytes::new())
                    .modified_at(system_time(output.last_modified()))
                    .answered_at(date.answered()),
            )),
            Err(err) => match classify(Op::Head, &self.bucket, key, err) {
                Failure::NotFound => Ok(None),
                Failure::Error(e) => Err(e),
                _ => Err(unexpected("an answer to HeadObject", key)),
            },
        }
    }
}

#[async_trait]
impl BlobBackend for S3Backend {
    fn name(&self) -> &'static str {
        "s3"
    }

    fn limits(&self) -> Limits {
        Self::limits()
    }

    fn endpoint(&self) -> Option<String> {
        self.endpoint.clone()
    }

    /// The `Date` of the latest answer to a read or write, run on by the
    /// monotonic clock.
    fn server_now(&self) -> Option<SystemTime> {
        self.clock.now()
    }

    /// A lifecycle rule that expires current objects deletes them, marks
    /// and all (a zombie may then create the key again at any token): a
    /// warning naming each such rule. A rule on another prefix is harmless;
    /// only you know which prefixes are fenced.
    async fn bucket_checks(&self) -> Result<Vec<SafetyCheck>> {
        const NAME: &str = "no lifecycle expiration";
        let answer = self
            .client
            .get_bucket_lifecycle_configuration()
            .bucket(&self.bucket)
            .send()
            .await;
        let output = match answer {
            Ok(output) => output,
            Err(e) if e.code() == Some("NoSuchLifecycleConfiguration") => {
                return Ok(vec![SafetyCheck::pass(
                    NAME,
                    "the bucket has no lifecycle rules",
                )]);
            }
            Err(e) if e.code() == Some("NotImplemented") => {
                return Ok(vec![SafetyCheck::pass(
                    NAME,
                    "this server has no lifecycle rules (NotImplemented)",
                )]);
            }
            Err(e) => {
                let why = match (e.code(), e.message()) {
                    (Some(code), Some(message)) => format!("{code}: {message}"),
                    _ => aws_sdk_s3::error::DisplayErrorContext(&e).to_string(),
                };
                return Ok(vec![SafetyCheck::warn(
                    NAME,
                    format!("could not read the bucket's lifecycle rules: {why}"),
                )]);
            }
        };
        let expiring: Vec<String> = output
            .rules()
            .iter()
            .filter(|r| *r.status() == ExpirationStatus::Enabled)
            .filter(|r| {
                r.expiration()
                    .is_some_and(|e| e.days().is_some() || e.date().is_some())
            })
            .map(|r| {
                let prefix = r
                    .filter()
                    .and_then(|f| f.prefix().or_else(|| f.and().and_then(|a| a.prefix())))
                    .unwrap_or("");
                format!("{:?} (prefix {prefix:?})", r.id().unwrap_or("unnamed"))
            })
            .collect();
        Ok(vec![if expiring.is_empty() {
            SafetyCheck::pass(NAME, "no enabled rule expires current objects")
        } else {
            SafetyCheck::warn(
                NAME,
                format!(
                    "lifecycle rules expire objects: {}. An expired fenced object takes its mark with it, \
                     and a zombie's write then creates it again; keep expiration off fenced prefixes",
                    expiring.join(", ")
                ),
            )
        }])
    }

    /// A GET of the whole object, or a ranged one: the version and the
    /// frame header together, for what a HEAD costs.
    async fn read_range(&self, key: &str, len: Option<usize>) -> Result<Option<StoredObject>> {
        let op = if len.is_some() { Op::Head } else { Op::Read };
        let date = self.observe_date();
        let result = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .set_range(len.map(|len| format!("bytes=0-{}", len.max(1) - 1)))
            .customize()
            .interceptor(date.clone())
            .send()
            .await;
        let output = match result {
            Ok(output) => output,
            Err(err) => {
                return match classify(op, &self.bucket, key, err) {
                    Failure::NotFound => Ok(None),
                    Failure::EmptyRange => self.head_empty(key).await,
                    Failure::PreconditionFailed => {
                        Err(unexpected("a failed precondition on GetObject", key))
                    }
                    Failure::Error(e) => Err(e),
                };
            }
        };
        let version = version_from(output.e_tag());
        let modified = system_time(output.last_modified());
        let bytes = output
            .body
            .collect()
            .await
            .map_err(|e| Error::backend("s3", true, e))?
            .into_bytes();
        Ok(Some(
            StoredObject::new(version, bytes)
                .modified_at(modified)
                .answered_at(date.answered()),
        ))
    }

    fn deletes_conditionally(&self) -> bool {
        true
    }

    /// `DeleteObject` with `If-Match`, not retried by the SDK: a
    /// precondition failed (412) or a key gone (404) is `false`.
    async fn delete_if(&self, key: &str, version: &BlobVersion) -> Result<bool> {
        let no_retries =
            aws_sdk_s3::config::Builder::default().retry_config(RetryConfig::disabled());
        let answer = self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .if_match(version.as_str())
            .customize()
            .config_override(no_retries)
            .interceptor(self.observe_date())
            .send()
            .await;
        match answer {
            Ok(_) => Ok(true),
            Err(err) => match classify(Op::Delete, &self.bucket, key, err) {
                Failure::PreconditionFailed | Failure::NotFound => Ok(false),
                Failure::Error(e) => Err(e),
                Failure::EmptyRange => Err(unexpected("an empty range on DeleteObject", key)),
            },
        }
    }

    async fn write(&self, key: &str, write: BlobWrite) -> Result<WriteOutcome> {
        let mut request = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type("application/octet-stream")
            .body(ByteStream::from(write.body));
        for (name, value) in write.hint.to_pairs() {
            request = request.metadata(name, value);
        }
        request = match &write.precondition {
            Precondition::Absent => request.if_none_match("*"),
            Precondition::Matches(version) => request.if_match(version.as_str()),
        };
        // No retry inside the SDK: a retried write that was applied fails
        // its precondition, and the loop would read that as a lost race.
        let no_retries =
            aws_sdk_s3::config::Builder::default().retry_config(RetryConfig::disabled());
        let request = request
            .customize()
            .config_override(no_retries)
            .interceptor(self.observe_date());
        match request.send().await {
            Ok(output) => Ok(WriteOutcome::Written(version_from(output.e_tag()))),
            Err(err) => classify(Op::Write, &self.bucket, key, err).into_write_outcome("s3", key),
        }
    }
}

/// An answer `classify` never gives for the operation (kept as an error, not
/// a panic).
fn unexpected(what: &str, key: &str) -> Error {
    Error::backend("s3", false, format!("unexpected {what} for {key:?}"))
}
