//! [`Instrumented`] as a [`TokenIssuer`].

use std::future::Future;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tracing::Instrument;
use tracing::field::Empty;

use super::{Instrumented, count_unknown, names, seconds};
use crate::keepalive::Renewal;
use crate::safety::SafetyCheck;
use crate::{Error, FencingToken, Holding, Lease, LeaseRequest, Removal, Result, TokenIssuer};

/// How a call that can lose its lease ended, for the `result` label.
fn lease_result<T>(result: &Result<T>, ok: &'static str) -> &'static str {
    match result {
        Ok(_) => ok,
        Err(Error::LeaseLost { .. }) => "lost",
        Err(_) => "error",
    }
}

/// Records one renewal (span, latency, count, lost answers), whichever way
/// it was sent.
async fn observe_renewal(
    name: &'static str,
    lease: &Lease,
    renewal: impl Future<Output = Result<Lease>>,
) -> Result<Lease> {
    let span = tracing::info_span!(
        "fencing.renew",
        issuer = name,
        resource = lease.resource(),
        token = lease.token().get(),
    );
    let started = Instant::now();
    let result = renewal.instrument(span).await;
    let label = lease_result(&result, "renewed");
    metrics::histogram!(names::RENEW_LATENCY, names::ISSUER => name, names::RESULT => label)
        .record(seconds(started.elapsed()));
    metrics::counter!(names::RENEWALS, names::ISSUER => name, names::RESULT => label).increment(1);
    count_unknown(&result, names::ISSUER, name, "renew");
    result
}

/// An issuer's own [`Renewal`], observed as its `renew` is.
#[derive(Debug)]
struct InstrumentedRenewal {
    issuer: &'static str,
    inner: Box<dyn Renewal>,
}

#[async_trait]
impl Renewal for InstrumentedRenewal {
    async fn renew(&mut self, lease: &Lease) -> Result<Lease> {
        observe_renewal(self.issuer, lease, self.inner.renew(lease)).await
    }
}

impl<T: TokenIssuer> Instrumented<T> {
    fn record_grant(&self, span: &tracing::Span, lease: &Lease) {
        span.record("token", lease.token().get());
        metrics::counter!(names::GRANTS, names::ISSUER => self.inner.name()).increment(1);
    }
}

#[async_trait]
impl<T: TokenIssuer> TokenIssuer for Instrumented<T> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn min_ttl(&self) -> Duration {
        self.inner.min_ttl()
    }

    fn reentrant(&self) -> bool {
        self.inner.reentrant()
    }

    fn expiry_needs_watching(&self) -> bool {
        self.inner.expiry_needs_watching()
    }

    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
        let name = self.inner.name();
        let span = tracing::info_span!(
            "fencing.try_acquire",
            issuer = name,
            resource = request.resource.as_str(),
            token = Empty,
        );
        let result = self
            .inner
            .try_acquire(request)
            .instrument(span.clone())
            .await;
        match &result {
            Ok(Some(lease)) => self.record_grant(&span, lease),
            Ok(None) => {
                metrics::counter!(names::ACQUIRE_BUSY, names::ISSUER => name).increment(1);
            }
            Err(_) => count_unknown(&result, names::ISSUER, name, "try_acquire"),
        }
        result
    }

    async fn acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Lease> {
        let name = self.inner.name();
        let span = tracing::info_span!(
            "fencing.acquire",
            issuer = name,
            resource = request.resource.as_str(),
            token = Empty,
        );
        let started = Instant::now();
        let result = self
            .inner
            .acquire(request, wait)
            .instrument(span.clone())
            .await;
        let label = match &result {
            Ok(lease) => {
                self.record_grant(&span, lease);
                "granted"
            }
            Err(Error::Timeout { .. }) => "timeout",
            Err(_) => "error",
        };
        metrics::histogram!(names::ACQUIRE_WAIT, names::ISSUER => name, names::RESULT => label)
            .record(seconds(started.elapsed()));
        count_unknown(&result, names::ISSUER, name, "acquire");
        result
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        observe_renewal(self.inner.name(), lease, self.inner.renew(lease)).await
    }

    fn renewal(&self, lease: &Lease) -> Option<Box<dyn Renewal>> {
        let inner = self.inner.renewal(lease)?;
        Some(Box::new(InstrumentedRenewal {
            issuer: self.inner.name(),
            inner,
        }))
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let name = self.inner.name();
        let span = tracing::info_span!(
            "fencing.release",
            issuer = name,
            resource = lease.resource(),
            token = lease.token().get(),
        );
        let result = self.inner.release(lease).instrument(span).await;
        let label = lease_result(&result, "released");
        metrics::counter!(names::RELEASES, names::ISSUER => name, names::RESULT => label)
            .increment(1);
        count_unknown(&result, names::ISSUER, name, "release");
        result
    }

    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        self.inner.holder(resource).await
    }

    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        self.inner.raise_floor(resource, floor).await
    }

    async fn remove_idle(&self, resource: &str, idle_for: Duration) -> Result<Removal> {
        self.inner.remove_idle(resource, idle_for).await
    }

    async fn verify(&self) -> Result<Vec<SafetyCheck>> {
        self.inner.verify().await
    }
}
