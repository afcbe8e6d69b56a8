//! The adapter SPI: what a backend crate builds on, and an application
//! needs none of.
//!
//! - [`descriptor`]: the one description of a backend (schemes, roles, URL
//!   options, how to open it) that the registry, `fence --help`, the README
//!   table and the test matrix are generated from;
//! - [`url`]: a backend URL parsed once, options taken one by one;
//! - [`cas`]: the conditional-write engine, the mark rule on a store that
//!   only compares versions, written once as a state machine that does no
//!   I/O, and driven over a [`cas::Port`] by every way onto an object store;
//! - [`blob`]: the fenced store over any [`blob::BlobBackend`] (a port of
//!   [`cas`]), and the bucket lease;
//! - [`record`]: the record lease, a fenced lease held by conditional
//!   writes on one record (a bucket object, a DynamoDB item), written once
//!   as a state machine that does no I/O and driven over a
//!   [`record::RecordPort`];
//! - [`wake`]: waiters woken at release (one subscription per issuer), for
//!   an issuer with a notification channel;
//! - [`Recent`]: what an issuer remembers per key between tries, bounded;
//! - the error plumbing of every adapter's one error-mapping function:
//!   [`Call`] (what failed), [`tls_failure`], [`never_sent`], [`Redacted`];
//! - the TTL helpers every issuer shares: [`check_ttl`] (renewals too),
//!   [`ttl_millis_ceil`] (for servers counting in milliseconds).
//!
//! Redacting an SDK's text is [`crate::redact::redact_text`]
//! ([`Redacted`] and [`crate::error_chain`] already do it).

pub mod blob;
pub mod cas;
pub mod descriptor;
mod error;
pub mod recent;
pub mod record;
pub mod url;
pub mod wake;

pub use self::error::{Call, Redacted, never_sent, tls_failure};
pub use self::recent::Recent;
pub use crate::issuer::{TRY_AT_LEAST, poll_acquire};
pub use crate::lease::{MIN_IDLE, check_idle, check_ttl, give_up_at, ttl_millis_ceil};
