//! Figure 9-6 through the service: client 1 gets a token and pauses past its
//! lease; client 2 takes over and writes; client 1 wakes, writes, and gets
//! 409 naming both tokens; the handler never ran for it.

use std::time::Duration;

use fencing_core::memory::MemoryIssuer;
use fencing_core::{LeaseRequest, TokenIssuer};
use fencing_http::FencingLayer;

use crate::common::{Server, answer, client, fencing, sqlite_url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_client_is_refused_and_its_write_never_reaches_the_handler() {
    let (url, path) = sqlite_url("figure-9-6");
    let store = fencing_tokens::open_store(&url).await.unwrap();
    let server = Server::start(FencingLayer::new(store)).await;
    let issuer = MemoryIssuer::new();
    let http = client();
    let ttl = Duration::from_millis(300);

    // Client 1 gets the lease and a token, then pauses (a GC, a VM freeze)
    // for longer than its lease.
    let lease1 = issuer
        .acquire(&LeaseRequest::new("orders/7", ttl), Duration::ZERO)
        .await
        .unwrap();
    let token1 = lease1.token().get();
    let paused = tokio::spawn({
        let http = http.clone();
        let url = server.url("/orders/7");
        let (resource, token) = (lease1.resource().to_owned(), lease1.token().get());
        async move {
            tokio::time::sleep(Duration::from_millis(600)).await; // the pause
            assert!(
                lease1.is_expired(),
                "client 1's lease ran out while it slept"
            );
            // Wakes up believing it still holds the lock.
            let sent = http
                .put(url)
                .headers(fencing(&resource, token))
                .body("by client 1");
            answer(sent.send().await.unwrap()).await
        }
    });

    // Client 2 waits for the lease to expire, takes it over, and writes.
    let lease2 = issuer
        .acquire(&LeaseRequest::new("orders/7", ttl), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(lease2.token().get() > token1);
    let (status, _) = answer(
        http.put(server.url("/orders/7"))
            .headers(fencing("orders/7", lease2.token().get()))
            .body("by client 2")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);

    // Client 1's write is refused with both tokens.
    let (status, body) = paused.await.unwrap();
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["type"], "urn:fencing:problem:stale-token");
    assert_eq!(body["title"], "Stale fencing token");
    assert_eq!(body["resource"], "orders/7");
    assert_eq!(body["current"], lease2.token().get());
    assert_eq!(body["presented"], token1);

    // The handler ran once: for client 2.
    let calls = server.recorder.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].token, Some(lease2.token().get()));
    server.stop().await;
    let _ = std::fs::remove_file(path);
}
