//! A delayed packet: the zombie's write leaves while it holds the lease, is
//! held in flight by a proxy while the lease passes to a new holder who
//! writes, and is delivered afterwards. The store must refuse it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing_harness::env::{self, Server};
use fencing_harness::proxy::HoldingProxy;
use fencing_tokens::memory::MemoryIssuer;
use fencing_tokens::{Error, FencedStore, LeaseRequest, TokenIssuer};

/// `scheme://user:pass@host:port/db` → (`host:port`, the URL with `addr`
/// in its place).
fn split_authority(url: &str, addr: Option<SocketAddr>) -> (SocketAddr, String) {
    let (scheme, rest) = url.split_once("://").expect("scheme://");
    let (userinfo, hostpath) = rest.rsplit_once('@').map_or(("", rest), |(u, h)| (u, h));
    let (hostport, path) = hostpath
        .split_once('/')
        .map_or((hostpath, ""), |(h, p)| (h, p));
    let hostport = hostport.replace("localhost", "127.0.0.1");
    let target: SocketAddr = hostport
        .parse()
        .unwrap_or_else(|_| panic!("a loopback ip:port in {url}"));
    let at = if userinfo.is_empty() {
        String::new()
    } else {
        format!("{userinfo}@")
    };
    let via = addr.unwrap_or(target);
    (target, format!("{scheme}://{at}{via}/{path}"))
}

/// The scenario, given a store that talks through `proxy` and one that
/// talks directly to the same backend.
async fn delayed_write_is_refused(
    proxy: &HoldingProxy,
    through_proxy: Arc<dyn FencedStore>,
    direct: Arc<dyn FencedStore>,
) {
    let issuer = MemoryIssuer::new();
    let ttl = Duration::from_millis(300);
    let resource = fencing_testkit::unique_name("delayed");
    let key = fencing_testkit::unique_name("delayed-key");

    let zombie = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), Duration::from_secs(5))
        .await
        .unwrap();
    through_proxy
        .put(&key, "zombie, on time".into(), zombie.token())
        .await
        .expect("first write goes through");

    proxy.hold();
    let token = zombie.token();
    let (store, k) = (through_proxy.clone(), key.clone());
    let late = tokio::spawn(async move { store.put(&k, "zombie, delayed".into(), token).await });
    let started = Instant::now();
    while proxy.held() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the zombie's write never reached the proxy"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The lease passes on while the write is in flight.
    tokio::time::sleep(ttl + ttl / 2).await;
    let holder = issuer
        .acquire(
            &LeaseRequest::new(&resource, ttl * 20),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    direct
        .put(&key, "new holder".into(), holder.token())
        .await
        .expect("new holder writes");

    proxy.release();
    match late.await.unwrap() {
        Err(Error::StaleToken {
            presented, current, ..
        }) => {
            assert_eq!((presented, current), (zombie.token(), holder.token()));
        }
        other => panic!("the delayed write must be refused as stale, got {other:?}"),
    }
    let stored = direct.get(&key).await.unwrap().expect("value");
    assert_eq!(
        (stored.value.as_ref(), stored.token),
        (b"new holder".as_slice(), holder.token())
    );
}

fn skipped(server: &Server) -> bool {
    server.skipped()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_refuses_a_delayed_write() {
    if skipped(&env::POSTGRES) {
        return;
    }
    let url = env::POSTGRES.endpoint();
    let (target, _) = split_authority(&url, None);
    let proxy = HoldingProxy::start(target).await;
    let (_, proxied) = split_authority(&url, Some(proxy.addr()));
    let through = Arc::new(fencing_integration::sql_store_at(&proxied).await);
    let direct = fencing_integration::store("postgres")
        .await
        .expect("not skipped");
    delayed_write_is_refused(&proxy, through, direct).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_refuses_a_delayed_conditional_write() {
    if skipped(&env::S3) {
        return;
    }
    let (target, _) = split_authority(&env::S3.endpoint(), None);
    let proxy = HoldingProxy::start(target).await;
    // The zombie's second put takes the fast path: straight to the
    // conditional PUT on the version it wrote, which is what gets delayed.
    let through = Arc::new(
        fencing_integration::s3_at(&format!("http://{}", proxy.addr()))
            .await
            .expect("s3"),
    );
    let direct = fencing_integration::store("s3").await.expect("not skipped");
    delayed_write_is_refused(&proxy, through, direct).await;
}

#[test]
fn urls_are_rewritten_to_the_proxy() {
    let (target, via) = split_authority(
        "postgres://u:p@localhost:5432/db",
        Some("127.0.0.1:9".parse().unwrap()),
    );
    assert_eq!(target, "127.0.0.1:5432".parse().unwrap());
    assert_eq!(via, "postgres://u:p@127.0.0.1:9/db");
}
