//! Metrics and `tracing` spans for any backend.
//!
//! Metrics go through the [`metrics`](https://docs.rs/metrics) facade: this
//! crate records, the application picks the exporter (Prometheus, StatsD,
//! OpenTelemetry…) by installing a recorder. With no recorder installed every
//! call is a no-op. The names, types and labels are the constants in
//! [`names`] and the table in `docs/metrics.md`.
//!
//! Most of them are recorded by [`Instrumented`], a decorator for any
//! [`TokenIssuer`](crate::TokenIssuer) or [`FencedStore`](crate::FencedStore)
//! (like a tower layer): grants, renewals, releases, stale refusals,
//! outcome-unknown results, acquire wait and renew latency, labelled with
//! the backend's [`name`](crate::FencedStore::name). It also opens a span per
//! call (`fencing.acquire`, `fencing.put`…) carrying the resource or key and
//! the token, so a subscriber sees the token with every write. Two counters
//! only the loops know are recorded inside them: compare-and-swap retries in
//! [`BlobStore`](crate::adapter::blob::BlobStore), lost leases in
//! [`KeepAlive`](crate::keepalive::KeepAlive).
//!
//! The `fencing-tokens` facade's `open_issuer` and `open_store` return instrumented
//! backends; wrap a backend built by hand yourself, once.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use fencing_core::instrument::{Instrumented, lease_span};
//! use fencing_core::memory::{MemoryIssuer, MemoryStore};
//! use fencing_core::{FencedStore, LeaseRequest, TokenIssuer};
//! use tracing::Instrument;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> fencing_core::Result<()> {
//! let issuer: Arc<dyn TokenIssuer> = Arc::new(Instrumented::new(MemoryIssuer::new()));
//! let store: Arc<dyn FencedStore> = Arc::new(Instrumented::new(MemoryStore::new()));
//! let request = LeaseRequest::new("report", Duration::from_secs(5));
//! let lease = issuer.acquire(&request, Duration::from_secs(1)).await?;
//! // Everything the holder logs carries the resource and the token.
//! async {
//!     store.fence("report", lease.token()).await?;
//!     store.put("report", "v1".into(), lease.token()).await
//! }
//! .instrument(lease_span(&lease))
//! .await?;
//! # Ok(())
//! # }
//! ```

mod issuer;
mod store;

use std::time::Duration;

use crate::{Error, Lease};

/// The metric names and label keys this crate records (see
/// `docs/metrics.md` for what each one means).
pub mod names {
    /// Counter: leases granted (`acquire`, or `try_acquire` that got one).
    /// Label `issuer`.
    pub const GRANTS: &str = "fencing_grants_total";
    /// Counter: `try_acquire` calls that found the resource held. Label
    /// `issuer`.
    pub const ACQUIRE_BUSY: &str = "fencing_acquire_busy_total";
    /// Histogram, seconds: how long `acquire` took, waiting included.
    /// Labels `issuer`, `result` (`granted`, `timeout`, `error`).
    pub const ACQUIRE_WAIT: &str = "fencing_acquire_wait_seconds";
    /// Counter: renewals by result. Labels `issuer`, `result` (`renewed`,
    /// `lost`, `error`).
    pub const RENEWALS: &str = "fencing_renewals_total";
    /// Histogram, seconds: how long a renewal took. Labels `issuer`,
    /// `result`.
    pub const RENEW_LATENCY: &str = "fencing_renew_seconds";
    /// Counter: releases by result. Labels `issuer`, `result` (`released`,
    /// `lost`, `error`).
    pub const RELEASES: &str = "fencing_releases_total";
    /// Counter: leases a keep-alive lost. Labels `issuer`, `reason`
    /// (`refused`, `expired`).
    pub const LEASES_LOST: &str = "fencing_leases_lost_total";
    /// Counter: writes accepted (`put`, `fence`, `delete`). Labels `store`,
    /// `op`.
    pub const WRITES: &str = "fencing_writes_total";
    /// Counter: writes refused for a stale token: a zombie holder. Labels
    /// `store`, `op`.
    pub const STALE_REFUSALS: &str = "fencing_stale_refusals_total";
    /// Counter: calls whose outcome is unknown (may have been applied).
    /// Labels `store` or `issuer`, and `op`.
    pub const OUTCOME_UNKNOWN: &str = "fencing_outcome_unknown_total";
    /// Counter: conditional writes the blob loop tried again. Labels
    /// `store`, `cause` (`precondition_failed`, `outcome_unknown`).
    pub const CAS_RETRIES: &str = "fencing_cas_retries_total";

    /// Label: the issuer's name (`etcd`, `redis`, `postgres`…).
    pub const ISSUER: &str = "issuer";
    /// Label: the store's name (`s3`, `postgres`…).
    pub const STORE: &str = "store";
    /// Label: the store operation (`put`, `fence`, `delete`) or issuer
    /// operation (`acquire`, `try_acquire`, `renew`, `release`).
    pub const OP: &str = "op";
    /// Label: how a call ended.
    pub const RESULT: &str = "result";
    /// Label: why a lease was lost.
    pub const REASON: &str = "reason";
    /// Label: why the blob loop tried again.
    pub const CAUSE: &str = "cause";
}

/// Records metrics and opens a `tracing` span around every call of the
/// issuer or store it wraps, labelled with the backend's name.
///
/// Everything else is forwarded unchanged (an issuer's own `acquire`, with
/// its watch; a blob store's `verify`). Wrap once: two layers count twice.
#[derive(Debug, Clone, Default)]
pub struct Instrumented<T> {
    inner: T,
}

impl<T> Instrumented<T> {
    /// Instruments `inner`.
    pub const fn new(inner: T) -> Self {
        Self { inner }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// Unwraps the backend.
    pub fn into_inner(self) -> T {
        self.inner
    }
}

/// A span for the work done under `lease` (`fencing.lease`, with
/// `resource` and `token`): instrument the holder's task with it so that
/// every event it logs carries the token.
pub fn lease_span(lease: &Lease) -> tracing::Span {
    tracing::info_span!(
        "fencing.lease",
        resource = lease.resource(),
        token = lease.token().get(),
    )
}

/// Counts a call whose outcome is unknown; `role` is [`names::STORE`] or
/// [`names::ISSUER`].
fn count_unknown<T>(
    result: &Result<T, Error>,
    role: &'static str,
    name: &'static str,
    op: &'static str,
) {
    if matches!(result, Err(Error::OutcomeUnknown { .. })) {
        metrics::counter!(names::OUTCOME_UNKNOWN, role => name, names::OP => op).increment(1);
    }
}

fn seconds(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64()
}
