//! Figure 9-6 on Azure Blob Storage: a paused holder wakes up after its lease
//! expired and is refused by the container.
//!
//! ```text
//! integration/services.sh up azurite
//! cargo run -p fencing-azure --example azure_zombie
//! ```
//!
//! The endpoint comes from `FENCING_AZURE_ENDPOINT` (default
//! `http://127.0.0.1:10000/devstoreaccount1`, the local Azurite, reached with
//! an account SAS for its development account), the container from
//! `FENCING_AZURE_CONTAINER` (default `fencing-example`, created if missing).

use std::time::Duration;

use fencing_core::memory::MemoryIssuer;

/// Client 1's lease; it pauses for 1.5 times this.
const TTL: Duration = Duration::from_millis(200);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint = std::env::var("FENCING_AZURE_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:10000/devstoreaccount1".into());
    let container =
        std::env::var("FENCING_AZURE_CONTAINER").unwrap_or_else(|_| "fencing-example".into());

    // Azurite's development account, reached with an account SAS; the
    // container is created if missing. Against Azure (a connection string,
    // an account key, a SAS or an Entra ID credential; the container
    // exists): `fencing_azure::AzureConfig::from_env()?.connect_store().await?`.
    let store = fencing_azure::emulator::store(&endpoint, &container).await?;

    // The steps are fencing_core::scenario::figure_9_6, the scenario every
    // conformance suite asserts; it fails unless the zombie is refused.
    let prefix = format!("example/{}", std::process::id());
    fencing_testkit::zombie::print_figure_9_6(&MemoryIssuer::new(), &store, TTL, &prefix).await?;
    println!("{container}/{prefix}/file holds client 2's value; the zombie was refused");
    Ok(())
}
