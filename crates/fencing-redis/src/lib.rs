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
