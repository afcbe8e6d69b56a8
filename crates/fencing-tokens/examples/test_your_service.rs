//! Testing your own service against real servers with `fencing-testkit`:
//! the Figure 9-6 zombie through your own code, with a real pause, plus the
//! testkit's zombie scenario on the same issuer and store (its randomized
//! history checker, which takes longer, is in `tests/your_service.rs`, the
//! test file the guide quotes). The guide: `docs/testing-your-service.md`.
//!
//! ```sh
//! cargo run -p fencing-tokens --features full --example test_your_service -- \
//!     etcd://127.0.0.1:2379 's3://my-test-bucket?endpoint=http://127.0.0.1:9000&emulator=true'
//! ```
//!
//! Panics (exit 101) when a check fails, naming it.

use std::time::Duration;

use fencing_testkit::lock_service::{freeze_on, frozen_client};
use fencing_tokens::IssuerExt;
use fencing_tokens::{Error, FencedStore, FencingToken, Result};

/// The code under test: what your service does while it holds the lease.
/// Building the report is the slow part, where a pause (GC, a VM freeze, a
/// slow network) can outlast the lease.
async fn publish_report(
    store: &dyn FencedStore,
    key: &str,
    token: FencingToken,
    build: impl Future<Output = String>,
) -> Result<()> {
    let report = build.await;
    store.put(key, report.into(), token).await
}

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [issuer_url, store_url] = args.as_slice() else {
        return Err("usage: test_your_service ISSUER_URL STORE_URL".into());
    };
    let issuer = fencing_tokens::open_issuer(issuer_url).await?;
    let store = fencing_tokens::open_store(store_url).await?;
    let ttl = Duration::from_secs(1).max(issuer.min_ttl());
    println!(
        "issuer {}, store {}, TTL {ttl:?}",
        issuer.name(),
        store.name()
    );

    // 1. Your code, Figure 9-6: client 1 stops (its keep-alive with it)
    //    inside publish_report, past its TTL.
    let key = fencing_testkit::unique_name("nightly");
    let (urls, client_key) = ((issuer_url.clone(), store_url.clone()), key.clone());
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (pause, client_1) = frozen_client(move |pause| {
        Box::pin(async move {
            // A process of its own: its own connections, on its own runtime.
            let issuer = fencing_tokens::open_issuer(&urls.0).await?;
            let store = fencing_tokens::open_store(&urls.1).await?;
            let held = issuer
                .lock("guides-your-service")
                .ttl(ttl)
                .wait(Duration::from_secs(30))
                .fence(&store, [client_key.as_str()])
                .await?;
            let _ = held_tx.send(held.token());
            let build = async {
                freeze_on(pause).await; // the whole client stops here
                "report from client 1".to_owned()
            };
            let outcome = publish_report(&*store, &client_key, held.token(), build).await;
            drop(held);
            outcome
        })
    });
    let token_1 = held_rx.await.map_err(|_| "client 1 never got the lock")?;
    println!(
        "client 1 holds token {token_1}; it now stops for {:?}",
        ttl * 3
    );
    let _ = pause.send(ttl * 3);

    // Client 2 gets the lock once client 1's lease runs out, fences the key,
    // publishes through the same code.
    let held = issuer
        .lock("guides-your-service")
        .ttl(ttl)
        .wait(Duration::from_secs(30))
        .fence(&store, [key.as_str()])
        .await?;
    println!("client 2 holds token {}", held.token());
    held.run(publish_report(&*store, &key, held.token(), async {
        "report from client 2".to_owned()
    }))
    .await?;
    let token_2 = held.token();
    held.release().await?;

    let outcome = tokio::task::spawn_blocking(move || client_1.join())
        .await?
        .map_err(|_| "client 1 panicked")?;
    match outcome {
        Err(Error::StaleToken {
            presented, current, ..
        }) => {
            println!(
                "client 1 woke and published with {presented}: refused, the mark is {current}"
            );
        }
        other => panic!("client 1's late publish gave {other:?}, not StaleToken"),
    }
    let stored = store.get(&key).await?.expect("client 2's report is stored");
    assert_eq!(
        stored.value,
        "report from client 2".as_bytes(),
        "client 2's report was overwritten"
    );
    assert_eq!(stored.token, token_2);
    println!("the store holds client 2's report at token {token_2}");

    // 2. The testkit's own zombie scenario (Figure 9-6 on store.put), on
    //    the same issuer and store.
    fencing_testkit::zombie::zombie_is_refused(&*issuer, &*store, ttl).await;
    println!("testkit zombie scenario: the zombie was refused, with and without fence-on-acquire");
    println!(
        "ok: {} + {} keep a paused holder out of your service",
        issuer.name(),
        store.name()
    );
    Ok(())
}
