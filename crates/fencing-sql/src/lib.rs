#![doc = include_str!("../README.md")]

mod db;
mod error;
mod guard;
mod issuer;
mod sql;
mod store;

pub use db::{Db, Dialect, Tables};
pub use guard::{FenceConnection, fence_transaction};
pub use issuer::SqlIssuer;
pub use store::SqlStore;
