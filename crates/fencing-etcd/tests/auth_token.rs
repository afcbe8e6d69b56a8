//! etcd's auth token expires while an issuer is idle: a simple token
//! (etcd 3.4's default) lives `--auth-token-ttl` after its last use, 5
//! minutes by default. An issuer that logs in once must go on working
//! past that: etcd-client logs in again when etcd answers "invalid auth
//! token" (`ConnectOptions::with_auto_token_refresh`, which the issuer
//! turns on).
//!
//! On an etcd of its own (the `etcd` binary that `integration/services.sh
//! up etcd` installs, on free loopback ports, `--auth-token-ttl=1`, `auth
//! enable`, a user whose role may use `fencing/` only), so a second of
//! idleness expires the token. `FENCING_SKIP=etcd` skips it.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fencing_core::{FencingToken, IssuerExt, LeaseRequest, TokenIssuer};
use fencing_etcd::etcd_client::{Client, ConnectOptions, Permission};
use fencing_etcd::{EtcdConfig, EtcdIssuer};
use fencing_harness::env::ETCD;
use fencing_testkit::issuer::grant;

const PASSWORD: &str = "token-ttl-secret";
/// Longer than the token's TTL (1 s) and etcd's token sweep.
const IDLE: Duration = Duration::from_millis(2500);

/// An etcd of this test's own, killed and removed when dropped.
struct OwnEtcd {
    _child: tokio::process::Child,
    dir: PathBuf,
    client_port: u16,
}

impl Drop for OwnEtcd {
    fn drop(&mut self) {
        // `kill_on_drop` ends the process.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("its address").port()
}

impl OwnEtcd {
    async fn start(token_ttl_secs: u32) -> Self {
        let (client_port, peer_port) = (free_port(), free_port());
        let dir = std::env::temp_dir().join(format!(
            "fencing-etcd-token-{}-{client_port}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a data directory");
        let log = std::fs::File::create(dir.join("etcd.log")).expect("a log file");
        let client = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let child = tokio::process::Command::new("etcd")
            .args(["--name", "token-ttl", "--data-dir"])
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("token-ttl={peer}")])
            .args(["--auth-token-ttl", &token_ttl_secs.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start `etcd` ({e}): install it with `integration/services.sh up etcd`, or skip \
                     these tests with FENCING_SKIP=etcd"
                )
            });
        let etcd = Self {
            _child: child,
            dir,
            client_port,
        };
        etcd.wait_until_it_answers().await;
        etcd
    }

    fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    async fn wait_until_it_answers(&self) {
        let endpoint = format!("http://{}", self.endpoint());
        for _ in 0..100 {
            let options = ConnectOptions::new().with_connect_timeout(Duration::from_millis(500));
            if let Ok(mut client) = Client::connect([&endpoint], Some(options)).await
                && client.status().await.is_ok()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let log = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
        panic!("the test's own etcd at {endpoint} did not answer within 10 s; its log:\n{log}");
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
