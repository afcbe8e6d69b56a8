//! The mark outlives the service: a new instance on the same durable store
//! still refuses the old token.

use fencing_harness::env::POSTGRES;
use fencing_http::FencingLayer;

use crate::common::{Server, answer, sqlite_url, unique};

async fn put(server: &Server, resource: &str, token: u64) -> (u16, serde_json::Value) {
    answer(server.put_fenced("/orders/7", resource, token).await).await
}

async fn restart_keeps_the_mark(url: &str, resource: &str) {
    // First life: holder 5 writes.
    let store = fencing_tokens::open_store(url).await.unwrap();
    let first = Server::start(FencingLayer::new(store)).await;
    assert_eq!(put(&first, resource, 5).await.0, 200);
    first.stop().await;

    // Second life: a new store connection, a new layer, a new port.
    let store = fencing_tokens::open_store(url).await.unwrap();
    let second = Server::start(FencingLayer::new(store)).await;
    let (status, body) = put(&second, resource, 4).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        (body["presented"].as_u64(), body["current"].as_u64()),
        (Some(4), Some(5))
    );
    assert_eq!(put(&second, resource, 5).await.0, 200, "equal is accepted");
    assert_eq!(put(&second, resource, 6).await.0, 200);
    assert_eq!(put(&second, resource, 5).await.0, 409);
    assert_eq!(second.recorder.tokens(), vec![5, 6]);
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_service_on_a_sqlite_file_refuses_the_old_token() {
    let (url, path) = sqlite_url("restart");
    restart_keeps_the_mark(&url, "orders/7").await;
    let _ = std::fs::remove_file(path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_service_on_postgresql_refuses_the_old_token() {
    if POSTGRES.skipped() {
        return;
    }
    let url = POSTGRES.endpoint();
    if let Err(e) = fencing_tokens::open_store(&url).await {
        POSTGRES.unavailable(&e);
    }
    restart_keeps_the_mark(&url, &unique("orders/restart")).await;
}
