#![doc = include_str!("../README.md")]

mod config;
mod durability;
mod error;
mod issuer;
mod layout;
mod scripts;
mod target;
mod wake;

pub use config::{BACKEND, RedisConfig};
pub use durability::Durability;
pub use issuer::RedisIssuer;
pub use layout::Layout;

const NAME: &str = "redis";

/// How long a grant trusts the last full check of the server's append-only
/// file and memory policy: a `CONFIG SET appendonly no` or an `allkeys-*`
/// policy set at run time stops grants within this window. The server
/// process (`run_id`), its role and its replicas are checked in every
/// grant. See the README's "Checked on connect, and again where it
/// matters".
pub const RECHECK_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);
