#![doc = include_str!("../README.md")]

mod clock;
mod config;
#[cfg(feature = "emulator")]
pub mod emulator;
mod error;
mod floor;
mod issuer;
mod store;
mod table;
mod transaction;
mod update;

pub use config::{BACKEND, DynamoConfig};
pub use floor::{FLOOR, FLOOR_PK, FLOOR_SHARDS, floor_item_of};
pub use issuer::{COUNTER, DynamoIssuer, HOLDER, RVN, TTL_MS};
pub use store::{DynamoStore, LOCK_TOKEN, PK, VALUE, VERSION};
pub use transaction::{FencedTransaction, ItemRefused};

/// The AWS SDK this crate is built on, so your client matches its version.
pub use aws_sdk_dynamodb;
