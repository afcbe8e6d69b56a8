//! Redis over TLS with an ACL login, on the TLS-only server
//! (`FENCING_REDIS_TLS_URL`: `integration/services.sh up redis-tls`: the
//! TLS port only, user `fencing`, the default user off, append-only and
//! fsynced): the issuer suite (the zombie scenario and the history checker
//! included) with the test CA and client certificate, `verify`'s transport
//! check, and every failure typed and free of the password. A private
//! `redis-server` that requires client certificates
//! (`--tls-auth-clients yes`) is started here for the missing-certificate
//! case.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::grant_once;
use fencing_core::auth::Credentials;
use fencing_core::safety::Verdict;
use fencing_core::tls::TlsOptions;
use fencing_core::{Error, Result, TokenIssuer};
use fencing_harness::env::{
    REDIS_AOF, REDIS_TLS, TLS_PASSWORD, assert_no_secret, tls_file, with_option, with_test_tls,
};
use fencing_redis::{Durability, RedisConfig, RedisIssuer};
use fencing_servers::Private;
use fencing_testkit::issuer::IssuerProfile;

const TTL: Duration = Duration::from_secs(5);

/// `url` trusting only the test CA (no client certificate: the shared
/// server takes clients without one).
fn with_ca(url: &str) -> String {
    with_option(
        url,
        &format!("sslrootcert={}", tls_file("ca.pem").display()),
    )
}

/// The TLS server's URL with the login replaced by `userinfo` (`user:pw`,
/// `:pw`, or empty for none).
fn with_login(userinfo: &str) -> String {
    let url = REDIS_TLS.endpoint();
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let hosts = rest.rsplit_once('@').map_or(rest, |(_, hosts)| hosts);
    match userinfo {
        "" => format!("{scheme}://{hosts}"),
        login => format!("{scheme}://{login}@{hosts}"),
    }
}

/// The TLS server's `host:port`.
fn address() -> String {
    with_login("").split_once("://").unwrap().1.to_owned()
}

async fn connect(url: &str) -> Result<RedisIssuer> {
    RedisConfig::from_url(url)?
        .with_prefix(format!("{}:", fencing_testkit::unique_prefix()))
        .connect_issuer()
        .await
}

/// An issuer on the TLS server through `url`, or `None` if the run skips
/// it; a server that does not answer fails the test.
async fn tls_issuer(url: &str) -> Option<RedisIssuer> {
    if REDIS_TLS.skipped() {
        return None;
    }
    match connect(url).await {
        Ok(issuer) => Some(issuer),
        Err(e @ Error::Backend { .. }) => REDIS_TLS.unavailable(&e.chain()),
        Err(e) => panic!(
            "{} through {}: {}",
            REDIS_TLS.name,
            fencing_core::redact(url),
            e.chain()
        ),
    }
}

/// The error connecting through `url`; `None` if the run skips the server.
async fn failure(url: &str) -> Option<Error> {
    if REDIS_TLS.skipped() {
        return None;
    }
    match connect(url).await {
        Ok(issuer) => panic!(
            "{}: connected, expected a failure: {issuer:?}",
            fencing_core::redact(url)
        ),
        Err(e) => {
            assert_no_secret(url, &e, TLS_PASSWORD);
            Some(e)
        }
    }
}

async fn suite_issuer() -> Option<Arc<dyn TokenIssuer>> {
    Some(Arc::new(
        tls_issuer(&with_test_tls(&REDIS_TLS.endpoint())).await?,
    ))
}

fn profile() -> IssuerProfile {
    IssuerProfile::with_ttl(Duration::from_millis(300))
}

fencing_testkit::issuer_conformance!(suite_issuer, profile());

fn transport(checks: &[fencing_core::safety::SafetyCheck]) -> &fencing_core::safety::SafetyCheck {
    checks
        .iter()
        .find(|c| c.name == "transport")
        .unwrap_or_else(|| panic!("no transport check in {checks:?}"))
}

#[tokio::test]
async fn the_ca_alone_verifies_and_the_acl_user_passes_the_durability_checks() {
    let Some(issuer) = tls_issuer(&with_ca(&REDIS_TLS.endpoint())).await else {
        return;
    };
    // Connecting checked INFO and CONFIG GET as user `fencing`; verify
    // reads them again, and says the certificate and host were checked.
    let checks = issuer.verify().await.unwrap();
    assert!(
        checks.iter().all(|c| c.verdict != Verdict::Unsafe),
        "{checks:?}"
    );
    let check = transport(&checks);
    assert_eq!(check.verdict, Verdict::Pass, "{check:?}");
    assert!(check.detail.contains("host name checked"), "{check:?}");
    let first = grant_once(&issuer, "ca-only", TTL).await;
    assert!(grant_once(&issuer, "ca-only", TTL).await.token() > first.token());
}

#[tokio::test]
async fn the_setters_give_the_tls_options_and_the_login() {
    if REDIS_TLS.skipped() {
        return;
    }
    let issuer = RedisConfig::new(with_login(""))
        .with_tls(TlsOptions::new().with_ca_file(tls_file("ca.pem")))
        .with_credentials(Credentials::new("fencing", TLS_PASSWORD))
        .connect_issuer()
        .await
        .unwrap_or_else(|e| REDIS_TLS.unavailable(&e.chain()));
    grant_once(&issuer, "setters", TTL).await;
    // The setters win over the URL's options and login.
    let wrong_url = with_option(
        &with_login("fencing:not-the-password"),
        &format!("sslrootcert={}", tls_file("other-ca.pem").display()),
    );
    let issuer = RedisConfig::from_url(&wrong_url)
        .unwrap()
        .with_tls(TlsOptions::new().with_ca_file(tls_file("ca.pem")))
        .with_credentials(Credentials::new("fencing", TLS_PASSWORD))
        .connect_issuer()
        .await
        .unwrap_or_else(|e| panic!("{}", e.chain()));
    grant_once(&issuer, "setters", TTL).await;
}

#[tokio::test]
async fn sslmode_require_skips_the_certificate_check_and_verify_warns() {
    // No CA: the test CA is in no system store, so only `require` connects.
    let Some(issuer) = tls_issuer(&with_option(&REDIS_TLS.endpoint(), "sslmode=require")).await
    else {
        return;
    };
    grant_once(&issuer, "require", TTL).await;
    let checks = issuer.verify().await.unwrap();
    let check = transport(&checks);
    assert_eq!(check.verdict, Verdict::Warn, "{check:?}");
    assert!(check.detail.contains("sslmode=require"), "{check:?}");
}

#[tokio::test]
async fn the_system_roots_do_not_trust_the_test_ca() {
    // rediss:// alone: verify-full against the system roots.
    let Some(e) = failure(&REDIS_TLS.endpoint()).await else {
        return;
    };
    assert!(
        matches!(
            e,
            Error::Tls {
                backend: "redis",
                ..
            }
        ),
        "{}",
        e.chain()
    );
    assert!(!e.is_retryable());
}

#[tokio::test]
async fn a_wrong_ca_is_a_tls_error() {
    let url = with_option(
        &REDIS_TLS.endpoint(),
        &format!("sslrootcert={}", tls_file("other-ca.pem").display()),
    );
    let Some(e) = failure(&url).await else {
        return;
    };
    assert!(
        matches!(
            e,
            Error::Tls {
                backend: "redis",
                ..
            }
        ),
        "{}",
        e.chain()
    );
    assert!(!e.is_retryable());
    assert!(e.chain().contains("certificate"), "{}", e.chain());
}

#[tokio::test]
async fn a_wrong_or_missing_login_is_unauthenticated() {
    for (login, what) in [
        ("fencing:wrong-password", "a wrong password"),
        ("nobody:fencing-tls-secret", "an unknown user"),
        (
            ":fencing-tls-secret",
            "a password for the default user, which is off",
        ),
        ("", "no login where one is required"),
    ] {
        let Some(e) = failure(&with_ca(&with_login(login))).await else {
            return;
        };
        assert!(
            matches!(
                e,
                Error::Unauthenticated {
                    backend: "redis",
                    ..
                }
            ),
            "{what}: {}",
            e.chain()
        );
        assert!(!e.is_retryable(), "{what}");
        assert_no_secret(what, &e, "wrong-password");
    }
}

#[tokio::test]
async fn plaintext_to_the_tls_port_says_so() {
    let url = format!("redis://fencing:{TLS_PASSWORD}@{}", address());
    let Some(e) = failure(&url).await else {
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
        "{}",
        e.chain()
    );
    assert!(e.chain().contains("TLS port"), "{}", e.chain());
}

#[tokio::test]
async fn tls_to_a_plaintext_port_says_so() {
    if REDIS_AOF.skipped() {
        return;
    }
    let plain = REDIS_AOF.endpoint();
    let url = with_ca(&plain.replacen("redis://", &format!("rediss://:{TLS_PASSWORD}@"), 1));
    // Redis reads the ClientHello as the start of an inline command and
    // waits for its end: the handshake times out, and the error says why.
    match connect(&url).await {
        Err(e @ Error::Backend { .. }) if e.chain().contains("plaintext port") => {
            assert_no_secret("TLS to plaintext", &e, TLS_PASSWORD);
        }
        Err(e @ Error::Tls { .. }) => assert_no_secret("TLS to plaintext", &e, TLS_PASSWORD),
        Err(
            e @ Error::Backend {
                retryable: true, ..
            },
        ) if e.chain().contains("refused") => REDIS_AOF.unavailable(&e),
        other => panic!("expected an error naming a plaintext port, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_urls_and_refused_connections_show_no_password() {
    let secret = TLS_PASSWORD;
    for url in [
        format!("rediss://default:{secret}@127.0.0.1:6390/notadb"),
        format!("redis://:{secret}@127.0.0.1/notadb"),
        format!("rediss:/fencing:{secret}@127.0.0.1:6390"),
        format!("rediss://fencing:{secret}@127.0.0.1:6390?sslmode=verify-ca"),
        format!("rediss://fencing:{secret}@127.0.0.1:6390?sslrootcert=/nonexistent/ca.pem"),
    ] {
        match RedisConfig::new(&url).connect_issuer().await {
            Err(e @ Error::InvalidInput { .. }) => assert_no_secret(&url, &e, secret),
            other => panic!("{url}: expected InvalidInput, got {other:?}"),
        }
    }
    // A closed port: retryable, and no password either.
    let url = with_ca(&format!("rediss://fencing:{secret}@127.0.0.1:1"));
    match RedisConfig::new(&url).connect_issuer().await {
        Err(
            e @ Error::Backend {
                retryable: true, ..
            },
        ) => assert_no_secret(&url, &e, secret),
        other => panic!("expected a retryable backend error, got {other:?}"),
    }
}

#[tokio::test]
async fn verify_reads_the_transport_of_a_callers_connection_manager() {
    if REDIS_TLS.skipped() || REDIS_AOF.skipped() {
        return;
    }
    let manager = |url: String| async move {
        let client = redis::Client::build_with_tls(
            url.as_str(),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(std::fs::read(tls_file("ca.pem")).unwrap()),
            },
        )
        .or_else(|_| redis::Client::open(url.as_str()))
        .unwrap();
        redis::aio::ConnectionManager::new(client).await.unwrap()
    };
    let tls = RedisIssuer::new(manager(REDIS_TLS.endpoint()).await, Durability::Required)
        .await
        .unwrap();
    let check = tls.verify().await.unwrap();
    let check = transport(&check);
    assert_eq!(check.verdict, Verdict::Pass, "{check:?}");
    assert!(check.detail.starts_with("TLS"), "{check:?}");
    let plain = RedisIssuer::new(manager(REDIS_AOF.endpoint()).await, Durability::Required)
        .await
        .unwrap();
    let check = plain.verify().await.unwrap();
    let check = transport(&check);
    assert!(check.detail.starts_with("plaintext"), "{check:?}");
}

// ---------------------------------------------------------------------------
// A private server that requires client certificates.

/// A `redis-server` of this test's own: redis-tls's spec (the TLS port
/// only, the checkout's test PKI, user `fencing`, append-only) plus
/// `--tls-auth-clients yes`, so a client certificate of the test CA is
/// required; stopped when dropped. Started on a blocking thread: starting
/// one probes it with `redis-cli` (which presents the client certificate).
async fn mutual_tls_redis() -> Private {
    tokio::task::spawn_blocking(|| {
        let tls = fencing_servers::service("redis-tls").expect("redis-tls's spec");
        Private::start(tls, &["--tls-auth-clients", "yes"])
    })
    .await
    .expect("the thread starting a private redis-server")
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_missing_client_certificate_is_a_tls_error_where_one_is_required() {
    if REDIS_TLS.skipped() {
        return;
    }
    let server = mutual_tls_redis().await;
    let url = server.endpoint(&REDIS_TLS);
    let issuer = connect(&with_test_tls(&url)).await.unwrap();
    grant_once(&issuer, "mtls", TTL).await;
    let url = with_ca(&url);
    let e = connect(&url)
        .await
        .expect_err("connected without a client certificate");
    assert_no_secret(&url, &e, TLS_PASSWORD);
    assert!(
        matches!(
            e,
            Error::Tls {
                backend: "redis",
                ..
            }
        ),
        "{}",
        e.chain()
    );
    assert!(!e.is_retryable());
}
