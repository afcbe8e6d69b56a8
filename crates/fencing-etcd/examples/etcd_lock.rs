//! Figure 9-6 on etcd: a paused holder's lease runs out, the next holder's
//! token is higher, and the store refuses the zombie's write.
//!
//! ```sh
//! integration/services.sh up etcd
//! cargo run -p fencing-etcd --example etcd_lock     # etcd from FENCING_ETCD_ENDPOINTS (comma-separated)
//! ```

use fencing_core::TokenIssuer;
use fencing_core::memory::MemoryStore;
use fencing_etcd::EtcdConfig;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoints =
        std::env::var("FENCING_ETCD_ENDPOINTS").unwrap_or_else(|_| "http://127.0.0.1:2379".into());
    let endpoints: Vec<&str> = endpoints.split(',').map(str::trim).collect();
    let issuer = EtcdConfig::new(endpoints.iter().copied())
        .with_prefix("fencing-examples/")
        .connect_issuer()
        .await?;
    let ttl = issuer.min_ttl();
    println!("etcd at {endpoints:?}: tokens are lock keys' create_revision, TTL {ttl:?}");
    // The scenario `fence demo` narrates; an error if any step breaks the contract.
    let (store, prefix) = (MemoryStore::new(), fencing_testkit::unique_prefix());
    fencing_testkit::zombie::print_figure_9_6(&issuer, &store, ttl, &prefix).await?;
    println!("client 1's stale write and renew were refused");
    Ok(())
}
