#![doc = include_str!("../README.md")]

mod body;
mod client;
mod config;
mod gate;
mod layer;
pub mod problem;
mod request;
mod service;

pub use body::ResponseBody;
#[cfg(feature = "reqwest")]
pub use client::RequestBuilderExt;
#[cfg(feature = "tonic")]
pub use client::{RequestExt, insert_metadata};
pub use client::{insert_headers, insert_lease_headers};
pub use layer::FencingLayer;
pub use problem::{PROBLEM_JSON, Problem, ProblemKind};
pub use request::Admission;
pub use service::{FencingService, ResponseFuture};

/// The default header carrying the token: `Fencing-Token` (header names are
/// case-insensitive; gRPC metadata keys are this lowercase form).
pub const TOKEN_HEADER: &str = "fencing-token";

/// The default header carrying the resource: `Fencing-Resource`.
pub const RESOURCE_HEADER: &str = "fencing-resource";

// Thread safety, checked at compile time.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<FencingLayer>();
    send_sync::<FencingService<()>>();
    send_sync::<Admission>();
    send_sync::<Problem>();
};
