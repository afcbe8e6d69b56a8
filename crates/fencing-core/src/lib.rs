#![doc = include_str!("../README.md")]

pub mod blob;
pub mod election;
mod error;
pub mod instrument;
mod issuer;
pub mod keepalive;
mod lease;
pub mod memory;
pub mod safety;
pub mod scenario;
mod store;
pub mod tls;
mod token;
pub mod url;

pub use error::{BoxError, Call, Error, Redacted, Result, error_chain, never_sent, tls_failure};
pub use issuer::TokenIssuer;
pub use lease::{HolderId, Holding, Lease, LeaseRequest, check_ttl, ttl_millis_ceil};
pub use store::{FencedStore, Limits, Versioned};
pub use token::FencingToken;

// Object safety and thread safety, checked at compile time.
const _: () = {
    const fn object_safe<T: ?Sized + Send + Sync + std::fmt::Debug>() {}
    object_safe::<dyn TokenIssuer>();
    object_safe::<dyn FencedStore>();
    object_safe::<dyn blob::BlobBackend>();
};
