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

/// Client 1's lease; it pauses for 1.5 times this.
const TTL: Duration = Duration::from_millis(200);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint =
        std::env::var("FENCING_GCS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4443".into());
    let bucket = std::env::var("FENCING_GCS_BUCKET").unwrap_or_else(|_| "fencing-example".into());

    // The emulator, reached anonymously; the bucket is created over its JSON
    // API. Against real GCS (application default credentials; the bucket
    // exists): `fencing_gcs::GcsConfig::from_env()?.connect_store().await?`, or
    // `GcsConfig::from_url("gs://BUCKET")`.
    let store = fencing_gcs::emulator::store(&endpoint, &bucket).await?;

    // The steps are fencing_core::scenario::figure_9_6, the scenario every
    // conformance suite asserts; it fails unless the zombie is refused.
    let prefix = format!("example/{}", std::process::id());
    fencing_testkit::zombie::print_figure_9_6(&MemoryIssuer::new(), &store, TTL, &prefix).await?;
    println!("gs://{bucket}/{prefix}/file holds client 2's value; the zombie was refused");
    Ok(())
}
