#![doc = include_str!("../README.md")]

mod client;
mod error;
mod floor;
mod issuer;
mod keep_alive;
mod keys;
mod queue;
mod verify;

pub use etcd_client;
pub use issuer::{DEFAULT_MIN_TTL, EtcdIssuer};
pub use keep_alive::KeepAlive;
pub use keys::DEFAULT_PREFIX;
