//! A test file as you would write it for your own service
//! (`docs/testing-your-service.md` quotes it): the testkit's store suite on
//! the store your service writes to, the Figure 9-6 zombie through your own
//! code with a real pause, and the history checker, against a local etcd
//! and moto's S3, started by hand. No script of this repository is needed.
//!
//! Endpoints: `MYAPP_TEST_ETCD` (default `127.0.0.1:2379`) and
//! `MYAPP_TEST_S3` (default `http://127.0.0.1:9000`).

use std::sync::Arc;
use std::time::Duration;

use fencing_testkit::lock_service::{freeze_on, frozen_client};
use fencing_tokens::IssuerExt;
use fencing_tokens::{Error, FencedStore, FencingToken, Result, TokenIssuer};

/// The code under test: your service's write, made while it holds the
/// lease. Building the report is where a pause can outlast the lease.
async fn publish_report(
    store: &dyn FencedStore,
    key: &str,
    token: FencingToken,
    build: impl Future<Output = String>,
) -> Result<()> {
    let report = build.await;
    store.put(key, report.into(), token).await
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn issuer_url() -> String {
    format!("etcd://{}", env_or("MYAPP_TEST_ETCD", "127.0.0.1:2379"))
}

fn store_url() -> String {
    let endpoint = env_or("MYAPP_TEST_S3", "http://127.0.0.1:9000");
    format!("s3://myapp-test?endpoint={endpoint}&emulator=true")
}

async fn issuer() -> Arc<dyn TokenIssuer> {
    let url = issuer_url();
    fencing_tokens::open_issuer(&url)
        .await
        .unwrap_or_else(|e| panic!("etcd at {url}: {e}\nstart one: etcd --data-dir /tmp/etcd-test"))
}

/// `Option` because the testkit's macros take a maker that may skip; a
/// missing server fails loudly instead, naming how to start it.
async fn store() -> Option<Arc<dyn FencedStore>> {
    let endpoint = env_or("MYAPP_TEST_S3", "http://127.0.0.1:9000");
    // The emulator starts empty: make the bucket (a real one exists already).
    fencing_s3::emulator::store(&endpoint, "myapp-test")
        .await
        .unwrap_or_else(|e| {
            panic!("moto at {endpoint}: {e}\nstart moto on port 9000 (one request at a time)")
        });
    Some(
        fencing_tokens::open_store(&store_url())
            .await
            .expect("open the store"),
    )
}

// Every clause of the store contract, on your store and your settings.
fencing_testkit::store_conformance!(store);

/// Figure 9-6 through your code: client 1 stops (its keep-alive with it)
/// inside `publish_report`, past its TTL; client 2 takes over and
/// publishes; client 1 wakes and publishes with its old token: refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_publisher_is_refused() {
    let (issuer, store) = (issuer().await, store().await.expect("store"));
    let ttl = Duration::from_secs(1).max(issuer.min_ttl());
    let resource = fencing_testkit::unique_name("nightly-report");
    let key = fencing_testkit::unique_name("reports/nightly");

    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (resource_1, key_1) = (resource.clone(), key.clone());
    let (pause, client_1) = frozen_client(move |pause| {
        Box::pin(async move {
            // A process of its own: its own connections, on its own runtime.
            let issuer = fencing_tokens::open_issuer(&issuer_url()).await?;
            let store = fencing_tokens::open_store(&store_url()).await?;
            let held = issuer
                .lock(resource_1)
                .ttl(ttl)
                .fence(&store, [key_1.as_str()])
                .await?;
            held_tx.send(held.token()).expect("the test waits for it");
            let build = async {
                freeze_on(pause).await; // the whole client stops here
                "report from client 1".to_owned()
            };
            publish_report(&*store, &key_1, held.token(), build).await
        })
    });
    held_rx.await.expect("client 1 got the lock");
    pause
        .send(ttl * 3)
        .expect("client 1 is waiting for its pause");

    let held = issuer
        .lock(&resource)
        .ttl(ttl)
        .wait(Duration::from_secs(30))
        .fence(&store, [key.as_str()])
        .await
        .expect("client 2 gets the lock once client 1's lease runs out");
    let publish = publish_report(&*store, &key, held.token(), async {
        "report from client 2".to_owned()
    });
    held.run(publish).await.expect("client 2 publishes");
    let token_2 = held.token();
    held.release().await.expect("release");

    let late = tokio::task::spawn_blocking(move || client_1.join())
        .await
        .expect("join")
        .expect("client 1 did not panic");
    assert!(
        matches!(late, Err(Error::StaleToken { .. })),
        "client 1's late publish: {late:?}"
    );
    let stored = store.get(&key).await.expect("get").expect("a report");
    assert_eq!(stored.value, "report from client 2".as_bytes());
    assert_eq!(stored.token, token_2);
}

/// Holders that pause past their lease at random, on the real issuer and
/// store: no stale write accepted (`FENCING_SEED=<n>` replays a run).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_stale_write_is_accepted() {
    let (issuer, store) = (issuer().await, store().await.expect("store"));
    let ttl = Duration::from_secs(1).max(issuer.min_ttl());
    fencing_testkit::history::quick_check(issuer, store, ttl).await;
}
