//! Figure 9-6 on GCS: a paused holder wakes up after its lease expired and is
//! refused by the bucket.
//!
//! ```text
//! integration/services.sh up gcs
//! cargo run -p fencing-gcs --example gcs_zombie
//! ```
//!
//! The endpoint comes from `FENCING_GCS_ENDPOINT` (default
//! `http://127.0.0.1:4443`, the local fake-gcs-server, reached with anonymous
//! credentials), the bucket from `FENCING_GCS_BUCKET` (default
//! `fencing-example`, created over the emulator's JSON API if missing).

use std::time::Duration;

use fencing_core::memory::MemoryIssuer;
use fencing_core::{Error, FencedStore, LeaseRequest, TokenIssuer};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint =
        std::env::var("FENCING_GCS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4443".into());
    let bucket = std::env::var("FENCING_GCS_BUCKET").unwrap_or_else(|_| "fencing-example".into());

    // The emulator, reached anonymously; the bucket is created over its JSON
    // API. Against real GCS, build your own `Storage` client and call
    // `fencing_gcs::gcs_store`.
    let store = fencing_gcs::emulator::store(&endpoint, &bucket).await?;

    let issuer = MemoryIssuer::new();
    let ttl = Duration::from_millis(200);
    let key = &format!("example/figure-9-6-{}", std::process::id());

    let zombie = issuer
        .acquire(&LeaseRequest::new("report", ttl), Duration::from_secs(5))
        .await?;
    println!(
        "client 1 holds the lease with token {}, then pauses",
        zombie.token()
    );
    tokio::time::sleep(ttl * 2).await;

    let holder = issuer
        .acquire(&LeaseRequest::new("report", ttl), Duration::from_secs(5))
        .await?;
    store
        .put(key, "written by client 2".into(), holder.token())
        .await?;
    println!(
        "client 2 got token {} and wrote gs://{bucket}/{key}",
        holder.token()
    );

    match store
        .put(key, "written by client 1".into(), zombie.token())
        .await
    {
        Err(e @ Error::StaleToken { .. }) => println!("client 1 woke up and was refused: {e}"),
        other => {
            return Err(
                format!("the zombie's write should have been refused, got {other:?}").into(),
            );
        }
    }
    let stored = store.get(key).await?.expect("client 2's value");
    println!(
        "gs://{bucket}/{key} holds {:?} at token {}",
        String::from_utf8_lossy(&stored.value),
        stored.token
    );
    Ok(())
}
