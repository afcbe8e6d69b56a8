#![doc = include_str!("../README.md")]

mod access;
mod client;
mod config;
mod error;
mod floor;
mod held;
mod issuer;
mod keys;
mod queue;
mod removal;
mod tls;
mod token;
mod verify;

pub use config::{BACKEND, ZkConfig};
pub use issuer::ZkIssuer;
pub use keys::{DEFAULT_PREFIX, KEEPER};
pub use token::TokenSource;
pub use zookeeper_client;
