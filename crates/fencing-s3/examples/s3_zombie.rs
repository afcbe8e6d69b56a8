//! Figure 9-6 on S3: a paused holder wakes up after its lease expired and is
//! refused by the bucket.
//!
//! ```text
//! integration/services.sh up s3
//! cargo run -p fencing-s3 --example s3_zombie
//! ```
//!
//! The endpoint comes from `FENCING_S3_ENDPOINT` (default
//! `http://127.0.0.1:9000`, the local emulator), the bucket from
//! `FENCING_S3_BUCKET` (default `fencing-example`, created if missing).

use std::time::Duration;

use fencing_core::memory::MemoryIssuer;
use fencing_core::{Error, FencedStore, LeaseRequest, TokenIssuer};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint =
        std::env::var("FENCING_S3_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:9000".into());
    let bucket = std::env::var("FENCING_S3_BUCKET").unwrap_or_else(|_| "fencing-example".into());

    // The emulator's client (static test keys, path-style) and the bucket.
    // Against real S3, build your own client and call `fencing_s3::s3_store`.
    let store = fencing_s3::emulator::store(&endpoint, &bucket)
        .await
        .map_err(|e| {
            format!(
                "cannot create bucket {bucket} at {endpoint}: {}",
                aws_sdk_s3::error::DisplayErrorContext(&e)
            )
        })?;

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
        "client 2 got token {} and wrote s3://{bucket}/{key}",
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
        "s3://{bucket}/{key} holds {:?} at token {}",
        String::from_utf8_lossy(&stored.value),
        stored.token
    );
    Ok(())
}
