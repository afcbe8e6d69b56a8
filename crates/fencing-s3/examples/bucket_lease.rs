//! The simplest deployment: one bucket hands out the tokens and enforces
//! them. Two holders take the nightly job's lease in turn from the bucket's
//! lease record; the first, paused past its lease, wakes up and is refused
//! by the same bucket.
//!
//! ```text
//! integration/services.sh up s3
//! cargo run -p fencing-s3 --example bucket_lease
//! ```
//!
//! The endpoint comes from `FENCING_S3_ENDPOINT` (default
//! `http://127.0.0.1:9000`, the local emulator), the bucket from
//! `FENCING_S3_BUCKET` (default `fencing-example`, created if missing).
//! Against real S3 the same URL opens both: `s3://BUCKET?region=…`.

use std::time::Duration;

use fencing_core::{Error, FencedStore, LeaseRequest, TokenIssuer};
use fencing_s3::S3Config;

/// The first holder's lease; it pauses past it.
const TTL: Duration = Duration::from_millis(500);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint =
        std::env::var("FENCING_S3_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:9000".into());
    let bucket = std::env::var("FENCING_S3_BUCKET").unwrap_or_else(|_| "fencing-example".into());
    // Makes the bucket on the emulator (a real one exists already).
    fencing_s3::emulator::store(&endpoint, &bucket).await?;

    // One URL, both roles: lease records under lease_prefix=, values
    // elsewhere (the store refuses a key under the lease prefix).
    let prefix = format!("example-{}/", std::process::id());
    let url =
        format!("s3://{bucket}?endpoint={endpoint}&emulator=true&lease_prefix={prefix}leases/");
    let config = S3Config::from_url(&url)?;
    let issuer = config.connect_issuer().await?;
    let store = config.connect_store().await?;
    let key = format!("{prefix}reports/nightly");

    let first = issuer
        .acquire(&LeaseRequest::new("nightly", TTL), Duration::from_secs(5))
        .await?;
    println!("holder 1: token {}", first.token());
    // Holder 1 pauses (a GC, a frozen VM) past its lease; holder 2 waits
    // for it to expire on its own monotonic clock (the record unchanged for
    // a TTL), comparing no clocks, holder 1's or the server's.
    let second = issuer
        .acquire(
            &LeaseRequest::new("nightly", TTL * 4),
            Duration::from_secs(10),
        )
        .await?;
    println!(
        "holder 2: token {} (holder 1's lease expired)",
        second.token()
    );
    store.fence(&key, second.token()).await?;
    store
        .put(&key, "from holder 2".into(), second.token())
        .await?;

    // Holder 1 wakes up and writes as if it still held the lease.
    match store.put(&key, "from holder 1".into(), first.token()).await {
        Err(Error::StaleToken {
            presented, current, ..
        }) => println!("holder 1 refused: presented {presented}, the bucket holds {current}"),
        other => return Err(format!("holder 1's write was not refused: {other:?}").into()),
    }
    issuer.release(&second).await?;
    let read = store.get(&key).await?.ok_or("the value is missing")?;
    println!(
        "s3://{bucket}/{key} holds {:?} at token {}",
        String::from_utf8_lossy(&read.value),
        read.token
    );
    Ok(())
}
