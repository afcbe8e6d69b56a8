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

/// Client 1's lease; it pauses for 1.5 times this.
const TTL: Duration = Duration::from_millis(200);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint =
        std::env::var("FENCING_S3_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:9000".into());
    let bucket = std::env::var("FENCING_S3_BUCKET").unwrap_or_else(|_| "fencing-example".into());

    // The emulator's client (static test keys, path-style) and the bucket.
    // Against real S3 (AWS's credential chain; the bucket exists):
    // `fencing_s3::S3Config::from_env()?.connect_store().await?`, or
    // `S3Config::from_url("s3://BUCKET?region=…")`.
    let store = fencing_s3::emulator::store(&endpoint, &bucket)
        .await
        .map_err(|e| {
            format!(
                "cannot create bucket {bucket} at {endpoint}: {}",
                aws_sdk_s3::error::DisplayErrorContext(&e)
            )
        })?;

    // The steps are fencing_core::scenario::figure_9_6, the scenario every
    // conformance suite asserts; it fails unless the zombie is refused.
    let prefix = format!("example/{}", std::process::id());
    fencing_testkit::zombie::print_figure_9_6(&MemoryIssuer::new(), &store, TTL, &prefix).await?;
    println!("s3://{bucket}/{prefix}/file holds client 2's value; the zombie was refused");
    Ok(())
}
