//! A storage engine's writer in a process of its own, for the
//! object_store pause test: takes the lease `RESOURCE` from the bucket
//! lease (a `BlobIssuer` on an `ObjectStoreBackend`) over object_store's S3
//! client on `BUCKET` at `ENDPOINT`, prints `acquired TOKEN`, writes `KEY`
//! through a `FencedObjectStore` holding that token, then pauses a moment
//! as if about to write again (where the test stops it) and writes once
//! more, printing `accepted` or `refused PRESENTED CURRENT` (exit 3).
//!
//! It holds the bare token, not the lease's watch: a writer that read its
//! token before the pause and never looked again. The store alone must
//! refuse it.

use std::io::Write;
use std::time::Duration;

use fencing_core::adapter::blob::BlobIssuer;
use fencing_core::{LeaseRequest, TokenIssuer};
use fencing_integration::object_stores::Cloud;
use fencing_object_store::{FencedObjectStore, ObjectStoreBackend, fencing_error};
use object_store::ObjectStoreExt;
use object_store::path::Path;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [endpoint, bucket, resource, key, ttl_ms] = args.as_slice() else {
        eprintln!("usage: object-store-zombie ENDPOINT BUCKET RESOURCE KEY TTL_MS");
        return std::process::ExitCode::from(2);
    };
    let ttl = Duration::from_millis(ttl_ms.parse().expect("TTL_MS"));
    let bucket = Cloud::S3.client(endpoint, bucket).expect("client");
    let issuer = BlobIssuer::new(ObjectStoreBackend::new(bucket.clone()));
    let lease = issuer
        .acquire(&LeaseRequest::new(resource, ttl), ttl * 10)
        .await
        .expect("acquire");
    let store = FencedObjectStore::new(bucket, lease.token());
    let key = Path::from(key.as_str());
    store
        .put(&key, "written by the first holder".into())
        .await
        .expect("the holder writes");
    println!("acquired {}", lease.token());
    std::io::stdout().flush().expect("stdout");

    // About to write again: this is where the test stops the process.
    tokio::time::sleep(Duration::from_millis(500)).await;
    match store.put(&key, "written by the zombie".into()).await {
        Ok(_) => {
            println!("accepted");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => match fencing_error(&e).and_then(|f| f.stale_tokens()) {
            Some((presented, current)) => {
                println!("refused {presented} {current}");
                std::process::ExitCode::from(3)
            }
            None => {
                println!("error {e}");
                std::process::ExitCode::FAILURE
            }
        },
    }
}
