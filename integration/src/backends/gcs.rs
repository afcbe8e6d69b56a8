//! GCS (fake-gcs-server): the bucket issuer and the store, on this run's
//! bucket.

use std::sync::Arc;
use std::time::Duration;

use fencing_harness::env;
use fencing_tokens::FencedStore;

use super::{Backend, bucket_issuer_url, bucket_name, on};

/// GCS, on `FENCING_GCS_ENDPOINT`.
pub const BACKEND: Backend = Backend {
    name: "gcs",
    descriptor: "gcs",
    server: Some(&env::GCS),
    url: || bucket_issuer_url("gs", &env::GCS),
    ttl: Duration::from_secs(1),
    store: Some(|| Box::pin(async { Some(Arc::new(store().await?) as Arc<dyn FencedStore>) })),
    // The client's default retry policy keeps trying a refused connection
    // for about five minutes a call (and the URL grammar sets no other).
    unreachable: None,
    #[cfg(feature = "bench")]
    bench: bench::BENCH,
};

/// A GCS store on this run's bucket at `FENCING_GCS_ENDPOINT`
/// (fake-gcs-server).
///
/// # Panics
/// If the emulator does not answer.
pub async fn store() -> Option<fencing_gcs::GcsStore> {
    on(
        Some(&env::GCS),
        fencing_gcs::emulator::store(&env::GCS.endpoint(), &bucket_name()),
    )
    .await
}

#[cfg(feature = "bench")]
mod bench {
    use std::sync::Arc;

    use bytes::Bytes;
    use fencing_gcs::GcsBackend;

    use crate::backends::plain::blob::{BlobPlain, PlainBlob};
    use crate::backends::plain::{Bench, BoxFuture, BoxResult, Plain};

    /// The object-store rows and the scale rows; fake-gcs-server keeps
    /// every object in memory, and its version is in its `Server` header.
    pub(super) const BENCH: Bench = Bench {
        plain: Plain::Blob(BlobPlain {
            open: |endpoint, bucket| {
                Box::pin(async move {
                    let store = fencing_gcs::emulator::store(&endpoint, &bucket).await?;
                    Ok(Arc::new(store.backend().clone()) as Arc<dyn PlainBlob>)
                })
            },
        }),
        scale: true,
        load: None,
        in_memory: true,
        server_header: Some("/storage/v1/b"),
    };

    impl PlainBlob for GcsBackend {
        fn plain_put<'a>(&'a self, key: &'a str, body: Bytes) -> BoxFuture<'a, BoxResult<()>> {
            Box::pin(async move {
                self.client()
                    .write_object(self.bucket(), key, body)
                    .set_content_type("application/octet-stream")
                    // The fenced side's upload: one multipart request, buffered.
                    .with_resumable_upload_threshold(fencing_gcs::MAX_VALUE_LEN + 1)
                    .send_buffered()
                    .await?;
                Ok(())
            })
        }
    }
}
