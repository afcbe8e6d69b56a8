//! SlateDB, unchanged, on a `FencedObjectStore`: a writer that was paused
//! past its lease wakes up and writes; the store refuses it, naming both
//! tokens, and the new writer's data stays.
//!
//! The lease is the bucket lease (`BlobIssuer`) in the same bucket, through
//! `ObjectStoreBackend`: one bucket holds the lock and the database.
//!
//! ```sh
//! cargo run -p fencing-object-store --example slatedb
//! ```

use std::sync::Arc;
use std::time::Duration;

use fencing_core::adapter::blob::BlobIssuer;
use fencing_core::{LeaseRequest, TokenIssuer};
use fencing_object_store::{FencedObjectStore, ObjectStoreBackend, fencing_error};
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt};
use slatedb::Db;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bucket: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let issuer = BlobIssuer::new(ObjectStoreBackend::new(bucket.clone()));
    let ttl = Duration::from_millis(300);
    let request = LeaseRequest::new("db/writer", ttl);

    // Writer A takes the lease and opens the database through a fenced store.
    let a = issuer.acquire(&request, ttl * 10).await?;
    let a_store: Arc<dyn ObjectStore> = Arc::new(FencedObjectStore::new(bucket.clone(), a.token()));
    let a_db = Db::open("db", a_store).await?;
    a_db.put(b"config", b"written by A").await?;
    a_db.flush().await?;
    println!("A (token {}) wrote and flushed", a.token());

    // A pauses (a GC, a VM freeze) past its TTL; B takes the lease and the database.
    tokio::time::sleep(ttl * 2).await;
    let b = issuer.acquire(&request, ttl * 10).await?;
    let b_store: Arc<dyn ObjectStore> = Arc::new(FencedObjectStore::new(bucket.clone(), b.token()));
    let b_db = Db::open("db", b_store).await?;
    b_db.put(b"config", b"written by B").await?;
    b_db.flush().await?;
    println!(
        "B (token {}) opened the database, wrote and flushed",
        b.token()
    );

    // A wakes up, still believing it is the writer. Its WAL write meets the
    // file B created at the same id: the store answers AlreadyExists (with
    // A's stale token as its source), and SlateDB stops A.
    a_db.put(b"config", b"written by A after its lease ended")
        .await?;
    let flushed = tokio::time::timeout(Duration::from_secs(30), a_db.flush()).await;
    match flushed.map_err(|_| "A's flush neither finished nor failed in 30 s")? {
        Ok(()) => return Err("A's write after its lease ended was accepted".into()),
        Err(e) => println!("A's flush is refused: {e}"),
    }

    // Whatever A's code does next (an overwrite, a garbage collector
    // deleting files it thinks are old), the store refuses it on every
    // object B wrote, naming both tokens.
    let mut b_files = bucket.list(Some(&"db/manifest".into()));
    let newest = futures_util::TryStreamExt::try_collect::<Vec<_>>(&mut b_files)
        .await?
        .into_iter()
        .map(|meta| meta.location)
        .max()
        .ok_or("B's manifest")?;
    let zombie = FencedObjectStore::new(bucket.clone(), a.token());
    for refused in [
        zombie.put(&newest, "A's manifest".into()).await.map(|_| ()),
        zombie.delete(&newest).await,
    ] {
        let err = refused.err().ok_or("A changed B's manifest")?;
        let (presented, current) = fencing_error(&err)
            .and_then(|f| f.stale_tokens())
            .ok_or("not a stale token")?;
        println!(
            "A's change to {newest} is refused by the store: token {presented} < mark {current}"
        );
    }

    let value = b_db.get(b"config").await?.expect("B's value");
    assert_eq!(&value[..], b"written by B");
    println!(
        "config = {:?}: B's data is intact",
        String::from_utf8_lossy(&value)
    );
    b_db.close().await?;
    issuer.release(&b).await?;
    Ok(())
}
