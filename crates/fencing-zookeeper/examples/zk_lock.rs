//! Figure 9-6 on ZooKeeper: a holder that stops renewing loses its session
//! and lock node, the next holder's token (a czxid) is higher, and the store
//! refuses the zombie's write.
//!
//! ```sh
//! integration/services.sh up zookeeper
//! cargo run -p fencing-zookeeper --example zk_lock                      # FENCING_ZK_ADDR, default 127.0.0.1:2181
//! cargo run -p fencing-zookeeper --example zk_lock -- --cversion        # tokens from the parent's cversion
//! ```

use fencing_core::memory::MemoryStore;
use fencing_zookeeper::{TokenSource, ZkConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("FENCING_ZK_ADDR").unwrap_or_else(|_| "127.0.0.1:2181".into());
    // A prefix is for one token source: a czxid issuer's may have idle
    // names removed, which would restart a cversion count.
    let (source, root) = if std::env::args().any(|a| a == "--cversion") {
        (TokenSource::ParentCversion, "/fencing-examples-cversion")
    } else {
        (TokenSource::Czxid, "/fencing-examples")
    };
    let issuer = ZkConfig::new(&addr)
        .with_prefix(root)
        .with_token_source(source)
        .connect_issuer()
        .await?;
    let (min, max) = issuer.session_timeouts();
    println!("ZooKeeper at {addr} grants sessions of {min:?}..={max:?}; tokens from {source:?}");
    // The scenario `fence demo` narrates, with the shortest session; an
    // error if any step breaks the contract.
    let (store, prefix) = (MemoryStore::new(), fencing_testkit::unique_prefix());
    fencing_testkit::zombie::print_figure_9_6(&issuer, &store, min, &prefix).await?;
    println!("client 1's stale write and renew were refused");
    Ok(())
}
