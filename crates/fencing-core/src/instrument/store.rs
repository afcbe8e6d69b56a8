//! [`Instrumented`] as a [`FencedStore`].

use async_trait::async_trait;
use bytes::Bytes;
use tracing::Instrument;

use super::{Instrumented, count_unknown, names};
use crate::safety::SafetyCheck;
use crate::{Error, FencedStore, FencingToken, Limits, Result, Versioned};

impl<S: FencedStore> Instrumented<S> {
    /// Records a fenced write's result: accepted, stale (with an event
    /// naming both tokens, inside the call's span), or unknown.
    fn record_write<T>(&self, span: &tracing::Span, op: &'static str, result: &Result<T>) {
        let name = self.inner.name();
        match result {
            Ok(_) => {
                metrics::counter!(names::WRITES, names::STORE => name, names::OP => op)
                    .increment(1);
            }
            Err(Error::StaleToken {
                presented, current, ..
            }) => {
                metrics::counter!(names::STALE_REFUSALS, names::STORE => name, names::OP => op)
                    .increment(1);
                span.in_scope(|| {
                    tracing::warn!(
                        presented = presented.get(),
                        current = current.get(),
                        "stale token refused: a holder wrote after its lease was taken over"
                    );
                });
            }
            Err(_) => count_unknown(result, names::STORE, name, op),
        }
    }

    fn write_span(&self, op: &'static str, key: &str, token: FencingToken) -> tracing::Span {
        tracing::info_span!(
            "fencing.write",
            op,
            store = self.inner.name(),
            key,
            token = token.get(),
        )
    }
}

#[async_trait]
impl<S: FencedStore> FencedStore for Instrumented<S> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn limits(&self) -> Limits {
        self.inner.limits()
    }

    async fn put(&self, key: &str, value: Bytes, token: FencingToken) -> Result<()> {
        let span = self.write_span("put", key, token);
        let result = self
            .inner
            .put(key, value, token)
            .instrument(span.clone())
            .await;
        self.record_write(&span, "put", &result);
        result
    }

    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        let span = tracing::debug_span!("fencing.get", store = self.inner.name(), key);
        self.inner.get(key).instrument(span).await
    }

    async fn fence(&self, key: &str, token: FencingToken) -> Result<FencingToken> {
        let span = self.write_span("fence", key, token);
        let result = self.inner.fence(key, token).instrument(span.clone()).await;
        self.record_write(&span, "fence", &result);
        result
    }

    async fn mark(&self, key: &str) -> Result<Option<FencingToken>> {
        let span = tracing::debug_span!("fencing.mark", store = self.inner.name(), key);
        self.inner.mark(key).instrument(span).await
    }

    async fn delete(&self, key: &str, token: FencingToken) -> Result<()> {
        let span = self.write_span("delete", key, token);
        let result = self.inner.delete(key, token).instrument(span.clone()).await;
        self.record_write(&span, "delete", &result);
        result
    }

    async fn floor(&self) -> Result<Option<FencingToken>> {
        self.inner.floor().await
    }

    async fn raise_floor(&self, floor: FencingToken) -> Result<FencingToken> {
        let span = tracing::info_span!(
            "fencing.raise_floor",
            store = self.inner.name(),
            floor = floor.get()
        );
        self.inner.raise_floor(floor).instrument(span).await
    }

    async fn remove_floored_marks(&self, most: u32) -> Result<u64> {
        let span = tracing::info_span!("fencing.remove_floored_marks", store = self.inner.name());
        self.inner.remove_floored_marks(most).instrument(span).await
    }

    async fn verify(&self) -> Result<Vec<SafetyCheck>> {
        self.inner.verify().await
    }
}
