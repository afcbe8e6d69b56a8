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

/// How long a Redis server's passed safety check is trusted: a grant
/// within this time of the last full check (four `INFO` sections: the
/// server process, its role and replicas, the append-only file, the
/// memory policy) skips it. A server reconfigured unsafe at run time
/// (`CONFIG SET appendonly no`, an evicting `maxmemory-policy`, a replica
/// attached) is refused from the next full check, at most this long after
/// the change; one demoted to a replica refuses the grant's writes at once.
/// The verdict lives on that server process only (never replicated nor in
/// its append-only file), so another node or a restarted process is
/// always checked first.
pub const RECHECK_WINDOW: std::time::Duration =
    std::time::Duration::from_millis(scripts::VERDICT_MS);

const NAME: &str = "redis";
