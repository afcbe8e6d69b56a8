//! What a test of the counters and histograms `fencing_core::instrument`
//! records needs: the test run under a recorder of its own, then the
//! series queried by name and labels.
//!
//! Each [`recorded`] run has its own current-thread runtime inside
//! `metrics::with_local_recorder`, so tests running side by side never see
//! each other's counts.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fencing_core::instrument::names;
use fencing_core::keepalive::{KeepAlive, LostReason};
use fencing_core::{LeaseRequest, TokenIssuer};
use metrics_util::CompositeKey;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// Runs `test` on a current-thread runtime with a recorder of its own;
/// returns its output and what was recorded.
///
/// # Panics
/// If the runtime cannot be built, or as `test` does.
pub fn recorded<F: Future>(test: F) -> (F::Output, Recorded) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let out = metrics::with_local_recorder(&recorder, || runtime.block_on(test));
    let series = snapshotter.snapshot().into_vec();
    let series = series.into_iter().map(|(key, .., value)| (key, value));
    (out, Recorded(series.collect()))
}

/// A lease on `resource` (free) kept alive, then released behind the
/// keep-alive's back: its next renewal is refused, which it must notice
/// within three `ttl`s. Run it under [`recorded`] on an instrumented
/// issuer, then [`Recorded::assert_one_lost_lease`].
///
/// # Panics
/// If a call fails or the loss goes unnoticed or unrefused.
pub async fn release_behind_a_keep_alive(
    issuer: Arc<dyn TokenIssuer>,
    resource: &str,
    ttl: Duration,
) {
    let lease = issuer
        .try_acquire(&LeaseRequest::new(resource, ttl))
        .await
        .unwrap()
        .expect("a fresh resource is free");
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease.clone());
    issuer.release(&lease).await.unwrap();
    let lost = tokio::time::timeout(ttl * 3, keep_alive.lost())
        .await
        .expect("the keep-alive notices within the TTL");
    assert!(matches!(lost.reason(), LostReason::Refused), "{lost}");
}

/// What a [`recorded`] run recorded.
#[derive(Debug)]
pub struct Recorded(Vec<(CompositeKey, DebugValue)>);

impl Recorded {
    /// The values of every series named `name` whose labels include all of
    /// `labels`.
    fn series(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&DebugValue> {
        let Self(series) = self;
        series
            .iter()
            .filter(|(key, _)| {
                let key = key.key();
                key.name() == name
                    && labels
                        .iter()
                        .all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v))
            })
            .map(|(_, value)| value)
            .collect()
    }

    /// A counter summed over the matching series (0 if none).
    ///
    /// # Panics
    /// If a matching series is not a counter.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.series(name, labels)
            .into_iter()
            .map(|v| match v {
                DebugValue::Counter(n) => *n,
                other => panic!("{name} is not a counter: {other:?}"),
            })
            .sum()
    }

    /// How many samples a histogram holds over the matching series.
    ///
    /// # Panics
    /// If a matching series is not a histogram.
    pub fn samples(&self, name: &str, labels: &[(&str, &str)]) -> usize {
        self.series(name, labels)
            .into_iter()
            .map(|v| match v {
                DebugValue::Histogram(samples) => samples.len(),
                other => panic!("{name} is not a histogram: {other:?}"),
            })
            .sum()
    }

    /// Asserts [`release_behind_a_keep_alive`] on the issuer labelled
    /// `issuer` counted one grant, one lease lost as refused and one lost
    /// renewal.
    ///
    /// # Panics
    /// On any other count.
    pub fn assert_one_lost_lease(&self, issuer: &str) {
        let labelled = |key, value| [(names::ISSUER, issuer), (key, value)];
        assert_eq!(self.counter(names::GRANTS, &[(names::ISSUER, issuer)]), 1);
        let refused = labelled(names::REASON, "refused");
        assert_eq!(self.counter(names::LEASES_LOST, &refused), 1);
        let lost = labelled(names::RESULT, "lost");
        assert_eq!(self.counter(names::RENEWALS, &lost), 1);
    }
}
