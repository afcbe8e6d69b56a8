//! The metrics and spans of `instrument`, on the memory backends: every
//! counter moves when it should, and the spans carry the token.
//!
//! Each test runs (`fencing_testkit::metrics::recorded`) on its own
//! current-thread runtime inside `metrics::with_local_recorder`, so tests
//! running side by side never see each other's counts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencing_core::adapter::blob::{BlobStore, HookedWrites};
use fencing_core::instrument::{Instrumented, lease_span, names};
use fencing_core::memory::{MemoryBlobBackend, MemoryIssuer, MemoryStore};
use fencing_core::{Error, FencedStore, FencingToken, LeaseRequest, TokenIssuer};
use fencing_testkit::metrics::{recorded, release_behind_a_keep_alive};
use tracing::Instrument;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[allow(dead_code)] // each test binary uses a part
mod common;

use common::LosesAnswers;

const TTL: Duration = Duration::from_millis(300);

#[test]
fn issuer_calls_count_grants_renewals_releases_and_time_acquire_and_renew() {
    let ((), m) = recorded(async {
        let issuer = Instrumented::new(MemoryIssuer::new());
        let lease = issuer
            .acquire(&LeaseRequest::new("r", TTL), Duration::from_secs(1))
            .await
            .unwrap();
        assert!(
            issuer
                .try_acquire(&LeaseRequest::new("r", TTL))
                .await
                .unwrap()
                .is_none()
        );
        let timeout = issuer
            .acquire(&LeaseRequest::new("r", TTL), Duration::from_millis(20))
            .await;
        assert!(matches!(timeout, Err(Error::Timeout { .. })), "{timeout:?}");
        let lease = issuer.renew(&lease).await.unwrap();
        issuer.release(&lease).await.unwrap();
        assert!(issuer.release(&lease).await.is_err());
        assert!(issuer.renew(&lease).await.is_err());
    });
    let issuer = [(names::ISSUER, "memory")];
    assert_eq!(m.counter(names::GRANTS, &issuer), 1);
    assert!(m.counter(names::ACQUIRE_BUSY, &issuer) >= 1);
    let granted = [(names::ISSUER, "memory"), (names::RESULT, "granted")];
    let timed_out = [(names::ISSUER, "memory"), (names::RESULT, "timeout")];
    assert_eq!(m.samples(names::ACQUIRE_WAIT, &granted), 1);
    assert_eq!(m.samples(names::ACQUIRE_WAIT, &timed_out), 1);
    let renewed = [(names::ISSUER, "memory"), (names::RESULT, "renewed")];
    let lost = [(names::ISSUER, "memory"), (names::RESULT, "lost")];
    assert_eq!(m.counter(names::RENEWALS, &renewed), 1);
    assert_eq!(m.counter(names::RENEWALS, &lost), 1);
    assert_eq!(m.samples(names::RENEW_LATENCY, &issuer), 2);
    let released = [(names::ISSUER, "memory"), (names::RESULT, "released")];
    assert_eq!(m.counter(names::RELEASES, &released), 1);
    assert_eq!(m.counter(names::RELEASES, &lost), 1);
}

#[test]
fn a_zombie_write_counts_one_stale_refusal_with_the_stores_label() {
    let ((), m) = recorded(async {
        let store = Instrumented::new(MemoryStore::new());
        store.fence("k", FencingToken::new(34)).await.unwrap();
        store
            .put("k", "34".into(), FencingToken::new(34))
            .await
            .unwrap();
        let zombie = store.put("k", "33".into(), FencingToken::new(33)).await;
        assert!(
            matches!(zombie, Err(Error::StaleToken { .. })),
            "{zombie:?}"
        );
        store.delete("k", FencingToken::new(34)).await.unwrap();
    });
    let memory = [(names::STORE, "memory")];
    assert_eq!(m.counter(names::STALE_REFUSALS, &memory), 1);
    assert_eq!(
        m.counter(names::STALE_REFUSALS, &[(names::OP, "put")]),
        1,
        "labelled with the operation"
    );
    assert_eq!(m.counter(names::WRITES, &memory), 3);
    assert_eq!(
        m.counter(
            names::WRITES,
            &[(names::STORE, "memory"), (names::OP, "fence")]
        ),
        1
    );
    assert_eq!(m.counter(names::OUTCOME_UNKNOWN, &[]), 0);
}

#[test]
fn sixteen_racing_writers_count_cas_retries() {
    let (backend, m) = recorded(async {
        let store = Arc::new(Instrumented::new(BlobStore::new(Arc::new(
            MemoryBlobBackend::new(),
        ))));
        common::sixteen_writers_at_one_token(store.clone()).await;
        store.inner().backend().clone()
    });
    let failures = backend.precondition_failures();
    assert!(failures > 0, "the race never lost a precondition");
    let retries = m.counter(
        names::CAS_RETRIES,
        &[
            (names::STORE, "memory-blob"),
            (names::CAUSE, "precondition_failed"),
        ],
    );
    assert_eq!(retries, failures, "one retry per lost precondition");
    assert_eq!(
        m.counter(names::WRITES, &[(names::STORE, "memory-blob")]),
        160
    );
}

#[test]
fn an_unknown_outcome_is_counted_once_per_call_and_once_per_retry() {
    let (result, m) = recorded(async {
        let store = Instrumented::new(
            BlobStore::new(HookedWrites::new(
                MemoryBlobBackend::new(),
                LosesAnswers::new(u32::MAX, None),
            ))
            .with_max_attempts(2),
        );
        store.put("k", "v".into(), FencingToken::new(7)).await
    });
    assert!(
        matches!(result, Err(Error::OutcomeUnknown { .. })),
        "{result:?}"
    );
    assert_eq!(
        m.counter(
            names::OUTCOME_UNKNOWN,
            &[(names::STORE, "loses-answers"), (names::OP, "put")]
        ),
        1
    );
    assert_eq!(
        m.counter(names::CAS_RETRIES, &[(names::CAUSE, "outcome_unknown")]),
        2
    );
    assert_eq!(m.counter(names::WRITES, &[]), 0);
}

#[test]
fn a_keep_alive_that_is_refused_counts_a_lost_lease() {
    let ((), m) = recorded(async {
        let issuer = Arc::new(Instrumented::new(MemoryIssuer::new()));
        release_behind_a_keep_alive(issuer, "r", TTL).await;
    });
    m.assert_one_lost_lease("memory");
}

#[test]
fn nothing_is_recorded_without_a_recorder() {
    // No recorder installed: the instrumented backends work as before.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = Instrumented::new(MemoryStore::new());
        store
            .put("k", "v".into(), FencingToken::new(2))
            .await
            .unwrap();
        assert!(
            store
                .put("k", "v".into(), FencingToken::new(1))
                .await
                .is_err()
        );
    });
}

// ---- spans ----

/// Fields of one span or event, as text.
type Fields = BTreeMap<String, String>;

#[derive(Default)]
struct FieldText(Fields);

impl Visit for FieldText {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// What the test subscriber saw: every closed span with its fields, and
/// every event with the fields of all the spans it was in.
#[derive(Clone, Default)]
struct Seen {
    spans: Arc<Mutex<Vec<(String, Fields)>>>,
    events: Arc<Mutex<Vec<(String, Fields)>>>,
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Seen {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = FieldText::default();
        attrs.record(&mut fields);
        ctx.span(id).unwrap().extensions_mut().insert(fields.0);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).unwrap();
        let mut fields = FieldText(span.extensions().get::<Fields>().cloned().unwrap());
        values.record(&mut fields);
        span.extensions_mut().replace(fields.0);
    }
    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let mut fields = FieldText::default();
        event.record(&mut fields);
        let message = fields.0.remove("message").unwrap_or_default();
        for span in ctx.event_scope(event).into_iter().flatten() {
            for (k, v) in span.extensions().get::<Fields>().unwrap() {
                fields.0.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        self.events.lock().unwrap().push((message, fields.0));
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let span = ctx.span(&id).unwrap();
        let fields = span.extensions().get::<Fields>().cloned().unwrap();
        self.spans
            .lock()
            .unwrap()
            .push((span.name().to_owned(), fields));
    }
}

fn fields(pairs: &[(&str, &str)]) -> impl Fn(&Fields) -> bool {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |f| pairs.iter().all(|(k, v)| f.get(k) == Some(v))
}

#[test]
fn spans_carry_resource_key_and_token_from_acquire_to_fence_to_put() {
    let seen = Seen::default();
    let subscriber = tracing_subscriber::registry().with(seen.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let token = tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(async {
            let issuer = Instrumented::new(MemoryIssuer::new());
            let store = Instrumented::new(MemoryStore::new());
            let ttl = Duration::from_millis(50);
            let zombie = issuer
                .acquire(&LeaseRequest::new("report", ttl), Duration::from_secs(1))
                .await
                .unwrap();
            tokio::time::sleep(ttl * 2).await;
            let lease = issuer
                .acquire(&LeaseRequest::new("report", ttl), Duration::from_secs(1))
                .await
                .unwrap();
            async {
                store.fence("report/key", lease.token()).await.unwrap();
                store
                    .put("report/key", "v".into(), lease.token())
                    .await
                    .unwrap();
                tracing::info!("written");
            }
            .instrument(lease_span(&lease))
            .await;
            let refused = store.put("report/key", "z".into(), zombie.token()).await;
            assert!(refused.is_err());
            (zombie.token().get(), lease.token().get())
        })
    });
    let (zombie, token) = (token.0.to_string(), token.1.to_string());
    let spans = seen.spans.lock().unwrap().clone();
    let has = |name: &str, pairs: &[(&str, &str)]| {
        let matches = fields(pairs);
        spans.iter().any(|(n, f)| n == name && matches(f))
    };
    assert!(
        has(
            "fencing.acquire",
            &[
                ("issuer", "memory"),
                ("resource", "report"),
                ("token", &token)
            ]
        ),
        "the acquire span records the granted token: {spans:?}"
    );
    for op in ["fence", "put"] {
        assert!(
            has(
                "fencing.write",
                &[
                    ("op", op),
                    ("store", "memory"),
                    ("key", "report/key"),
                    ("token", &token)
                ]
            ),
            "{op}: {spans:?}"
        );
    }
    let events = seen.events.lock().unwrap().clone();
    let event = |message: &str| {
        events
            .iter()
            .find(|(m, _)| m.contains(message))
            .unwrap_or_else(|| panic!("no {message:?} event in {events:?}"))
            .1
            .clone()
    };
    assert!(
        fields(&[("resource", "report"), ("token", &token)])(&event("written")),
        "the holder's own events carry the lease"
    );
    let stale = event("stale token refused");
    assert!(
        fields(&[
            ("store", "memory"),
            ("key", "report/key"),
            ("token", &zombie),
            ("presented", &zombie),
            ("current", &token)
        ])(&stale),
        "the refusal names the key and both tokens: {stale:?}"
    );
}
