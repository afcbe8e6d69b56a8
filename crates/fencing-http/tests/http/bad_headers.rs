//! Missing, malformed and out-of-range headers: the right status and problem
//! body, and the handler never runs.

use std::sync::Arc;

use fencing_core::memory::MemoryStore;
use fencing_http::FencingLayer;
use http::HeaderName;

use crate::common::{Server, answer, client, sqlite_url};

/// (resource header values, token header values, status, problem type)
type Case = (
    &'static [&'static str],
    &'static [&'static str],
    u16,
    &'static str,
);

const CASES: &[Case] = &[
    (&["orders/7"], &[], 428, "missing-token"),
    (&[], &["7"], 428, "missing-resource"),
    (&[], &[], 428, "missing-resource"),
    (&["orders/7"], &["abc"], 400, "malformed-token"),
    (&["orders/7"], &[""], 400, "malformed-token"),
    (&["orders/7"], &["-1"], 400, "malformed-token"),
    (&["orders/7"], &["+7"], 400, "malformed-token"),
    (&["orders/7"], &["7.0"], 400, "malformed-token"),
    (&["orders/7"], &["0x10"], 400, "malformed-token"),
    (&["orders/7"], &["1 2"], 400, "malformed-token"),
    (&["orders/7"], &["7", "8"], 400, "malformed-token"),
    (
        &["orders/7"],
        &["18446744073709551616"],
        400,
        "token-out-of-range",
    ),
    (&[""], &["7"], 400, "invalid-resource"),
    (&["  "], &["7"], 400, "invalid-resource"),
    (&["a", "b"], &["7"], 400, "invalid-resource"),
];

async fn check(server: &Server, resources: &[&str], tokens: &[&str], status: u16, kind: &str) {
    let mut request = client().post(server.url("/orders/7"));
    for r in resources {
        request = request.header("fencing-resource", *r);
    }
    for t in tokens {
        request = request.header("fencing-token", *t);
    }
    let (got, body) = answer(request.send().await.unwrap()).await;
    assert_eq!(
        got, status,
        "resource {resources:?}, token {tokens:?}: {body}"
    );
    assert_eq!(
        body["type"],
        format!("urn:fencing:problem:{kind}"),
        "resource {resources:?}, token {tokens:?}: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_headers_get_the_right_status_and_never_reach_the_handler() {
    let server = Server::start(FencingLayer::new(Arc::new(MemoryStore::new()))).await;
    for &(resources, tokens, status, kind) in CASES {
        check(&server, resources, tokens, status, kind).await;
    }
    // Not UTF-8.
    let latin1 = client()
        .post(server.url("/orders/7"))
        .header(
            "fencing-resource",
            http::HeaderValue::from_bytes(b"caf\xe9").unwrap(),
        )
        .header("fencing-token", "7");
    let (status, body) = answer(latin1.send().await.unwrap()).await;
    assert_eq!(
        (status, &body["type"]),
        (400, &"urn:fencing:problem:invalid-resource".into())
    );
    // A key over the store's limit (1024 bytes in memory).
    let long = "r".repeat(2000);
    check(&server, &[long.as_str()], &["7"], 400, "invalid-resource").await;
    assert!(
        server.recorder.calls().is_empty(),
        "{:?}",
        server.recorder.calls()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_above_what_sql_can_hold_is_out_of_range() {
    let (url, path) = sqlite_url("range");
    let store = fencing_tokens::open_store(&url).await.unwrap();
    let server = Server::start(FencingLayer::new(store.clone())).await;
    let above = (i64::MAX as u64 + 1).to_string();
    let request = client()
        .put(server.url("/orders/7"))
        .header("fencing-resource", "orders/7")
        .header("fencing-token", above.as_str());
    let (status, body) = answer(request.send().await.unwrap()).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["type"], "urn:fencing:problem:token-out-of-range");
    assert_eq!(body["presented"].as_u64(), Some(i64::MAX as u64 + 1));
    assert!(server.recorder.calls().is_empty());
    assert_eq!(
        store.mark("orders/7").await.unwrap(),
        None,
        "nothing was written"
    );
    server.stop().await;
    let _ = std::fs::remove_file(path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_names_are_configurable() {
    let layer = FencingLayer::new(Arc::new(MemoryStore::new()))
        .with_token_header(HeaderName::from_static("x-lock-token"))
        .with_resource_header(HeaderName::from_static("x-lock"));
    let server = Server::start(layer).await;
    let send = |token_header: &'static str| {
        client()
            .put(server.url("/orders/7"))
            .header("x-lock", "orders/7")
            .header(token_header, "3")
            .send()
    };
    assert_eq!(answer(send("fencing-token").await.unwrap()).await.0, 428);
    assert_eq!(answer(send("x-lock-token").await.unwrap()).await.0, 200);
    assert_eq!(server.recorder.tokens(), vec![3]);
    server.stop().await;
}
