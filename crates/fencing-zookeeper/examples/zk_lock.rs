//! Figure 9-6 on ZooKeeper: a holder that stops renewing loses its session
//! and lock node, the next holder's token (a czxid) is higher, and the store
//! refuses the zombie's write.
//!
//! ```sh
//! integration/services.sh up zookeeper
//! cargo run -p fencing-zookeeper --example zk_lock                      # FENCING_ZK_ADDR, default 127.0.0.1:2181
//! cargo run -p fencing-zookeeper --example zk_lock -- --cversion        # tokens from the parent's cversion
//! ```

use std::time::Duration;

use fencing_core::memory::MemoryStore;
use fencing_core::{Error, FencedStore, LeaseRequest, TokenIssuer};
use fencing_zookeeper::{TokenSource, ZkIssuer};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let addr = std::env::var("FENCING_ZK_ADDR").unwrap_or_else(|_| "127.0.0.1:2181".into());
    let source = if std::env::args().any(|a| a == "--cversion") {
        TokenSource::ParentCversion
    } else {
        TokenSource::Czxid
    };
    let issuer = ZkIssuer::connect_with(&addr, "/fencing-examples", source).await?;
    let (min, max) = issuer.session_timeouts();
    println!("ZooKeeper at {addr} grants sessions of {min:?}..={max:?}; tokens from {source:?}");
    let store = MemoryStore::new();
    let resource = format!("lock-{}", std::process::id());
    let ttl = min;
    let wait = Duration::from_secs(30);

    let first = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), wait)
        .await?;
    println!(
        "client 1: granted token {} with a {ttl:?} session",
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
