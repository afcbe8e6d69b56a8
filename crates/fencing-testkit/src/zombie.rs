//! The zombie scenario of Kleppmann & Riccomini's Figure 9-6, with a real
//! pause.
//!
//! Client 1 acquires the lease (token T) and sleeps past its TTL. Client 2
//! acquires (T' > T) and writes — or, with `fence_on_acquire`, only fences
//! the key. Client 1 wakes and writes with T: the store refuses it with
//! [`Error::StaleToken`](fencing_core::Error::StaleToken), and client 2's state is intact.

use std::time::Duration;

pub use fencing_core::scenario::{Event, Step};
use fencing_core::scenario::{ScenarioError, figure_9_6};
use fencing_core::{FencedStore, TokenIssuer};

use crate::unique_prefix;

/// The scenario twice: client 2 writing straight away, then client 2 only
/// fencing before the zombie wakes. Panics unless the zombie is refused
/// both times. This is what every adapter's suite runs (the
/// `zombie_is_refused` test of [`issuer_conformance!`](crate::issuer_conformance)
/// and [`store_conformance!`](crate::store_conformance)).
pub async fn zombie_is_refused(issuer: &dyn TokenIssuer, store: &dyn FencedStore, ttl: Duration) {
    for fence_on_acquire in [false, true] {
        let events = zombie_scenario(issuer, store, ttl, fence_on_acquire, |_| {}).await;
        assert!(
            events
                .iter()
                .any(|e| matches!(e.step, Step::Refused { client: 1, .. })),
            "{} × {} (fence_on_acquire: {fence_on_acquire}): no refusal in the timeline {events:?}",
            issuer.name(),
            store.name()
        );
    }
}

/// Figure 9-6 (the scenario `fence demo` narrates) on `issuer` and `store`
/// under `prefix`, with the short `ttl`, printing each step as it happens:
/// what the lock and object-store examples show. An error if a call fails
/// or a step breaks the contract.
pub async fn print_figure_9_6(
    issuer: &dyn TokenIssuer,
    store: &dyn FencedStore,
    ttl: Duration,
    prefix: &str,
) -> Result<Vec<Event>, ScenarioError> {
    let print = |e: &Event| println!("{:>7.3}s  {:?}", e.at.as_secs_f64(), e.step);
    figure_9_6(issuer, store, ttl, false, prefix, print).await
}

/// Runs [`fencing_core::scenario::figure_9_6`] on fresh names, calling
/// `observe` as each step happens, and returns the timeline. Panics on any
/// breach of the contract (or a failed call), naming it.
pub async fn zombie_scenario(
    issuer: &dyn TokenIssuer,
    store: &dyn FencedStore,
    ttl: Duration,
    fence_on_acquire: bool,
    observe: impl FnMut(&Event) + Send,
) -> Vec<Event> {
    fencing_core::scenario::figure_9_6(
        issuer,
        store,
        ttl,
        fence_on_acquire,
        &unique_prefix(),
        observe,
    )
    .await
    .unwrap_or_else(|e| panic!("Figure 9-6 (fence_on_acquire: {fence_on_acquire}): {e}"))
}
