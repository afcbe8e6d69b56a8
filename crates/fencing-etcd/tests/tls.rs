//! The issuer over mutual TLS with a user whose role is limited to its
//! prefix: the etcd of `integration/services.sh up etcd-tls`
//! (`FENCING_ETCD_TLS_ENDPOINTS`, default `127.0.0.1:2389`), which
//! requires a client certificate (`--client-cert-auth`), has `auth
//! enable`, and gives user `fencing` a role with readwrite on `fencing/`
//! only. Every issuer here therefore lives under `fencing/`.
//!
//! The issuer suite (the zombie scenario and the history checker
//! included), what the limited role may and may not do, `verify`, and the
//! failures: each typed, none showing the password or the client key.

use std::sync::Arc;
use std::time::Duration;

use fencing_core::auth::Credentials;
use fencing_core::safety::Verdict;
use fencing_core::tls::TlsOptions;
use fencing_core::{Error, FencingToken, LeaseRequest, TokenIssuer};
use fencing_etcd::{EtcdConfig, EtcdIssuer};
use fencing_harness::env::{
    ETCD, ETCD_TLS, TLS_PASSWORD, assert_no_secret, tls_file, with_option, with_test_tls,
};
use fencing_harness::verify::{assert_cluster_checks, assert_verdicts, check};
use fencing_testkit::issuer::{IssuerProfile, assert_held, grant};

/// The TLS server's `HOST:PORT` list, whatever scheme the variable has.
fn hosts() -> String {
    ETCD_TLS
        .endpoint()
        .split(',')
        .map(|e| {
            let e = e.trim();
            e.strip_prefix("https://")
                .unwrap_or(e)
                .trim_end_matches('/')
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A fresh prefix under `fencing/`, the one the role may use.
fn fresh_prefix() -> String {
    format!("fencing/{}/", fencing_testkit::unique_prefix())
}

/// `etcd://USERINFO@HOSTS?prefix=fencing/…/` (no TLS option yet).
fn url_as(userinfo: &str) -> String {
    format!("etcd://{userinfo}@{}?prefix={}", hosts(), fresh_prefix())
}

/// As user `fencing`, over mutual TLS with the test PKI.
fn url() -> String {
    with_test_tls(&url_as(&format!("fencing:{TLS_PASSWORD}")))
}

async fn connect_url(url: &str) -> Option<EtcdIssuer> {
    if ETCD_TLS.skipped() {
        return None;
    }
    let config = EtcdConfig::from_url(url).expect("a valid URL");
    match config.connect_issuer().await {
        Ok(issuer) => Some(issuer),
        Err(e) => ETCD_TLS.unavailable(&e.chain()),
    }
}

async fn connect() -> Option<EtcdIssuer> {
    connect_url(&url()).await
}

async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
    Some(Arc::new(connect().await?))
}

fn profile() -> IssuerProfile {
    IssuerProfile {
        expiry_slack: Duration::from_secs(3),
        ..IssuerProfile::with_ttl(Duration::from_secs(2))
    }
}

fencing_testkit::issuer_conformance!(issuer, profile());

/// What the issuer does, each with a role that may only read and write
/// `fencing/`: acquire, wait in the queue (the watch) and be granted on
/// release, renew, a background keep-alive, holder, raise_floor, a lease
/// rebuilt from its token, and verify.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_the_issuer_does_works_with_a_role_limited_to_its_prefix() {
    let Some(issuer) = connect().await else {
        return;
    };
    assert!(issuer.prefix().starts_with("fencing/"));
    let ttl = Duration::from_secs(3);
    let resource = fencing_testkit::unique_name("limited-role");
    issuer
        .raise_floor(&resource, FencingToken::new(1 << 30))
        .await
        .expect("raise_floor");
    let first = grant(&issuer, &resource, ttl).await;
    assert!(first.token() > FencingToken::new(1 << 30), "{first:?}");
    let holding = issuer
        .holder(&resource)
        .await
        .expect("holder")
        .expect("held");
    assert_eq!(holding.token, first.token());

    // A waiter watches the key ahead, and is granted on release.
    let waiter = {
        let issuer = issuer.clone();
        let request = LeaseRequest::new(&resource, ttl);
        tokio::spawn(async move { issuer.acquire(&request, Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let renewed = issuer.renew(&first).await.expect("renew");
    assert_eq!(renewed.token(), first.token());
    assert!(!waiter.is_finished(), "granted while held");
    issuer.release(&first).await.expect("release");
    let second = waiter
        .await
        .expect("joined")
        .expect("the waiter is granted");
    assert!(second.token() > first.token());

    // A keep-alive holds it past several TTLs.
    let keep_alive = fencing_core::keepalive::KeepAlive::spawn(Arc::new(issuer.clone()), second);
    tokio::time::sleep(ttl * 2).await;
    assert!(!keep_alive.is_lost());
    assert_held(
        &issuer,
        &resource,
        ttl,
        "a kept-alive lease on a limited role",
    )
    .await;
    keep_alive
        .release()
        .await
        .expect("release through the handle");

    let resource = lock_service_rebuilt(&issuer).await;
    assert!(issuer.holder(&resource).await.expect("holder").is_none());

    let checks = issuer.verify().await.expect("verify with a limited role");
    assert!(fencing_core::safety::all_safe(&checks), "{checks:#?}");
}

async fn lock_service_rebuilt(issuer: &EtcdIssuer) -> String {
    fencing_testkit::lock_service::a_lease_rebuilt_from_its_token_renews_and_releases(issuer).await
}

/// verify on the TLS server: the transport is checked TLS, each member is
/// reached on its own connection with the same TLS and user, and the
/// cluster-wide reads (members, status, alarms) pass on etcd 3.4 for a
/// role limited to a prefix (where a server refuses them, they are
/// warnings, never a failure of verify).
#[tokio::test]
async fn verify_reaches_each_member_with_the_issuers_tls_and_user() {
    let Some(issuer) = connect().await else {
        return;
    };
    let checks = issuer.verify().await.expect("verify");
    let transport = check(&checks, "transport");
    assert_eq!(transport.verdict, Verdict::Pass, "{checks:#?}");
    assert!(
        transport.detail.contains("host name checked"),
        "{transport:?}"
    );
    let summary = ("members", Verdict::Warn, "no failover");
    assert_cluster_checks(&checks, summary, "member ", 1, Verdict::Pass);
    assert_verdicts(
        &checks,
        &[
            ("leader", Verdict::Pass),
            ("endpoints", Verdict::Pass),
            ("alarms", Verdict::Pass),
            ("tokens rise", Verdict::Pass),
        ],
    );
}

/// Outside its prefix the role may do nothing: connecting (its first read
/// is of the prefix) is refused as a non-retryable backend error that
/// says what the role lacks, and so is an acquire under such a prefix.
#[tokio::test]
async fn a_prefix_outside_the_role_is_refused_saying_so() {
    let Some(inside) = connect().await else {
        return;
    };
    let denied = |e: &Error| {
        assert!(
            matches!(
                e,
                Error::Backend {
                    retryable: false,
                    ..
                }
            ),
            "{e:?}"
        );
        let chain = e.chain();
        assert!(
            chain.contains("permission denied") && chain.contains("role lacks"),
            "{chain}"
        );
        assert_no_secrets("a prefix outside the role", e);
    };
    let url = with_test_tls(&format!(
        "etcd://fencing:{TLS_PASSWORD}@{}?prefix=other/",
        hosts()
    ));
    let e = EtcdConfig::from_url(&url)
        .expect("valid")
        .connect_issuer()
        .await
        .expect_err("the role has no rights on other/");
    denied(&e);
    // The same client under another prefix: refused at each call, not at connect.
    let outside = EtcdConfig::default()
        .with_prefix("other/")
        .issuer_on(inside.client().clone())
        .expect("a prefix");
    let request = LeaseRequest::new(
        fencing_testkit::unique_name("denied"),
        Duration::from_secs(3),
    );
    denied(
        &outside
            .try_acquire(&request)
            .await
            .expect_err("no rights on other/"),
    );
    denied(&outside.holder("r").await.expect_err("no rights on other/"));
}

/// Mutual TLS alone: etcd takes the user from the certificate's common
/// name (`fencing`), so an issuer with a client certificate and no
/// password works too, with the same role.
#[tokio::test]
async fn mutual_tls_alone_logs_in_as_the_certificates_common_name() {
    let Some(issuer) = connect_url(&with_test_tls(&format!(
        "etcd://{}?prefix={}",
        hosts(),
        fresh_prefix()
    )))
    .await
    else {
        return;
    };
    let resource = fencing_testkit::unique_name("cn");
    let lease = grant(&issuer, &resource, Duration::from_secs(3)).await;
    issuer.release(&lease).await.expect("release");
}

/// The same TLS and user through the setters instead of the URL.
#[tokio::test]
async fn the_setters_give_the_same_connection() {
    if ETCD_TLS.skipped() {
        return;
    }
    let endpoints: Vec<String> = hosts().split(',').map(str::to_owned).collect();
    let config = EtcdConfig::new(endpoints)
        .with_prefix(fresh_prefix())
        .with_tls(
            TlsOptions::new()
                .with_ca_file(tls_file("ca.pem"))
                .with_client_cert(tls_file("client.pem"), tls_file("client-key.pem")),
        )
        .with_credentials(Credentials::new("fencing", TLS_PASSWORD));
    assert!(config.endpoints().iter().all(|e| e.starts_with("https://")));
    assert!(!format!("{config:?}").contains(TLS_PASSWORD));
    let issuer = match config.connect_issuer().await {
        Ok(issuer) => issuer,
        Err(e) => ETCD_TLS.unavailable(&e.chain()),
    };
    let lease = grant(
        &issuer,
        &fencing_testkit::unique_name("setters"),
        Duration::from_secs(3),
    )
    .await;
    issuer.release(&lease).await.expect("release");
}

/// A line of the client key file: no error may show it either.
fn key_line() -> String {
    let key =
        std::fs::read_to_string(tls_file("client-key.pem")).expect("the test PKI's client key");
    key.lines()
        .find(|l| !l.starts_with("-----") && l.len() > 20)
        .expect("a base64 line")
        .to_owned()
}

fn assert_no_secrets(what: &str, e: &Error) {
    assert_no_secret(what, e, TLS_PASSWORD);
    assert_no_secret(what, e, &key_line());
}

/// `url` must fail to connect: the error, checked to carry no secret.
async fn refused(what: &str, url: &str) -> Option<Error> {
    if ETCD_TLS.skipped() {
        return None;
    }
    let config = EtcdConfig::from_url(url).expect("a valid URL");
    let e = match tokio::time::timeout(Duration::from_secs(20), config.connect_issuer()).await {
        Ok(Ok(_)) => panic!("{what}: connected"),
        Ok(Err(e)) => e,
        Err(_) => panic!("{what}: no answer within 20 s"),
    };
    eprintln!("{what}: {}", e.chain());
    assert_no_secrets(what, &e);
    Some(e)
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_is_a_tls_error() {
    let url = format!(
        "{}&sslrootcert={}&sslcert={}&sslkey={}",
        url_as(&format!("fencing:{TLS_PASSWORD}")),
        tls_file("other-ca.pem").display(),
        tls_file("client.pem").display(),
        tls_file("client-key.pem").display(),
    );
    let Some(e) = refused("wrong CA", &url).await else {
        return;
    };
    assert!(
        matches!(
            e,
            Error::Tls {
                backend: "etcd",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!e.is_retryable());
}

#[tokio::test]
async fn no_client_certificate_where_one_is_required_is_a_tls_error() {
    let url = with_option(
        &url_as(&format!("fencing:{TLS_PASSWORD}")),
        &format!("sslrootcert={}", tls_file("ca.pem").display()),
    );
    let Some(e) = refused("no client certificate", &url).await else {
        return;
    };
    assert!(
        matches!(
            e,
            Error::Tls {
                backend: "etcd",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!e.is_retryable());
}

#[tokio::test]
async fn a_wrong_password_is_unauthenticated() {
    let url = with_test_tls(&url_as("fencing:not-the-password"));
    let Some(e) = refused("wrong password", &url).await else {
        return;
    };
    assert!(
        matches!(
            e,
            Error::Unauthenticated {
                backend: "etcd",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!e.is_retryable());
    assert_no_secret("wrong password", &e, "not-the-password");
    let url = with_test_tls(&url_as(&format!("nobody:{TLS_PASSWORD}")));
    let e = refused("unknown user", &url).await.expect("not skipped");
    assert!(matches!(e, Error::Unauthenticated { .. }), "{e:?}");
}

/// Plaintext to the TLS port: refused clearly (never a hang, never
/// granted), and with no secret.
#[tokio::test]
async fn plaintext_to_the_tls_port_is_refused() {
    let url = url_as(&format!("fencing:{TLS_PASSWORD}"));
    let Some(e) = refused("plaintext to the TLS port", &url).await else {
        return;
    };
    assert!(
        matches!(
            e,
            Error::Backend {
                retryable: false,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.chain().contains("serves only TLS"), "{}", e.chain());
}

#[tokio::test]
async fn a_refused_connection_shows_no_secret() {
    if ETCD_TLS.skipped() {
        return;
    }
    let url = with_test_tls(&format!(
        "etcd://fencing:{TLS_PASSWORD}@127.0.0.1:1?prefix=fencing/"
    ));
    let e = EtcdConfig::from_url(&url)
        .expect("valid")
        .connect_issuer()
        .await
        .expect_err("nothing listens on port 1");
    assert!(e.is_retryable(), "{e:?}");
    assert_no_secrets("refused connection", &e);
}

#[test]
fn a_bad_url_with_a_password_is_invalid_input_without_it() {
    for url in [
        format!("etcd://fencing:{TLS_PASSWORD}@h:1,,g:2"),
        format!("etcd://fencing:{TLS_PASSWORD}@h:1?sslmode=verify-ca"),
        format!("etcd://fencing:{TLS_PASSWORD}@h:1?sslmod=verify-full"),
        format!("etcd://fencing:{TLS_PASSWORD}/x@h:1"),
        format!("etcd://fencing:{TLS_PASSWORD}?x@h:1"),
        format!("etcd:/fencing:{TLS_PASSWORD}@h:1"),
    ] {
        let e = EtcdConfig::from_url(&url).expect_err(&url);
        assert!(matches!(e, Error::InvalidInput { .. }), "{e:?}");
        assert_no_secret(&url, &e, TLS_PASSWORD);
        assert_no_secret(&url, &e, "tls-secret");
    }
}

/// A missing CA file, and a file that is no PEM certificate, are named
/// (not a failure to reach etcd, never retried).
#[tokio::test]
async fn unreadable_tls_files_are_invalid_input_naming_them() {
    let missing = format!(
        "{}&sslrootcert=/nonexistent/ca.pem",
        url_as(&format!("fencing:{TLS_PASSWORD}"))
    );
    let e = EtcdConfig::from_url(&missing)
        .unwrap()
        .connect_issuer()
        .await
        .expect_err("missing");
    assert!(
        matches!(&e, Error::InvalidInput { message } if message.contains("/nonexistent/ca.pem")),
        "{e:?}"
    );
    // A key in place of the certificate: PEM, but not a CERTIFICATE.
    let wrong = format!(
        "{}&sslrootcert={}",
        url_as(&format!("fencing:{TLS_PASSWORD}")),
        tls_file("client-key.pem").display()
    );
    let e = EtcdConfig::from_url(&wrong)
        .unwrap()
        .connect_issuer()
        .await
        .expect_err("not a certificate");
    assert!(
        matches!(&e, Error::InvalidInput { message } if message.contains("client-key.pem")),
        "{e:?}"
    );
    assert_no_secrets("a key as the CA", &e);
    // PEM markers around no certificate: tonic's parser refuses it.
    let dir = std::env::temp_dir().join(format!("fencing-etcd-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let garbage = dir.join("garbage.pem");
    std::fs::write(
        &garbage,
        "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let url = format!(
        "{}&sslrootcert={}",
        url_as(&format!("fencing:{TLS_PASSWORD}")),
        garbage.display()
    );
    let e = EtcdConfig::from_url(&url)
        .unwrap()
        .connect_issuer()
        .await
        .expect_err("garbage");
    std::fs::remove_dir_all(&dir).unwrap();
    eprintln!("garbage CA: {}", e.chain());
    assert!(
        matches!(&e, Error::InvalidInput { message } if message.contains("parsing TLS certificate")),
        "{e:?}"
    );
}

/// A user given to an etcd with authentication off (the plaintext one):
/// the issuer connects without it, as etcdctl does, and verify warns.
#[tokio::test]
async fn a_user_on_an_etcd_without_auth_connects_and_verify_warns() {
    if ETCD.skipped() {
        return;
    }
    let host = ETCD.endpoint();
    let host = host.split(',').next().expect("an endpoint").trim();
    let host = host.strip_prefix("http://").unwrap_or(host);
    let url = format!(
        "etcd://fencing:{TLS_PASSWORD}@{host}?prefix={}",
        fresh_prefix()
    );
    let issuer = match EtcdConfig::from_url(&url).unwrap().connect_issuer().await {
        Ok(issuer) => issuer,
        Err(e) => ETCD.unavailable(&e.chain()),
    };
    let checks = issuer.verify().await.expect("verify");
    let auth = check(&checks, "auth");
    assert_eq!(auth.verdict, Verdict::Warn, "{checks:#?}");
    assert!(auth.detail.contains("authentication off"), "{auth:?}");
    assert_eq!(
        check(&checks, "transport").verdict,
        Verdict::Pass,
        "{checks:#?}"
    );
}
