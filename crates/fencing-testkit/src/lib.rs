//! The conformance suite every `fencing` issuer and store runs.
//!
//! Plain async functions, one per clause of the contracts in
//! [`fencing::TokenIssuer`] and [`fencing::FencedStore`], plus the Figure 9-6
//! [`zombie`] scenario and a randomized [`history`] checker. Adapters call
//! them against their real server; the in-memory backends run them first.
//!
//! The macros [`issuer_conformance!`] and [`store_conformance!`] expand to
//! one `#[tokio::test]` per clause, so the list of checks lives here once:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use fencing::memory::{MemoryIssuer, MemoryStore};
//! use fencing::{FencedStore, TokenIssuer};
//! use fencing_testkit::issuer::IssuerProfile;
//!
//! // `None` means this run asked to skip the backend (see `env`).
//! async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
//!     Some(Arc::new(MemoryIssuer::new()))
//! }
//! async fn store() -> Option<Arc<dyn FencedStore>> {
//!     Some(Arc::new(MemoryStore::new()))
//! }
//!
//! fencing_testkit::issuer_conformance!(issuer, IssuerProfile::with_ttl(Duration::from_millis(200)));
//! fencing_testkit::store_conformance!(store);
//! # fn main() {}
//! ```
//!
//! Servers are found through [`env`]: a missing server fails the test with a
//! message naming it and how to start it.

pub mod env;
pub mod history;
pub mod issuer;
mod names;
pub mod proxy;
pub mod store;
pub mod zombie;

pub use names::{unique_name, unique_prefix};

/// Expands to one `#[tokio::test]` per issuer-contract clause.
///
/// `$make` is an async fn returning `Option<Arc<dyn TokenIssuer>>` (`None`
/// when the run asked to skip the backend, see [`env::Server::skipped`]); `$profile` an
/// [`issuer::IssuerProfile`]. The calling crate needs `tokio` (with
/// `macros` and `rt-multi-thread`) as a dev-dependency.
#[macro_export]
macro_rules! issuer_conformance {
    ($make:path, $profile:expr) => {
        $crate::issuer_conformance!(@by_ref $make, $profile;
            tokens_strictly_increase,
            one_live_holder,
            expiry_frees_the_resource,
            renew_keeps_token_and_extends,
            renew_after_loss_fails,
            release_lets_next_in_at_once,
            release_after_loss_keeps_new_holder,
            acquire_times_out_while_held,
            same_holder_keeps_its_token,
            deadline_is_conservative,
            bad_requests_are_refused,
            floor_puts_later_tokens_above_it
        );
        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn concurrent_acquirers_hold_one_at_a_time() {
            let Some(issuer) = $make().await else { return };
            $crate::issuer::concurrent_acquirers_hold_one_at_a_time(issuer, &$profile).await;
        }
    };
    (@by_ref $make:path, $profile:expr; $($name:ident),+) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let Some(issuer) = $make().await else { return };
                $crate::issuer::$name(&*issuer, &$profile).await;
            }
        )+
    };
}

/// Expands to one `#[tokio::test]` per store-contract clause.
///
/// `$make` is an async fn returning `Option<Arc<dyn FencedStore>>`.
#[macro_export]
macro_rules! store_conformance {
    ($make:path) => {
        $crate::store_conformance!(@by_ref $make;
            equal_and_higher_accepted,
            lower_refused_nothing_applied,
            fence_advances_mark,
            delete_keeps_mark,
            keys_are_independent,
            values_round_trip,
            bad_input_writes_nothing
        );
        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn racing_writers() {
            let Some(store) = $make().await else { return };
            $crate::store::racing_writers(store).await;
        }
    };
    (@by_ref $make:path; $($name:ident),+) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let Some(store) = $make().await else { return };
                $crate::store::$name(&*store).await;
            }
        )+
    };
}
