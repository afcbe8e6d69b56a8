//! Racing clients with mixed tokens, with and without the in-process gate.

use std::sync::Arc;
use std::time::Duration;

use fencing_core::memory::MemoryStore;
use fencing_core::{FencedStore, FencingToken};
use fencing_harness::env::POSTGRES;
use fencing_http::FencingLayer;

use crate::common::{Server, answer, client, fencing, unique};

const REQUESTS: u64 = 240;
const TOKENS: u64 = 8;

/// Request `i`'s token: every token from 1 to TOKENS, interleaved.
fn token_of(i: u64) -> u64 {
    (i * 5) % TOKENS + 1
}

struct Outcome {
    admitted: Vec<u64>,
    refused: Vec<(u64, u64)>,
}

/// Sends REQUESTS racing PUTs with mixed tokens (each handler call takes a
/// few milliseconds) and checks what holds with or without the gate.
async fn race(store: Arc<dyn FencedStore>, resource: &str, gate: bool) -> (Server, Outcome) {
    let mut layer = FencingLayer::new(store.clone());
    if gate {
        layer = layer.with_gate(Duration::from_secs(60));
    }
    let server = Server::start(layer).await;
    let http = client();
    let mut tasks = Vec::new();
    for i in 0..REQUESTS {
        let token = token_of(i);
        let sent = http
            .put(server.url("/orders/7"))
            .headers(fencing(resource, token))
            .header("x-work-ms", "3");
        tasks.push(tokio::spawn(async move {
            (token, answer(sent.send().await.unwrap()).await)
        }));
    }
    let mut outcome = Outcome {
        admitted: Vec::new(),
        refused: Vec::new(),
    };
    for task in tasks {
        let (token, (status, body)) = task.await.unwrap();
        match status {
            200 => outcome.admitted.push(token),
            409 => {
                let (presented, current) = (
                    body["presented"].as_u64().unwrap(),
                    body["current"].as_u64().unwrap(),
                );
                assert_eq!(presented, token);
                assert!(presented < current && current <= TOKENS, "{body}");
                outcome.refused.push((presented, current));
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }

    // Exact counts: every request answered once; the handler ran exactly
    // for the admitted ones, with their tokens.
    let calls = server.recorder.tokens();
    assert_eq!(
        outcome.admitted.len() + outcome.refused.len(),
        usize::try_from(REQUESTS).unwrap()
    );
    assert_eq!(calls.len(), outcome.admitted.len());
    let (mut a, mut c) = (outcome.admitted.clone(), calls.clone());
    a.sort_unstable();
    c.sort_unstable();
    assert_eq!(a, c, "the handler saw exactly the admitted tokens");
    // The highest token is never stale: all of its requests got through.
    let highest = (0..REQUESTS).filter(|&i| token_of(i) == TOKENS).count();
    assert_eq!(
        outcome.admitted.iter().filter(|&&t| t == TOKENS).count(),
        highest
    );
    assert_eq!(
        store.mark(resource).await.unwrap(),
        Some(FencingToken::new(TOKENS))
    );
    (server, outcome)
}

/// With the gate, no request with a token below one already accepted ever
/// reaches the handler, and none runs while a lower one is still inside.
async fn gated_race(store: Arc<dyn FencedStore>, resource: &str) {
    let (server, outcome) = race(store, resource, true).await;
    let calls = server.recorder.calls();
    let mut highest = 0;
    for call in &calls {
        let token = call.token.unwrap();
        assert!(
            token >= highest,
            "token {token} reached the handler after {highest} was accepted: {calls:?}"
        );
        assert_eq!(call.lower_in_flight, 0, "{call:?}");
        highest = token;
    }
    eprintln!(
        "gated race: {} admitted, {} refused as stale",
        outcome.admitted.len(),
        outcome.refused.len()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_clients_with_the_gate_reach_the_handler_in_token_order() {
    gated_race(Arc::new(MemoryStore::new()), "orders/7").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_clients_with_the_gate_on_postgresql() {
    if POSTGRES.skipped() {
        return;
    }
    let store = fencing_tokens::open_store(&POSTGRES.endpoint())
        .await
        .unwrap_or_else(|e| POSTGRES.unavailable(&e));
    gated_race(store, &unique("race")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_clients_without_the_gate_are_still_refused_below_the_mark() {
    let (server, _) = race(Arc::new(MemoryStore::new()), "orders/7", false).await;
    server.stop().await;
}

/// The race the layer cannot close alone, and what the gate does about it:
/// 7 is admitted and slow; 8 arrives.
async fn slow_seven_then_eight(gate: bool) -> Server {
    let store = Arc::new(MemoryStore::new());
    let mut layer = FencingLayer::new(store);
    if gate {
        layer = layer.with_gate(Duration::from_secs(10));
    }
    let server = Server::start(layer).await;
    let http = client();
    let seven = tokio::spawn(
        http.put(server.url("/orders/7"))
            .headers(fencing("orders/7", 7))
            .header("x-work-ms", "400")
            .send(),
    );
    // 7 is inside the handler.
    while server.recorder.calls().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let eight = http
        .put(server.url("/orders/7"))
        .headers(fencing("orders/7", 8))
        .send()
        .await
        .unwrap();
    assert_eq!(eight.status(), 200);
    assert_eq!(seven.await.unwrap().unwrap().status(), 200);
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_gate_a_higher_token_runs_while_a_lower_one_is_still_writing() {
    let server = slow_seven_then_eight(false).await;
    let calls = server.recorder.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[1].token, calls[1].lower_in_flight),
        (Some(8), 1),
        "the race is real"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_gate_a_higher_token_waits_for_the_lower_one_to_finish() {
    let server = slow_seven_then_eight(true).await;
    let calls = server.recorder.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!((calls[1].token, calls[1].lower_in_flight), (Some(8), 0));
    server.stop().await;
}
