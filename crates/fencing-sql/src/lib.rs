#![doc = include_str!("../README.md")]

mod config;
mod db;
mod dialect;
mod error;
mod guard;
mod issuer;
mod sql;
mod store;
mod tables;
mod wake;

pub use config::{BACKEND, SqlConfig};
pub use db::Db;
pub use dialect::Dialect;
pub use guard::{FenceConnection, GuardParam, GuardStatements, fence_transaction};
pub use issuer::SqlIssuer;
pub use sql::ParamStyle;
/// The sqlx this crate is built with: [`fence_transaction`] takes its
/// `Transaction`, and `Db::postgres` and the like its pools.
pub use sqlx;
pub use store::SqlStore;
pub use tables::Tables;

/// The issuer's lease statements, as [`SqlIssuer`] runs them, for
/// `integration`'s bench, which times them bare: one copy, so the two
/// cannot drift. Not a stable API.
#[doc(hidden)]
pub mod raw {
    pub use crate::sql::{MYSQL_HELD_BIT, acquire, release, ttl_units};
}
