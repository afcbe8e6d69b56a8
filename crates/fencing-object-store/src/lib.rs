//! Fencing tokens for Rust storage engines on [`object_store`].
//!
//! Engines that keep their state in object stores (WAL segments,
//! manifests, checkpoints) talk to storage through
//! `Arc<dyn ObjectStore>`. Swap in a [`FencedObjectStore`] bound to the
//! writer's lease, and a writer that was paused past its lease (a GC, a VM
//! freeze) cannot overwrite what the next holder wrote: its put is refused
//! at the store, naming both tokens, and nothing is written.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use object_store::ObjectStore;
//! # async fn open(bucket: Arc<dyn ObjectStore>, issuer: Arc<dyn fencing_core::TokenIssuer>) -> fencing_core::Result<()> {
//! use fencing_core::IssuerExt;
//! use fencing_object_store::FencedObjectStore;
//!
//! let guard = issuer.lock("db/writer").acquire().await?;
//! let store: Arc<dyn ObjectStore> = Arc::new(FencedObjectStore::new(bucket, guard.watch())); // the one line
//! # let _ = store;
//! # Ok(())
//! # }
//! ```
//!
//! [`ObjectStoreBackend`] is the other way in: the fencing blob backend on
//! any `ObjectStore`, so that `fencing_core`'s
//! [`BlobStore`](fencing_core::adapter::blob::BlobStore) (a
//! [`FencedStore`](fencing_core::FencedStore)) and the bucket lease
//! ([`BlobIssuer`](fencing_core::adapter::blob::BlobIssuer)) run on a store
//! built with object_store's builders or `parse_url_opts`.
//!
//! The two write the same frame: a key written through one reads through
//! the other, with the same mark.

mod backend;
#[cfg(feature = "conformance")]
pub mod conformance;
mod error;
mod store;
mod token;
mod version;

pub use backend::{DEFAULT_LIMITS, ObjectStoreBackend};
pub use error::fencing_error;
pub use fencing_core::keepalive::TokenSource;
pub use store::FencedObjectStore;
