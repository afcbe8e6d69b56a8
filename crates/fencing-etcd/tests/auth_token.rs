//! etcd's auth token expires while an issuer is idle: a simple token
//! (etcd 3.4's default) lives `--auth-token-ttl` after its last use, 5
//! minutes by default. An issuer that logs in once must go on working
//! past that: etcd-client logs in again when etcd answers "invalid auth
//! token" (`ConnectOptions::with_auto_token_refresh`, which the issuer
//! turns on).
//!
//! On an etcd of its own (the `etcd` spec's, started on free loopback
//! ports by `fencing_servers::Private`, plus `--auth-token-ttl 1`; `auth
//! enable`, a user whose role may use `fencing/` only), so a second of
//! idleness expires the token. `FENCING_SKIP=etcd` skips it.

use std::time::Duration;

use fencing_core::{FencingToken, IssuerExt, LeaseRequest, TokenIssuer};
use fencing_etcd::etcd_client::{Client, Permission};
use fencing_etcd::{EtcdConfig, EtcdIssuer};
use fencing_harness::env::ETCD;
use fencing_servers::Private;
use fencing_testkit::issuer::grant;

const PASSWORD: &str = "token-ttl-secret";
/// Longer than the token's TTL (1 s) and etcd's token sweep.
const IDLE: Duration = Duration::from_millis(2500);

/// An etcd of this test's own: the `etcd` spec's (its binary, on free
/// loopback ports) plus `--auth-token-ttl`, stopped and removed when
/// dropped.
struct OwnEtcd {
    etcd: Private,
}

impl OwnEtcd {
    /// Started on a blocking thread: starting one probes it.
    async fn start(token_ttl_secs: u32) -> Self {
        let etcd = tokio::task::spawn_blocking(move || {
            let spec = fencing_servers::service("etcd").expect("etcd's spec");
            Private::start(spec, &["--auth-token-ttl", &token_ttl_secs.to_string()])
        })
        .await
        .expect("the thread starting the test's own etcd")
        .unwrap_or_else(|e| panic!("{e}\n(or skip these tests with FENCING_SKIP=etcd)"));
        Self { etcd }
    }

    fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.etcd.port())
    }

    /// Users root and `fencing` (role: readwrite on `fencing/` only),
    /// then `auth enable`.
    async fn enable_auth(&self) {
        let endpoint = format!("http://{}", self.endpoint());
        let mut c = Client::connect([&endpoint], None)
            .await
            .expect("connect as nobody");
        c.user_add("root", PASSWORD, None).await.expect("add root");
        c.user_grant_role("root", "root")
            .await
            .expect("root's role");
        c.role_add("fencing").await.expect("add the role");
        c.role_grant_permission("fencing", Permission::read_write("fencing/").with_prefix())
            .await
            .expect("grant fencing/");
        c.user_add("fencing", PASSWORD, None)
            .await
            .expect("add the user");
        c.user_grant_role("fencing", "fencing")
            .await
            .expect("the user's role");
        c.auth_enable().await.expect("auth enable");
    }
}

async fn issuer_on(etcd: &OwnEtcd) -> EtcdIssuer {
    let url = format!(
        "etcd://fencing:{PASSWORD}@{}?prefix=fencing/{}/",
        etcd.endpoint(),
        fencing_testkit::unique_prefix()
    );
    EtcdConfig::from_url(&url)
        .expect("a valid URL")
        .connect_issuer()
        .await
        .unwrap_or_else(|e| panic!("connect as fencing: {}", e.chain()))
}

/// Every call of the issuer, each after the token expired: renew (a
/// keep-alive and a transaction), holder, release (a revoke), a waiter
/// granted on release after idling in its watch, raise_floor, acquire,
/// and verify.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issuer_goes_on_after_its_auth_token_expires() {
    if ETCD.skipped() {
        return;
    }
    let etcd = OwnEtcd::start(1).await;
    etcd.enable_auth().await;
    let issuer = issuer_on(&etcd).await;
    let ttl = Duration::from_secs(10);
    let resource = fencing_testkit::unique_name("token-ttl");
    let lease = grant(&issuer, &resource, ttl).await;

    tokio::time::sleep(IDLE).await;
    let renewed = issuer
        .renew(&lease)
        .await
        .expect("renew after the token expired");
    assert_eq!(renewed.token(), lease.token());

    tokio::time::sleep(IDLE).await;
    let holding = issuer
        .holder(&resource)
        .await
        .expect("holder after the token expired");
    assert_eq!(holding.expect("held").token, lease.token());

    // A waiter: queued, then idle in its watch past the token's life.
    let waiter = {
        let issuer = issuer.clone();
        let request = LeaseRequest::new(&resource, ttl);
        tokio::spawn(async move { issuer.acquire(&request, Duration::from_secs(30)).await })
    };
    tokio::time::sleep(IDLE).await;
    issuer
        .release(&lease)
        .await
        .expect("release after the token expired");
    let next = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is granted at once")
        .expect("joined")
        .expect("granted");
    assert!(next.token() > lease.token());
    issuer.release(&next).await.expect("release");

    tokio::time::sleep(IDLE).await;
    let other = fencing_testkit::unique_name("token-ttl-floor");
    issuer
        .raise_floor(&other, FencingToken::new(1 << 20))
        .await
        .expect("raise_floor after the token expired");
    tokio::time::sleep(IDLE).await;
    let floored = issuer
        .try_acquire(&LeaseRequest::new(&other, Duration::from_secs(3)))
        .await
        .expect("acquire after the token expired")
        .expect("free");
    assert!(floored.token() > FencingToken::new(1 << 20));
    issuer.release(&floored).await.expect("release");

    tokio::time::sleep(IDLE).await;
    let checks = issuer
        .verify()
        .await
        .expect("verify after the token expired");
    assert!(fencing_core::safety::all_safe(&checks), "{checks:#?}");
}

/// A background keep-alive renews every TTL/3 and so never lets the
/// token idle; a lease kept alive for several token lifetimes stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_holds_its_lease_across_token_lifetimes() {
    if ETCD.skipped() {
        return;
    }
    let etcd = OwnEtcd::start(1).await;
    etcd.enable_auth().await;
    let issuer = issuer_on(&etcd).await;
    let ttl = Duration::from_secs(3);
    let resource = fencing_testkit::unique_name("token-ttl-keep-alive");
    let keep_alive = issuer.lock(&resource).ttl(ttl).await.expect("lock");
    let lease = keep_alive.lease();
    tokio::time::sleep(ttl * 3).await;
    assert!(!keep_alive.is_lost());
    let holding = issuer.holder(&resource).await.expect("holder");
    assert_eq!(holding.expect("held").token, lease.token());
    keep_alive
        .release()
        .await
        .expect("release through the handle");
}
