//! The spans of `instrument`, on the memory backends: they carry the
//! resource, the key and the token from acquire to fence to put.
//!
//! A binary of its own, with one test: `tracing` caches whether a callsite
//! is enabled once for the whole process, and another test, on another
//! thread, first hitting a callsite with no subscriber while this one
//! installs its own could leave the cache saying "disabled" (the spans then
//! went missing, now and then: seen in `instrument.rs` under load).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencing_core::instrument::{Instrumented, lease_span};
use fencing_core::memory::{MemoryIssuer, MemoryStore};
use fencing_core::{FencedStore, LeaseRequest, TokenIssuer};
use tracing::Instrument;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

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
