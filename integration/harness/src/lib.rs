//! This workspace's test harness: what the adapters' tests, `integration/`
//! and the bench need to reach *this checkout's* servers. Unpublished; the
//! contract suites themselves live in the published `fencing-testkit`,
//! which knows no ports, variables or scripts.
//!
//! - [`env`](mod@env): the servers declared in `fencing-servers` (which
//!   `integration/services.sh` runs), their `FENCING_*` endpoint variables, `FENCING_SKIP`, and the
//!   loud failure naming a missing server and how to start it.
//! - [`object_store`]: this run's bucket and the cases the S3, GCS and
//!   Azure emulator tests run the same way.
//! - [`proxy`]: loopback TCP proxies that hold, count, lose or switch traffic.
//! - [`verify`]: reading what an issuer's `verify` reports.
//! - [`failover`]: killing a cluster's leader under load, and starting it
//!   again through `fencing_servers::run`.
//! - [`process`]: client processes that report their token, stopped and
//!   resumed with signals.
//! - [`foreign`]: other programs' lock clients (redis-py, kazoo, Curator,
//!   node-redlock) driven in lines.

pub mod env;
pub mod failover;
pub mod foreign;
pub mod object_store;
pub mod process;
pub mod proxy;
pub mod verify;

/// `e` and its causes, redacted: the core's one chain printer.
pub use fencing_core::error_chain;
