#![doc = include_str!("../README.md")]

mod client;
mod config;
mod error;
mod floor;
mod issuer;
mod keep_alive;
mod keys;
mod queue;
mod single_key;
mod verify;

pub use config::{BACKEND, EtcdConfig};
pub use etcd_client;
pub use fencing_core::keepalive::KeepAlive;
pub use issuer::{DEFAULT_MIN_TTL, EtcdIssuer};
pub use keys::{DEFAULT_PREFIX, Layout, SINGLE_KEY_PREFIX};
pub use verify::HISTORY_REVISIONS;
