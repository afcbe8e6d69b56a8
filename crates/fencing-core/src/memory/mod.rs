//! In-memory backends: an issuer with real TTL expiry, a fenced store, and a
//! blob backend for the shared compare-and-swap loop.
//!
//! They hold the full contract within one process, need no server, and are
//! what the conformance suite runs against first. They forget everything
//! when dropped, so they are for tests, demos and single-process use.

mod blob;
mod issuer;
mod store;

pub use blob::MemoryBlobBackend;
pub use issuer::MemoryIssuer;
pub use store::MemoryStore;
