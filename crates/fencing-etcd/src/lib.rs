#![doc = include_str!("../README.md")]

mod error;
mod issuer;
mod keep_alive;
mod verify;

pub use etcd_client;
pub use issuer::{DEFAULT_MIN_TTL, DEFAULT_PREFIX, EtcdIssuer};
pub use keep_alive::KeepAlive;
