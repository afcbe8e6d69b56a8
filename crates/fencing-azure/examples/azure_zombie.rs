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
use fencing_core::{Error, FencedStore, LeaseRequest, TokenIssuer};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint = std::env::var("FENCING_AZURE_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:10000/devstoreaccount1".into());
    let container =
        std::env::var("FENCING_AZURE_CONTAINER").unwrap_or_else(|_| "fencing-example".into());

    // Azurite's development account, reached with an account SAS; the
    // container is created if missing. Against Azure, build your own
    // `BlobContainerClient` and call `fencing_azure::azure_store`.
    let store = fencing_azure::emulator::store(&endpoint, &container).await?;

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
        "client 2 got token {} and wrote {container}/{key}",
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
        "{container}/{key} holds {:?} at token {}",
        String::from_utf8_lossy(&stored.value),
        stored.token
    );
    Ok(())
}
