//! A store that cannot decide: 503 (retryable, with Retry-After) or 500;
//! the handler never runs. gRPC requests get a gRPC status.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use fencing_core::memory::MemoryStore;
use fencing_core::{Error, FencedStore, FencingToken, Limits, Result, Versioned};
use fencing_http::FencingLayer;

use crate::common::{Server, answer, client, fencing};

/// A store whose `fence` fails with the error `fail` makes.
#[derive(Debug)]
struct Failing {
    fail: fn() -> Error,
}

#[async_trait]
impl FencedStore for Failing {
    fn name(&self) -> &'static str {
        "failing"
    }
    fn limits(&self) -> Limits {
        MemoryStore::LIMITS
    }
    async fn put(&self, _: &str, _: Bytes, _: FencingToken) -> Result<()> {
        Err((self.fail)())
    }
    async fn get(&self, _: &str) -> Result<Option<Versioned>> {
        Err((self.fail)())
    }
    async fn fence(&self, _: &str, _: FencingToken) -> Result<FencingToken> {
        Err((self.fail)())
    }
    async fn mark(&self, _: &str) -> Result<Option<FencingToken>> {
        Err((self.fail)())
    }
    async fn delete(&self, _: &str, _: FencingToken) -> Result<()> {
        Err((self.fail)())
    }
}

async fn status_for(fail: fn() -> Error) -> (u16, Option<String>, serde_json::Value) {
    let server = Server::start(FencingLayer::new(Arc::new(Failing { fail }))).await;
    let response = server.put_fenced("/orders/7", "orders/7", 3).await;
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let (status, body) = answer(response).await;
    assert!(server.recorder.calls().is_empty());
    server.stop().await;
    (status, retry_after, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_is_503_when_retryable_and_500_otherwise() {
    let (status, retry, body) =
        status_for(|| Error::backend("failing", true, "connection reset")).await;
    assert_eq!((status, retry.as_deref()), (503, Some("1")), "{body}");
    assert_eq!(body["type"], "urn:fencing:problem:unavailable");

    let (status, retry, _) =
        status_for(|| Error::outcome_unknown("failing", "fence", "timed out")).await;
    assert_eq!((status, retry.as_deref()), (503, Some("1")));

    let (status, retry, body) =
        status_for(|| Error::backend("failing", false, "permission denied")).await;
    assert_eq!((status, retry), (500, None), "{body}");
    assert_eq!(body["type"], "urn:fencing:problem:store-error");
    assert_eq!(body["presented"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_requests_get_a_grpc_status() {
    let store = Arc::new(MemoryStore::new());
    store.fence("orders/7", FencingToken::new(5)).await.unwrap();
    let server = Server::start(FencingLayer::new(store)).await;
    let send = |token: u64| {
        client()
            .post(server.url("/orders/7"))
            .header("content-type", "application/grpc")
            .headers(fencing("orders/7", token))
            .send()
    };
    let stale = send(4).await.unwrap();
    assert_eq!(stale.status(), 200, "gRPC errors are trailers-only 200s");
    assert_eq!(stale.headers()["grpc-status"], "10"); // ABORTED
    let message = stale.headers()["grpc-message"].to_str().unwrap().to_owned();
    assert!(
        message.contains("token 5") && message.contains("token 4"),
        "{message}"
    );
    let missing = client()
        .post(server.url("/orders/7"))
        .header("content-type", "application/grpc+proto")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.headers()["grpc-status"], "9"); // FAILED_PRECONDITION
    assert!(server.recorder.calls().is_empty());
    assert_eq!(send(5).await.unwrap().headers().get("grpc-status"), None);
    assert_eq!(server.recorder.tokens(), vec![5]);
}
