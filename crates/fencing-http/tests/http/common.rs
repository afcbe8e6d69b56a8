//! The service under test: `/orders/{id}` behind a `FencingLayer`, whose
//! handler records every call it gets.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method};
use axum::routing::get;
use axum::{Extension, Router};
use fencing_core::FencingToken;
use fencing_http::{Admission, FencingLayer};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// One call the handler got.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    pub(crate) method: Method,
    /// The admitted token (`None` for a request that is not fenced).
    pub(crate) token: Option<u64>,
    /// Calls with a lower token still inside the handler when this one came in.
    pub(crate) lower_in_flight: usize,
}

#[derive(Default)]
pub(crate) struct Recorder {
    calls: Mutex<Vec<Call>>,
    in_flight: Mutex<BTreeMap<u64, usize>>,
}

impl Recorder {
    pub(crate) fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    pub(crate) fn tokens(&self) -> Vec<u64> {
        self.calls().iter().filter_map(|c| c.token).collect()
    }
}

async fn handle(
    State(recorder): State<Arc<Recorder>>,
    method: Method,
    Path(id): Path<String>,
    headers: HeaderMap,
    admission: Option<Extension<Admission>>,
) -> String {
    let token = admission.map(|Extension(a)| a.token.get());
    if let Some(t) = token {
        let mut in_flight = recorder.in_flight.lock().unwrap();
        let lower_in_flight = in_flight.range(..t).map(|(_, n)| n).sum();
        *in_flight.entry(t).or_default() += 1;
        recorder.calls.lock().unwrap().push(Call {
            method: method.clone(),
            token,
            lower_in_flight,
        });
    } else {
        recorder.calls.lock().unwrap().push(Call {
            method: method.clone(),
            token,
            lower_in_flight: 0,
        });
    }
    // A slow write: `x-work-ms` milliseconds inside the handler.
    if let Some(ms) = headers
        .get("x-work-ms")
        .and_then(|v| v.to_str().ok()?.parse().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if let Some(t) = token {
        let mut in_flight = recorder.in_flight.lock().unwrap();
        let n = in_flight.get_mut(&t).unwrap();
        *n -= 1;
        if *n == 0 {
            in_flight.remove(&t);
        }
    }
    format!("{method} {id} with token {token:?}")
}

/// A running service.
pub(crate) struct Server {
    pub(crate) base: String,
    pub(crate) recorder: Arc<Recorder>,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Server {
    /// Serves `/orders/{id}` (GET, PUT, POST, PATCH, DELETE) and `/health`
    /// (POST) behind `layer`.
    pub(crate) async fn start(layer: FencingLayer) -> Self {
        let recorder = Arc::new(Recorder::default());
        let app = Router::new()
            .route(
                "/orders/{id}",
                get(handle)
                    .put(handle)
                    .post(handle)
                    .patch(handle)
                    .delete(handle)
                    .head(handle)
                    .options(handle),
            )
            .route("/health/{id}", axum::routing::post(handle))
            .with_state(recorder.clone())
            .layer(layer);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        Self {
            base: format!("http://{addr}"),
            recorder,
            shutdown: Some(tx),
            task,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A PUT of `path` carrying `resource` and `token` in the fencing
    /// headers.
    pub(crate) async fn put_fenced(
        &self,
        path: &str,
        resource: &str,
        token: u64,
    ) -> reqwest::Response {
        let request = client()
            .put(self.url(path))
            .headers(fencing(resource, token));
        request.send().await.unwrap()
    }

    /// Stops the server and waits until it has.
    pub(crate) async fn stop(mut self) {
        let _ = self.shutdown.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), &mut self.task)
            .await
            .expect("server stops")
            .unwrap();
    }
}

pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .unwrap()
}

/// Headers for `resource` and `token`, through the crate's helper.
pub(crate) fn fencing(resource: &str, token: u64) -> reqwest::header::HeaderMap {
    let mut headers = reqwest::header::HeaderMap::new();
    fencing_http::insert_headers(&mut headers, resource, FencingToken::new(token)).unwrap();
    headers
}

/// A response's status and problem body (JSON), checking the media type
/// of every error answer.
pub(crate) async fn answer(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = response.text().await.unwrap();
    if status >= 400 {
        assert_eq!(
            content_type.as_deref(),
            Some("application/problem+json"),
            "{status}: {text}"
        );
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["status"], status, "{body}");
        for member in ["type", "title", "detail"] {
            assert!(body[member].is_string(), "{member} in {body}");
        }
        (status, body)
    } else {
        (status, Value::String(text))
    }
}

/// A SQLite file unique to this test run.
pub(crate) fn sqlite_url(name: &str) -> (String, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!(
        "fencing-http-{name}-{}-{}.sqlite",
        std::process::id(),
        nanos()
    ));
    (format!("sqlite://{}", path.display()), path)
}

/// A resource name unique to this run (durable stores keep marks).
pub(crate) fn unique(name: &str) -> String {
    format!("{name}-{}-{}", std::process::id(), nanos())
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}
