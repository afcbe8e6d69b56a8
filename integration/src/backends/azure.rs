//! Azure Blob (Azurite): the bucket issuer and the store, on this run's
//! container.

use std::sync::Arc;
use std::time::Duration;

use fencing_harness::env;
use fencing_tokens::FencedStore;

use super::{Backend, bucket_issuer_url, bucket_name, on};

/// Azure Blob, on `FENCING_AZURE_ENDPOINT`.
pub const BACKEND: Backend = Backend {
    name: "azure",
    descriptor: "azure",
    server: Some(&env::AZURE),
    url: || bucket_issuer_url("az", &env::AZURE),
    ttl: Duration::from_secs(1),
    store: Some(|| Box::pin(async { Some(Arc::new(store().await?) as Arc<dyn FencedStore>) })),
    // The client's default retry policy keeps trying a refused connection
    // for about eighty seconds a call (and the URL grammar sets no other).
    unreachable: None,
    #[cfg(feature = "bench")]
    bench: bench::BENCH,
};

/// An Azure Blob store on this run's container at `FENCING_AZURE_ENDPOINT`
/// (Azurite).
///
/// # Panics
/// If the emulator does not answer.
pub async fn store() -> Option<fencing_azure::AzureStore> {
    on(
        Some(&env::AZURE),
        fencing_azure::emulator::store(&env::AZURE.endpoint(), &bucket_name()),
    )
    .await
}

#[cfg(feature = "bench")]
mod bench {
    use std::num::NonZero;
    use std::sync::Arc;

    use bytes::Bytes;
    use fencing_azure::AzureBackend;
    use fencing_azure::azure_core::http::{NoFormat, RequestContent};
    use fencing_azure::azure_storage_blob::models::BlockBlobClientUploadOptions;

    use crate::backends::plain::blob::{BlobPlain, PlainBlob};
    use crate::backends::plain::{Bench, BoxFuture, BoxResult, Plain};

    /// The object-store rows and the scale rows; Azurite keeps every
    /// object in memory, and its version is in its `Server` header.
    pub(super) const BENCH: Bench = Bench {
        plain: Plain::Blob(BlobPlain {
            open: |endpoint, container| {
                Box::pin(async move {
                    let store = fencing_azure::emulator::store(&endpoint, &container).await?;
                    Ok(Arc::new(store.backend().clone()) as Arc<dyn PlainBlob>)
                })
            },
        }),
        scale: true,
        load: None,
        in_memory: true,
        server_header: Some("/devstoreaccount1?comp=list"),
    };

    impl PlainBlob for AzureBackend {
        fn plain_put<'a>(&'a self, key: &'a str, body: Bytes) -> BoxFuture<'a, BoxResult<()>> {
            Box::pin(async move {
                let len = u64::try_from(body.len())?.max(1);
                let options = BlockBlobClientUploadOptions {
                    blob_content_type: Some("application/octet-stream".to_owned()),
                    // One Put Blob, as on the fenced side.
                    partition_size: NonZero::new(len),
                    ..Default::default()
                };
                self.container()
                    .blob_client(key)
                    .upload(
                        <RequestContent<Bytes, NoFormat> as From<Bytes>>::from(body),
                        Some(options),
                    )
                    .await?;
                Ok(())
            })
        }
    }
}
