#![doc = include_str!("../README.md")]

mod error;
mod issuer;
mod verify;

pub use issuer::{DEFAULT_PREFIX, TokenSource, ZkIssuer};
pub use zookeeper_client;
