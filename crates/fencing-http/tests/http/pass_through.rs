//! Which requests are fenced: methods, predicates, resources from the route.

use std::sync::Arc;

use fencing_core::FencedStore;
use fencing_core::memory::MemoryStore;
use fencing_http::FencingLayer;
use http::Method;

use crate::common::{Server, answer, client, fencing};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_pass_through_and_writes_are_fenced_by_default() {
    let server = Server::start(FencingLayer::new(Arc::new(MemoryStore::new()))).await;
    let http = client();
    for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
        let response = http
            .request(method.clone(), server.url("/orders/7"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{method}");
    }
    for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
        let response = http
            .request(method.clone(), server.url("/orders/7"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer(response).await.0, 428, "{method}");
        let response = http
            .request(method.clone(), server.url("/orders/7"))
            .headers(fencing("orders/7", 1))
            .send()
            .await
            .unwrap();
        assert_eq!(answer(response).await.0, 200, "{method}");
    }
    let calls = server.recorder.calls();
    let unfenced: Vec<_> = calls
        .iter()
        .filter(|c| c.token.is_none())
        .map(|c| &c.method)
        .collect();
    assert_eq!(unfenced, [Method::GET, Method::HEAD, Method::OPTIONS]);
    assert_eq!(server.recorder.tokens(), vec![1, 1, 1, 1]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_predicate_and_a_resource_from_the_path_choose_what_is_fenced() {
    let store = Arc::new(MemoryStore::new());
    let layer = FencingLayer::new(store.clone())
        .with_predicate(|parts| {
            parts.method != Method::GET && parts.uri.path().starts_with("/orders/")
        })
        .with_resource_from(|parts| parts.uri.path().strip_prefix("/").map(str::to_owned))
        .with_key_prefix("svc/");
    let server = Server::start(layer).await;
    let http = client();
    // Not fenced by the predicate.
    let health = http.post(server.url("/health/1")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    // The resource is the path; the client sends only the token.
    let put = |id: &str, token: &str| {
        http.put(server.url(&format!("/orders/{id}")))
            .header("fencing-token", token)
            .send()
    };
    assert_eq!(answer(put("7", "4").await.unwrap()).await.0, 200);
    assert_eq!(
        answer(put("8", "2").await.unwrap()).await.0,
        200,
        "another resource"
    );
    let (status, body) = answer(put("7", "3").await.unwrap()).await;
    assert_eq!(status, 409);
    assert_eq!(body["resource"], "orders/7");
    assert_eq!(
        store.mark("svc/orders/7").await.unwrap().map(|t| t.get()),
        Some(4)
    );
    assert_eq!(server.recorder.tokens(), vec![4, 2]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_gets_the_admission() {
    let store = Arc::new(MemoryStore::new());
    let server = Server::start(FencingLayer::new(store).with_methods([Method::PUT])).await;
    let response = server.put_fenced("/orders/9", "orders/9", 12).await;
    assert_eq!(response.text().await.unwrap(), "PUT 9 with token Some(12)");
    // POST is no longer fenced.
    let response = client().post(server.url("/orders/9")).send().await.unwrap();
    assert_eq!(response.text().await.unwrap(), "POST 9 with token None");
    server.stop().await;
}

#[cfg(feature = "reqwest")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reqwest_helper_attaches_a_lease() {
    use fencing_core::memory::MemoryIssuer;
    use fencing_core::{LeaseRequest, TokenIssuer};
    use fencing_http::RequestBuilderExt;

    let server = Server::start(FencingLayer::new(Arc::new(MemoryStore::new()))).await;
    let issuer = MemoryIssuer::new();
    let lease = issuer
        .acquire(
            &LeaseRequest::new("orders/7", std::time::Duration::from_secs(5)),
            std::time::Duration::ZERO,
        )
        .await
        .unwrap();
    let response = client()
        .put(server.url("/orders/7"))
        .fencing_lease(&lease)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(server.recorder.tokens(), vec![lease.token().get()]);
    server.stop().await;
}
