//! The facade's one registry opens every scheme against the real servers
//! of `integration/services.sh`: a fenced write and a stale one refused
//! through each store, a grant through each issuer. A server that does not
//! answer fails the test, naming it and how to start it (`FENCING_SKIP=name`
//! skips it on request).

use std::time::Duration;

use fencing_harness::env::{
    AZURE, ETCD, GCS, MYSQL, POSTGRES, REDIS, REDIS_AOF, S3, Server, ZOOKEEPER,
};
use fencing_testkit::store::assert_stale;
use fencing_tokens::{Error, FencingToken, LeaseRequest};

fn prefix() -> String {
    fencing_testkit::unique_prefix().replace('-', "_")
}

fn hosts(endpoint: &str) -> String {
    endpoint.replace("http://", "")
}

async fn store(server: Option<&Server>, url: &str) {
    if server.is_some_and(Server::skipped) {
        return;
    }
    let store = match fencing_tokens::open_store(url).await {
        Ok(store) => store,
        Err(e) => match server {
            Some(server) => server.unavailable(&e),
            None => panic!("{url}: {e}"),
        },
    };
    let key = format!("registry-{}", prefix());
    store
        .put(&key, "from 34".into(), FencingToken::new(34))
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let stale = store.put(&key, "from 33".into(), FencingToken::new(33));
    assert_stale(stale.await, &key, 33, 34);
}

async fn issuer(server: &Server, url: &str) {
    if server.skipped() {
        return;
    }
    let issuer = fencing_tokens::open_issuer(url)
        .await
        .unwrap_or_else(|e| server.unavailable(&e));
    let resource = format!("registry-{}", prefix());
    let lease = issuer
        .try_acquire(&LeaseRequest::new(&resource, Duration::from_secs(5)))
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"))
        .unwrap_or_else(|| panic!("{url}: a fresh resource is free"));
    issuer
        .release(&lease)
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
}

#[tokio::test]
async fn sql_urls_open_stores_and_issuers() {
    let sqlite = std::env::temp_dir().join(format!("fencing-registry-{}.sqlite", prefix()));
    let sqlite = format!("sqlite://{}", sqlite.display());
    store(None, &sqlite).await;
    let table = format!("fencing_table_prefix={}_", prefix());
    store(Some(&POSTGRES), &format!("{}?{table}", POSTGRES.endpoint())).await;
    store(Some(&MYSQL), &format!("{}?{table}", MYSQL.endpoint())).await;
    issuer(&POSTGRES, &format!("{}?{table}", POSTGRES.endpoint())).await;
    issuer(&MYSQL, &format!("{}?{table}", MYSQL.endpoint())).await;
}

#[tokio::test]
async fn etcd_url_opens_an_issuer() {
    let url = format!("etcd://{}?prefix={}/", hosts(&ETCD.endpoint()), prefix());
    issuer(&ETCD, &url).await;
}

#[tokio::test]
async fn zk_url_opens_an_issuer() {
    let url = format!("zk://{}/{}", ZOOKEEPER.endpoint(), prefix());
    issuer(&ZOOKEEPER, &url).await;
}

#[tokio::test]
async fn redis_urls_open_an_issuer_and_refuse_a_volatile_server_unless_asked() {
    issuer(
        &REDIS_AOF,
        &format!("{}?prefix={}:", REDIS_AOF.endpoint(), prefix()),
    )
    .await;
    if REDIS.skipped() {
        return;
    }
    match fencing_tokens::open_issuer(&REDIS.endpoint()).await {
        Err(Error::UnsafeConfiguration { .. }) => {}
        Err(e) => REDIS.unavailable(&e),
        Ok(_) => panic!("the volatile Redis was accepted without volatile=true"),
    }
    issuer(
        &REDIS,
        &format!("{}?volatile=true&prefix={}:", REDIS.endpoint(), prefix()),
    )
    .await;
}

/// An object store by URL with `emulator=true`, on a bucket the crate's
/// `emulator::store` creates first (as a test of an application would).
async fn emulator_store<T, E: std::fmt::Display>(
    server: &Server,
    scheme: &str,
    create: impl AsyncFnOnce(&str, &str) -> Result<T, E>,
) {
    if server.skipped() {
        return;
    }
    let (endpoint, bucket) = (server.endpoint(), prefix().replace('_', "-"));
    if let Err(e) = create(&endpoint, &bucket).await {
        server.unavailable(&e);
    }
    let url = format!("{scheme}://{bucket}?endpoint={endpoint}&emulator=true");
    store(Some(server), &url).await;
}

#[tokio::test]
async fn s3_url_opens_a_store_with_emulator_true() {
    emulator_store(&S3, "s3", fencing_s3::emulator::store).await;
}

#[tokio::test]
async fn gs_url_opens_a_store_with_emulator_true() {
    emulator_store(&GCS, "gs", fencing_gcs::emulator::store).await;
}

#[tokio::test]
async fn az_url_opens_a_store_with_emulator_true() {
    emulator_store(&AZURE, "az", fencing_azure::emulator::store).await;
}

#[tokio::test]
async fn bad_urls_are_invalid_input_before_any_connection() {
    for url in [
        "s3://b?endpont=x",
        "gs://b?emulator=maybe",
        "az://c?emulator=true",
        "etcd://h:1?timeout=5",
        "zk://h:1?token=mzxid",
        "redis://h:1?volatile=1&replicas=1",
        "sqlite:///tmp/x?fencing_table_prefix=a;b",
        "ftp://h",
    ] {
        let store = fencing_tokens::open_store(url).await.err();
        let issuer = fencing_tokens::open_issuer(url).await.err();
        let e = store.or(issuer).expect("refused");
        assert!(matches!(e, Error::InvalidInput { .. }), "{url}: {e:?}");
    }
}
