//! The adapter SPI: what a backend crate builds on, and an application
//! needs none of.
//!
//! - [`descriptor`]: the one description of a backend (schemes, roles, URL
//!   options, how to open it) that the registry, `fence --help`, the README
//!   table and the test matrix are generated from;
//! - [`url`]: a backend URL parsed once, options taken one by one;
//! - [`blob`]: the one read → check → conditional-write loop of every object
//!   store, parameterised by a [`blob::BlobBackend`], and the bucket lease;
//! - [`wake`]: waiters woken at release (one subscription per issuer), for
//!   an issuer with a notification channel;
//! - [`Recent`]: what an issuer remembers per key between tries, bounded;
//! - the error plumbing of every adapter's one error-mapping function:
//!   [`Call`] (what failed), [`tls_failure`], [`never_sent`], [`Redacted`].

pub mod blob;
pub mod descriptor;
pub mod recent;
pub mod url;
pub mod wake;

pub use self::recent::Recent;
pub use crate::error::{Call, Redacted, never_sent, tls_failure};
pub use crate::issuer::{TRY_AT_LEAST, poll_acquire};
