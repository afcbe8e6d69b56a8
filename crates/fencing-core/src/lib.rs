#![doc = include_str!("../README.md")]

pub mod adapter;
pub mod auth;
pub mod election;
mod error;
pub mod instrument;
mod issuer;
pub mod keepalive;
mod lease;
pub mod lock;
pub mod memory;
mod percent;
pub mod redact;
pub mod safety;
pub mod scenario;
mod store;
pub mod tls;
mod token;

pub use error::{BoxError, Error, Result, error_chain};
pub use issuer::{Removal, TokenIssuer};
pub use lease::{HolderId, Holding, Lease, LeaseRequest};
pub use lock::{IssuerExt, LeaseGuard, Lock, SharedStore};
pub use redact::redact;
pub use store::{FencedStore, Limits, Versioned};
pub use token::FencingToken;

// Object safety and thread safety, checked at compile time.
const _: () = {
    const fn object_safe<T: ?Sized + Send + Sync + std::fmt::Debug>() {}
    object_safe::<dyn TokenIssuer>();
    object_safe::<dyn FencedStore>();
    object_safe::<dyn adapter::blob::BlobBackend>();
};
