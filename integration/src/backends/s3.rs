//! S3 (moto): the bucket issuer and the store, on this run's bucket.

use std::sync::Arc;
use std::time::Duration;

use fencing_harness::env;
use fencing_tokens::FencedStore;

use super::{Backend, bucket_issuer_url, bucket_name, on};

/// S3, on `FENCING_S3_ENDPOINT`.
pub const BACKEND: Backend = Backend {
    name: "s3",
    descriptor: "s3",
    server: Some(&env::S3),
    url: || bucket_issuer_url("s3", &env::S3),
    ttl: Duration::from_secs(1),
    store: Some(|| Box::pin(async { Some(Arc::new(store().await?) as Arc<dyn FencedStore>) })),
    unreachable: Some("s3://fenced?endpoint=http://127.0.0.1:1&emulator=true"),
    #[cfg(feature = "bench")]
    bench: bench::BENCH,
};

/// An S3 store on this run's bucket at `FENCING_S3_ENDPOINT` (moto).
pub async fn store() -> Option<fencing_s3::S3Store> {
    store_at(&env::S3.endpoint()).await
}

/// An S3 store on this run's bucket at `endpoint` (e.g. through a proxy).
///
/// # Panics
/// If the emulator does not answer (naming `FENCING_S3_ENDPOINT`).
pub async fn store_at(endpoint: &str) -> Option<fencing_s3::S3Store> {
    on(
        Some(&env::S3),
        fencing_s3::emulator::store(endpoint, &bucket_name()),
    )
    .await
}

#[cfg(feature = "bench")]
mod bench {
    use std::sync::Arc;

    use bytes::Bytes;
    use fencing_s3::{S3Backend, aws_sdk_s3};

    use crate::backends::plain::blob::{BlobPlain, PlainBlob};
    use crate::backends::plain::{Bench, BoxFuture, BoxResult, Plain};

    /// The object-store rows and the scale rows; moto keeps every object
    /// in memory, and its version is in its `Server` header.
    pub(super) const BENCH: Bench = Bench {
        plain: Plain::Blob(BlobPlain {
            open: |endpoint, bucket| {
                Box::pin(async move {
                    let store = fencing_s3::emulator::store(&endpoint, &bucket).await?;
                    Ok(Arc::new(store.backend().clone()) as Arc<dyn PlainBlob>)
                })
            },
        }),
        scale: true,
        load: None,
        in_memory: true,
        server_header: Some("/"),
    };

    impl PlainBlob for S3Backend {
        fn plain_put<'a>(&'a self, key: &'a str, body: Bytes) -> BoxFuture<'a, BoxResult<()>> {
            Box::pin(async move {
                self.client()
                    .put_object()
                    .bucket(self.bucket())
                    .key(key)
                    .content_type("application/octet-stream")
                    .body(aws_sdk_s3::primitives::ByteStream::from(body))
                    .send()
                    .await
                    .map_err(|e| aws_sdk_s3::error::DisplayErrorContext(e).to_string())?;
                Ok(())
            })
        }
    }
}
