//! The conformance suite every `fencing` issuer and store runs.
//!
//! Plain async functions, one per clause of the contracts in
//! [`fencing_core::TokenIssuer`] and [`fencing_core::FencedStore`], plus the Figure 9-6
//! [`zombie`] scenario, a randomized [`history`] checker, the object-store
//! checks of [`blob`] and those of issuers on a server-side queue
//! ([`lock_service`]). Adapters call them against their real server; the
//! in-memory backends run them first.
//!
//! The testkit finds no servers: it reads no endpoint variables and knows
//! no ports or scripts. The caller connects its backend and hands it over
//! (or `None` to skip, saying why). The one variable it reads is
//! `FENCING_SEED`, to replay a [`history`] run whose report printed that
//! seed.
//!
//! The macros [`issuer_conformance!`], [`store_conformance!`] and
//! [`blob_store_conformance!`] expand to one `#[tokio::test]` per check, so
//! the list of checks lives here once and every adapter runs all of it
//! (the zombie scenario and the history checker included):
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use fencing_core::memory::{MemoryIssuer, MemoryStore};
//! use fencing_core::{FencedStore, TokenIssuer};
//! use fencing_testkit::issuer::IssuerProfile;
//!
//! // `None` means this run asked to skip the backend (the caller's choice).
//! async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
//!     Some(Arc::new(MemoryIssuer::new()))
//! }
//! async fn store() -> Option<Arc<dyn FencedStore>> {
//!     Some(Arc::new(MemoryStore::new()))
//! }
//!
//! fencing_testkit::issuer_conformance!(issuer, IssuerProfile::with_ttl(Duration::from_millis(200)));
//! fencing_testkit::store_conformance!(store);
//!
//! // An object store: the backend, not the store (tests of the same names,
//! // so in a module of their own).
//! mod blob {
//!     use fencing_core::memory::MemoryBlobBackend;
//!     async fn backend() -> Option<MemoryBlobBackend> {
//!         Some(MemoryBlobBackend::new())
//!     }
//!     fencing_testkit::blob_store_conformance!(backend);
//! }
//! # fn main() {}
//! ```
//!
//! Where to find a server and what to do when it is missing is the
//! caller's business. A missing server should fail the test loudly, naming
//! the server and how to start it; skip only when the run asked to, and say
//! so.

pub mod blob;
pub mod guard;
pub mod history;
pub mod issuer;
pub mod lock_service;
pub mod metrics;
mod names;
pub mod refusal;
pub mod safety;
pub mod store;
pub mod wake;
pub mod zombie;

pub use names::{unique_name, unique_prefix};

/// What the macros name in the calling crate, which may not depend on
/// `fencing` under that name.
#[doc(hidden)]
pub mod __private {
    pub use fencing_core::FencedStore;
}

/// Expands to one `#[tokio::test]` per issuer-contract clause, plus the
/// zombie scenario and the history checker with the issuer in front of an
/// in-memory store (`zombie_is_refused`,
/// `history_checker_finds_no_stale_accept`).
///
/// `$make` is an async fn returning `Option<Arc<dyn TokenIssuer>>` (`None`
/// when the run asked to skip the backend); `$profile` an
/// [`issuer::IssuerProfile`], whose short TTL the zombie and the history
/// use. The calling crate needs `tokio` (with `macros` and
/// `rt-multi-thread`) as a dev-dependency.
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
            floor_puts_later_tokens_above_it,
            floor_without_room_is_refused,
            another_holders_lease_cannot_renew_or_release,
            nested_resource_names_are_independent,
            idle_records_are_removed_without_a_token_going_back,
            zombie_is_refused
        );
        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn concurrent_acquirers_hold_one_at_a_time() {
            let Some(issuer) = $make().await else { return };
            $crate::issuer::concurrent_acquirers_hold_one_at_a_time(issuer, &$profile).await;
        }
        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn history_checker_finds_no_stale_accept() {
            let Some(issuer) = $make().await else { return };
            $crate::issuer::history_checker_finds_no_stale_accept(issuer, &$profile).await;
        }
        $crate::issuer_conformance!(@guard $make, $profile;
            guard_run_ends_when_the_lease_is_lost,
            guard_release_and_drop_free_at_once,
            guard_fences_before_the_first_write
        );
        // The pause blocks the runtime's only thread, as a stopped process
        // would: the keep-alive's task cannot run meanwhile.
        #[::tokio::test(flavor = "current_thread")]
        async fn guard_sends_nothing_after_a_pause_past_the_ttl() {
            let Some(issuer) = $make().await else { return };
            $crate::guard::guard_sends_nothing_after_a_pause_past_the_ttl(issuer, &$profile).await;
        }
    };
    (@guard $make:path, $profile:expr; $($name:ident),+) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let Some(issuer) = $make().await else { return };
                $crate::guard::$name(issuer, &$profile).await;
            }
        )+
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

/// Expands to one `#[tokio::test]` per store-contract clause, plus the
/// zombie scenario and the history checker with an in-memory issuer in
/// front of the store (`zombie_is_refused`,
/// `history_checker_finds_no_stale_accept`).
///
/// `$make` is an async fn returning `Option<Arc<dyn FencedStore>>`. The
/// in-memory issuer's lease TTL is [`store::DEFAULT_TTL`] unless given as a
/// second argument (a `Duration`).
#[macro_export]
macro_rules! store_conformance {
    ($make:path) => {
        $crate::store_conformance!($make, $crate::store::DEFAULT_TTL);
    };
    ($make:path, $ttl:expr) => {
        $crate::store_conformance!(@by_ref $make;
            equal_and_higher_accepted,
            lower_refused_nothing_applied,
            fence_advances_mark,
            delete_keeps_mark,
            keys_are_independent,
            values_round_trip,
            bad_input_writes_nothing,
            verify_finds_nothing_unsafe
        );
        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn racing_writers() {
            let Some(store) = $make().await else { return };
            $crate::store::racing_writers(store).await;
        }
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn zombie_is_refused() {
            let Some(store) = $make().await else { return };
            $crate::store::zombie_is_refused(&*store, $ttl).await;
        }
        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn history_checker_finds_no_stale_accept() {
            let Some(store) = $make().await else { return };
            $crate::store::history_checker_finds_no_stale_accept(store, $ttl).await;
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

/// Expands to the [`store_conformance!`] tests on `BlobStore::new(backend)`,
/// plus `racing_16_writers_x_50_writes_take_the_precondition_path`
/// ([`blob::racing_writers_take_the_precondition_path`]): a race that must
/// make some writes lose their precondition; and the request counts of the
/// loop under contention ([`blob::contended_puts_skip_the_read`]) and of
/// writers taking turns ([`blob::writers_taking_turns_read_once`]); and
/// that it keeps no floor ([`store::keeps_no_floor`]: a conditional write
/// names one object, so a store-wide floor could not be checked in it).
///
/// `$backend` is an async fn returning `Option<B>` for a
/// `B: fencing_core::adapter::blob::BlobBackend + 'static`; an optional second argument is
/// the in-memory issuer's TTL, as for [`store_conformance!`]. It defines a
/// function `blob_store` beside the tests, so call it in a module of its
/// own.
#[macro_export]
macro_rules! blob_store_conformance {
    ($backend:path) => {
        $crate::blob_store_conformance!($backend, $crate::store::DEFAULT_TTL);
    };
    ($backend:path, $ttl:expr) => {
        async fn blob_store()
        -> ::std::option::Option<::std::sync::Arc<dyn $crate::__private::FencedStore>> {
            ::std::option::Option::Some($crate::blob::fenced($backend().await?))
        }
        $crate::store_conformance!(blob_store, $ttl);
        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn racing_16_writers_x_50_writes_take_the_precondition_path() {
            let Some(backend) = $backend().await else {
                return;
            };
            $crate::blob::racing_writers_take_the_precondition_path(backend, 16, 50).await;
        }
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn contended_puts_skip_the_read() {
            let Some(backend) = $backend().await else {
                return;
            };
            $crate::blob::contended_puts_skip_the_read(backend).await;
        }
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn writers_taking_turns_read_once() {
            let Some(backend) = $backend().await else {
                return;
            };
            $crate::blob::writers_taking_turns_read_once(backend).await;
        }
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn keeps_no_floor() {
            let Some(backend) = $backend().await else {
                return;
            };
            $crate::store::keeps_no_floor(&*$crate::blob::fenced(backend)).await;
        }
    };
}
