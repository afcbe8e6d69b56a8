//! The issuer over TLS with digest credentials, on the TLS-only ZooKeeper
//! (`FENCING_ZK_TLS_ADDR`, default `127.0.0.1:2281`, its CA in
//! `FENCING_TLS_DIR`; start it with `integration/services.sh up zk-tls`):
//! the issuer suite with both token sources (the zombie scenario, the
//! history checker and nested names included), our znodes closed to every
//! other identity, `verify`, and each failure typed and without the
//! password.
//!
//! The server does not ask for client certificates (`ssl.clientAuth=none`),
//! so a missing one cannot be refused here; the URLs give one all the same.

use std::sync::Arc;
use std::time::Duration;

use fencing_core::safety::Verdict;
use fencing_core::{Error, LeaseRequest, TokenIssuer};
use fencing_harness::env::{
    TLS_PASSWORD, ZK_TLS, ZOOKEEPER, assert_no_secret, tls_file, with_option, with_test_tls,
};
use fencing_testkit::issuer::{IssuerProfile, assert_lease_lost, grant};
use fencing_zookeeper::zookeeper_client as zk;
use fencing_zookeeper::{ZkConfig, ZkIssuer};

/// `zk://fencing:PASSWORD@HOST:PORT{prefix}` with the test CA and client
/// certificate.
fn url(prefix: &str) -> String {
    with_test_tls(&format!(
        "zk://fencing:{TLS_PASSWORD}@{}{prefix}",
        ZK_TLS.endpoint()
    ))
}

fn fresh_prefix() -> String {
    format!("/fencing-test/{}", fencing_testkit::unique_prefix())
}

async fn open(url: &str) -> fencing_core::Result<ZkIssuer> {
    ZkConfig::from_url(url)?.connect_issuer().await
}

/// An issuer under a fresh prefix, over TLS and logged in, or `None` if
/// this run skips the TLS ZooKeeper.
async fn connect(token: &str) -> Option<ZkIssuer> {
    if ZK_TLS.skipped() {
        return None;
    }
    let url = with_option(&url(&fresh_prefix()), &format!("token={token}"));
    match open(&url).await {
        Ok(issuer) => Some(issuer),
        Err(e) => ZK_TLS.unavailable(&e.chain()),
    }
}

fn profile() -> IssuerProfile {
    IssuerProfile {
        // A session closed at the deadline goes at once; allow for a slow machine.
        expiry_slack: Duration::from_secs(2),
        // Longer than the server's maxSessionTimeout (20 s) would be shortened.
        long_ttl: Duration::from_secs(20),
        ..IssuerProfile::with_ttl(Duration::from_secs(2))
    }
}

mod czxid {
    use super::*;

    async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
        Some(Arc::new(connect("czxid").await?))
    }

    fencing_testkit::issuer_conformance!(issuer, profile());
}

mod parent_cversion {
    use super::*;

    async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
        Some(Arc::new(connect("cversion").await?))
    }

    fencing_testkit::issuer_conformance!(issuer, profile());
}

/// A session over TLS with the test CA, logged in as `digest` if given.
async fn other_client(digest: Option<&str>) -> zk::Client {
    let ca = std::fs::read_to_string(tls_file("ca.pem")).expect("the test CA");
    let tls = zk::TlsOptions::new().with_pem_ca(&ca).expect("the test CA");
    let mut connector = zk::Client::connector().with_tls(tls);
    if let Some(digest) = digest {
        connector = connector.with_auth("digest", digest.as_bytes());
    }
    connector
        .secure_connect(&ZK_TLS.endpoint())
        .await
        .expect("a session over TLS")
}

fn only_ours(path: &str, acls: &[zk::Acl]) {
    assert!(
        acls.iter()
            .all(|a| a.scheme() == "digest" && a.id().starts_with("fencing:")),
        "{path}: {acls:?}"
    );
}

/// Every znode the issuer makes carries the digest identity's ACL: a
/// session without credentials, or with a wrong password, can neither
/// read, write, create under nor delete the prefix, the resource znode
/// (its floor) or a lock node; the issuer's own sessions can, but for
/// deleting a resource znode, which nobody may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_znodes_refuse_every_other_identity() {
    let Some(issuer) = connect("czxid").await else {
        return;
    };
    let resource = fencing_testkit::unique_name("acl");
    let lease = grant(&issuer, &resource, Duration::from_secs(10)).await;
    let ours = issuer.client();
    let (prefix, dir) = (issuer.prefix().to_owned(), issuer.resource_path(&resource));
    let children = ours.list_children(&dir).await.expect("our lock node");
    let node = children.iter().find(|c| *c != fencing_zookeeper::KEEPER);
    let lock = format!("{dir}/{}", node.expect("our lock node"));

    let (acls, _) = ours.get_acl(&prefix).await.expect("the prefix's ACL");
    only_ours(&prefix, &acls);
    assert!(
        acls.iter()
            .all(|a| !a.permission().has(zk::Permission::DELETE)),
        "{acls:?}"
    );
    let keeper = format!("{dir}/{}", fencing_zookeeper::KEEPER);
    for path in [&dir, &lock, &keeper] {
        let (acls, _) = ours.get_acl(path).await.expect("an ACL");
        only_ours(path, &acls);
    }

    let wrong = format!("fencing:not-{TLS_PASSWORD}");
    for (who, other) in [
        ("no credentials", other_client(None).await),
        ("a wrong password", other_client(Some(&wrong)).await),
    ] {
        let create = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let refused = [
            (
                "set the floor",
                other.set_data(&dir, b"0", None).await.map(drop),
            ),
            ("read the floor", other.get_data(&dir).await.map(drop)),
            (
                "create a lock node",
                other
                    .create(&format!("{dir}/lock-"), b"x", &create)
                    .await
                    .map(drop),
            ),
            (
                "create a resource",
                other
                    .create(&format!("{prefix}/x"), b"", &create)
                    .await
                    .map(drop),
            ),
            ("delete the lock node", other.delete(&lock, None).await),
            ("delete the resource znode", other.delete(&dir, None).await),
            (
                "change the ACL",
                other
                    .set_acl(&dir, &zk::Acls::anyone_all(), None)
                    .await
                    .map(drop),
            ),
        ];
        for (what, result) in refused {
            assert_eq!(result, Err(zk::Error::NoAuth), "{who}: {what}");
        }
    }

    // Ours: write the floor (back as it was), create and delete a child.
    let (data, _) = ours.get_data(&dir).await.expect("read the floor");
    ours.set_data(&dir, &data, None)
        .await
        .expect("write the floor");
    let child = format!("{dir}/probe");
    let mine = zk::CreateMode::Persistent.with_acls(zk::Acls::creator_all());
    ours.create(&child, b"", &mine)
        .await
        .expect("create a child");
    ours.delete(&child, None).await.expect("delete it");
    assert_eq!(ours.delete(&dir, None).await, Err(zk::Error::NoAuth));
    // Deleting the lock node ends the lease.
    ours.delete(&lock, None)
        .await
        .expect("delete our lock node");
    assert_lease_lost(
        issuer.renew(&lease).await,
        "renewing after its node was deleted",
    );
}

/// `verify` over TLS: the transport is checked, `srvr` answers over TLS
/// (a standalone server), and our znodes let only our identity write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reads_the_server_over_tls_and_our_acls() {
    let Some(issuer) = connect("czxid").await else {
        return;
    };
    let resource = fencing_testkit::unique_name("verify");
    let lease = grant(&issuer, &resource, Duration::from_secs(5)).await;
    issuer.release(&lease).await.expect("release");
    let checks = issuer.verify().await.expect("verify");
    let check = |name: &str| fencing_testkit::safety::check(&checks, name);
    assert_eq!(check("transport").verdict, Verdict::Pass, "{checks:#?}");
    assert!(
        check("transport").detail.contains("host name"),
        "{checks:#?}"
    );
    let acls = check("znode ACLs");
    assert_eq!(acls.verdict, Verdict::Pass, "{acls:?}");
    assert!(acls.detail.contains("1 resource znode"), "{acls:?}");
    let server = check(&format!("server {}", ZK_TLS.endpoint()));
    assert!(server.detail.starts_with("standalone"), "{server:?}");
    assert_eq!(check("tokens rise").verdict, Verdict::Pass, "{checks:#?}");
    assert_eq!(
        check("resource znodes").verdict,
        Verdict::Pass,
        "{checks:#?}"
    );
}

/// A prefix and a resource znode made open to anyone (before credentials
/// were used): the issuer takes DELETE off the prefix, leaves the rest
/// (clients without credentials may still use them), and `verify` names
/// both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reports_znodes_anyone_may_write() {
    let Some(issuer) = connect("czxid").await else {
        return;
    };
    let old = format!("{}-old", issuer.prefix());
    let open_to_all = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let client = issuer.client();
    client
        .create(&old, b"", &open_to_all)
        .await
        .expect("an open prefix");
    let legacy = format!("{old}/legacy");
    client
        .create(&legacy, b"", &open_to_all)
        .await
        .expect("an open resource znode");
    let reopened = open(&url(&old)).await.expect("connect to the open prefix");
    let (acls, _) = client.get_acl(&old).await.expect("get_acl");
    assert!(
        acls.iter()
            .all(|a| !a.permission().has(zk::Permission::DELETE)),
        "{acls:?}"
    );
    let checks = reopened.verify().await.expect("verify");
    let acls = fencing_testkit::safety::check(&checks, "znode ACLs");
    assert_eq!(acls.verdict, Verdict::Warn, "{acls:?}");
    assert!(
        acls.detail.contains(&format!("{old} (WRITE|CREATE|ADMIN)"))
            && acls
                .detail
                .contains(&format!("{legacy} (WRITE|CREATE|DELETE|ADMIN)"))
            && acls.detail.contains("2 of 2"),
        "{acls:?}"
    );
}

/// Each failure is typed, not retryable where retrying cannot help, and
/// shows no password: a wrong CA, a wrong password (or none) on our
/// prefix, plaintext to the TLS port, TLS to a plaintext port, a bad URL,
/// an unreadable key, a closed port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_typed_and_show_no_password() {
    let Some(issuer) = connect("czxid").await else {
        return;
    };
    let prefix = issuer.prefix().to_owned();
    let endpoint = ZK_TLS.endpoint();
    let failed = async |url: &str| match open(url).await {
        Ok(issuer) => panic!("{url}: connected: {issuer:?}"),
        Err(e) => {
            assert_no_secret(url, &e, TLS_PASSWORD);
            e
        }
    };

    let other_ca = tls_file("other-ca.pem").display().to_string();
    let e = failed(&format!(
        "zk://fencing:{TLS_PASSWORD}@{endpoint}{prefix}?sslrootcert={other_ca}"
    ))
    .await;
    assert!(
        matches!(
            e,
            Error::Tls {
                backend: "zookeeper",
                ..
            }
        ),
        "{}",
        e.chain()
    );
    assert!(
        !e.is_retryable() && e.chain().contains("UnknownIssuer"),
        "{}",
        e.chain()
    );

    let wrong = "not-the-password";
    let e = failed(&with_test_tls(&format!(
        "zk://fencing:{wrong}@{endpoint}{prefix}"
    )))
    .await;
    assert_no_secret("a wrong password", &e, wrong);
    assert!(matches!(e, Error::Unauthenticated { .. }), "{}", e.chain());
    assert!(!e.is_retryable());
    let e = failed(&with_test_tls(&format!("zk://{endpoint}{prefix}"))).await;
    assert!(
        matches!(e, Error::Unauthenticated { .. }),
        "no credentials: {}",
        e.chain()
    );

    let e = failed(&format!("zk://fencing:{TLS_PASSWORD}@{endpoint}{prefix}")).await;
    assert!(
        matches!(
            e,
            Error::Backend {
                retryable: false,
                ..
            }
        ) && e.chain().contains("speaks TLS"),
        "plaintext to the TLS port: {}",
        e.chain()
    );

    if !ZOOKEEPER.skipped() {
        let plain = ZOOKEEPER.endpoint();
        let e = failed(&with_test_tls(&format!(
            "zk://fencing:{TLS_PASSWORD}@{plain}{prefix}"
        )))
        .await;
        if e.is_retryable() {
            ZOOKEEPER.unavailable(&e.chain());
        }
        assert!(
            matches!(e, Error::Tls { .. }),
            "TLS to the plaintext port: {}",
            e.chain()
        );
    }

    for bad in [
        format!("zk://fencing:{TLS_PASSWORD}@{endpoint}?sslmode=require&sslrootcert={other_ca}"),
        format!("zk://fencing:{TLS_PASSWORD}@{endpoint}?sslmode=verify-ca&sslrootcert={other_ca}"),
        format!("zk://fencing:{TLS_PASSWORD}@{endpoint}?sslmode=verify-full"),
        format!("zk://fencing:{TLS_PASSWORD}@{endpoint}?typo=1"),
        format!("zk://fencing:{TLS_PASSWORD}@/x"),
        format!("zk:/fencing:{TLS_PASSWORD}@{endpoint}"),
        format!("zk://fencing:{TLS_PASSWORD}@{endpoint}/zookeeper"),
        with_option(
            &format!("zk://fencing:{TLS_PASSWORD}@{endpoint}"),
            &format!(
                "sslrootcert={}&sslcert={}&sslkey={}",
                tls_file("ca.pem").display(),
                tls_file("client.pem").display(),
                tls_file("ca.pem").display()
            ),
        ),
    ] {
        let e = failed(&bad).await;
        assert!(
            matches!(e, Error::InvalidInput { .. }),
            "{bad}: {}",
            e.chain()
        );
    }

    // A key file that looks like one and is not: named, never quoted.
    let key_bytes = "c2VjcmV0LWtleS1ieXRlcw!!";
    let bad_key = std::env::temp_dir().join(format!("zk-bad-key-{}.pem", std::process::id()));
    std::fs::write(
        &bad_key,
        format!("-----BEGIN PRIVATE KEY-----\n{key_bytes}\n-----END PRIVATE KEY-----\n"),
    )
    .expect("write a bad key");
    let e = failed(&with_option(
        &format!("zk://fencing:{TLS_PASSWORD}@{endpoint}"),
        &format!(
            "sslrootcert={}&sslcert={}&sslkey={}",
            tls_file("ca.pem").display(),
            tls_file("client.pem").display(),
            bad_key.display()
        ),
    ))
    .await;
    std::fs::remove_file(&bad_key).expect("remove the bad key");
    assert_no_secret("a bad key", &e, key_bytes);
    assert!(
        matches!(e, Error::InvalidInput { .. })
            && e.chain().contains(&bad_key.display().to_string()),
        "a bad key: {}",
        e.chain()
    );

    let e = failed(&with_test_tls(&format!(
        "zk://fencing:{TLS_PASSWORD}@127.0.0.1:1/x"
    )))
    .await;
    assert!(
        matches!(
            e,
            Error::Backend {
                retryable: true,
                ..
            }
        ),
        "a closed port: {}",
        e.chain()
    );

    let debug = format!(
        "{issuer:?} {:?}",
        ZkConfig::from_url(&url(&prefix)).unwrap()
    );
    assert!(!debug.contains(TLS_PASSWORD), "{debug}");
    assert!(
        debug.contains("VerifyFull") && debug.contains("fencing"),
        "{debug}"
    );
}

/// A lease over TLS renews and releases as in plaintext, and a waiter is
/// let in at once when it is released (the queue's watches work over TLS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_let_in_when_the_holder_releases() {
    let Some(issuer) = connect("cversion").await else {
        return;
    };
    let resource = fencing_testkit::unique_name("handoff");
    let ttl = Duration::from_secs(10);
    let first = grant(&issuer, &resource, ttl).await;
    let waiter = {
        let issuer = issuer.clone();
        let request = LeaseRequest::new(&resource, ttl);
        tokio::spawn(async move { issuer.acquire(&request, Duration::from_secs(15)).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let renewed = issuer.renew(&first).await.expect("renew over TLS");
    issuer.release(&renewed).await.expect("release over TLS");
    let next = waiter
        .await
        .expect("the waiter")
        .expect("granted once released");
    assert!(
        next.token() > first.token(),
        "{} after {}",
        next.token(),
        first.token()
    );
    issuer.release(&next).await.expect("release");
}

/// Digest sends the password as it is: it goes only to a server that has
/// answered as ZooKeeper. A "server" that reads what it is sent and hangs
/// up (as a TLS port does to plaintext, logging the bytes it could not
/// decode) never sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_goes_only_to_a_server_that_answered() {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("its address");
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorder = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = vec![0; 4096];
            let read =
                tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buf)).await;
            if let Ok(Ok(n)) = read {
                recorder.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        }
    });
    let secret = "wire-secret-never-sent";
    let connected = ZkConfig::new(addr.to_string())
        .with_credentials(fencing_core::auth::Credentials::new("fencing", secret))
        .connect_issuer()
        .await;
    let e = connected.expect_err("no ZooKeeper there");
    assert_no_secret("a server that never answered", &e, secret);
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty(), "the client sent nothing");
    assert!(
        !seen.windows(secret.len()).any(|w| w == secret.as_bytes()),
        "the password went out before the server answered"
    );
}
