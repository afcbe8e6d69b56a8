//! Figure 9-6 on etcd: a paused holder's lease runs out, the next holder's
//! token is higher, and the store refuses the zombie's write.
//!
//! ```sh
//! integration/services.sh up etcd
//! cargo run -p fencing-etcd --example etcd_lock     # etcd from FENCING_ETCD_ENDPOINTS (comma-separated)
//! ```

use std::time::Duration;

use fencing_core::memory::MemoryStore;
use fencing_core::{Error, FencedStore, LeaseRequest, TokenIssuer};
use fencing_etcd::EtcdIssuer;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let endpoints =
        std::env::var("FENCING_ETCD_ENDPOINTS").unwrap_or_else(|_| "http://127.0.0.1:2379".into());
    let endpoints: Vec<&str> = endpoints.split(',').map(str::trim).collect();
    let issuer = EtcdIssuer::connect(&endpoints)
        .await?
        .with_prefix("fencing-examples/")?;
    let store = MemoryStore::new();
    let resource = format!("lock/{}", std::process::id());
    let ttl = issuer.min_ttl();
    let wait = Duration::from_secs(30);

    let first = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), wait)
        .await?;
    println!(
        "client 1: granted token {} (the lock key's create_revision), TTL {ttl:?}",
        first.token()
    );
    let first = issuer.renew(&first).await?;
    println!("client 1: renewed, same token {}", first.token());

    println!("client 1: pauses for {:?} without renewing", ttl * 2);
    tokio::time::sleep(ttl * 2).await;

    let second = issuer
        .acquire(&LeaseRequest::new(&resource, ttl * 5), wait)
        .await?;
    println!("client 2: granted token {}", second.token());
    store
        .put("file", "written by client 2".into(), second.token())
        .await?;
    println!("client 2: wrote with token {}", second.token());

    match store
        .put("file", "written by client 1".into(), first.token())
        .await
    {
        Err(e @ Error::StaleToken { .. }) => println!("client 1: refused: {e}"),
        other => println!("client 1: expected a refusal, got {other:?}"),
    }
    match issuer.renew(&first).await {
        Err(e @ Error::LeaseLost { .. }) => println!("client 1: renew refused: {e}"),
        other => println!("client 1: expected LeaseLost, got {other:?}"),
    }
    issuer.release(&second).await?;
    println!("client 2: released");
    Ok(())
}
