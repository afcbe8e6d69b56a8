#![doc = include_str!("../README.md")]

mod config;
mod db;
mod error;
mod guard;
mod issuer;
mod sql;
mod store;

pub use config::SqlConfig;
pub use db::{Db, Dialect, Tables};
pub use guard::{FenceConnection, fence_transaction};
pub use issuer::SqlIssuer;
pub use store::SqlStore;
