//! TLS and passwords on the TLS-only servers (`integration/services.sh up
//! tls`: PostgreSQL with `hostssl` only and scram, MariaDB with
//! `require_secure_transport`): each failure is typed, not retryable, and
//! shows the password nowhere (message, `source()` chain, `Debug`); `verify`
//! says what the session's transport really is. The conformance suites run
//! on the same servers in `databases.rs`.

use fencing_core::safety::Verdict;
use fencing_core::{Error, FencedStore};
use fencing_harness::env::{
    MYSQL_TLS, POSTGRES_TLS, Server, TLS_PASSWORD, assert_no_secret, tls_file, with_option,
    with_test_tls,
};
use fencing_sql::{Db, SqlConfig, SqlStore};
use fencing_testkit::safety::check;

const SERVERS: [Server; 2] = [POSTGRES_TLS, MYSQL_TLS];

/// A pool on `url`, as a caller opens one.
async fn open(url: &str) -> Result<Db, Error> {
    SqlConfig::from_url(url)?.connect_db().await
}

/// The server's URL with `option`s, or `None` when skipped; a server that
/// does not answer with the right options fails the test naming it.
async fn url(server: &Server, options: &str) -> Option<String> {
    if server.skipped() {
        return None;
    }
    let good = with_option(&with_test_tls(&server.endpoint()), "sslmode=verify-full");
    if let Err(e) = open(&good).await {
        server.unavailable(&e.chain());
    }
    Some(with_option(&server.endpoint(), options))
}

async fn refused(server: &Server, options: &str) -> Option<Error> {
    let url = url(server, options).await?;
    let err = open(&url)
        .await
        .expect_err(&format!("{}: {options} must be refused", server.name));
    assert!(!err.is_retryable(), "{}: {options}: {err:?}", server.name);
    assert_no_secret(&format!("{} {options}", server.name), &err, TLS_PASSWORD);
    Some(err)
}

#[tokio::test]
async fn a_wrong_ca_is_a_tls_error() {
    let ca = tls_file("other-ca.pem").display().to_string();
    for server in &SERVERS {
        let Some(err) = refused(server, &format!("sslmode=verify-full&sslrootcert={ca}")).await
        else {
            continue;
        };
        assert!(matches!(err, Error::Tls { .. }), "{}: {err:?}", server.name);
    }
}

#[tokio::test]
async fn a_wrong_password_is_unauthenticated() {
    let ca = tls_file("ca.pem").display().to_string();
    for server in &SERVERS {
        if server.skipped() {
            continue;
        }
        let wrong = server.endpoint().replace(TLS_PASSWORD, "wrong-password");
        let url = with_option(&wrong, &format!("sslmode=verify-full&sslrootcert={ca}"));
        if url.contains(TLS_PASSWORD) {
            panic!(
                "{}: the endpoint carries no password to replace: {}",
                server.name,
                fencing_core::redact(&url)
            );
        }
        let err = open(&url).await.expect_err("a wrong password");
        assert!(
            matches!(err, Error::Unauthenticated { .. }),
            "{}: {err:?}",
            server.name
        );
        assert_no_secret(server.name, &err, "wrong-password");
    }
}

#[tokio::test]
async fn plaintext_to_a_tls_only_server_is_refused_with_a_typed_error() {
    for server in &SERVERS {
        let Some(err) = refused(server, "sslmode=disable").await else {
            continue;
        };
        assert!(
            matches!(
                err,
                Error::Unauthenticated { .. }
                    | Error::Backend {
                        retryable: false,
                        ..
                    }
            ),
            "{}: {err:?}",
            server.name
        );
    }
}

#[tokio::test]
async fn a_refused_connection_and_a_bad_url_show_no_password() {
    for server in &SERVERS {
        if server.skipped() {
            continue;
        }
        let endpoint = server.endpoint();
        let port = endpoint
            .rsplit_once(':')
            .map(|(_, p)| p.split('/').next().unwrap_or(p))
            .unwrap_or_default();
        let closed = endpoint.replace(&format!(":{port}/"), ":1/");
        let err = open(&closed).await.expect_err("nothing listens on port 1");
        assert_no_secret("refused", &err, TLS_PASSWORD);
        for bad in [
            endpoint.replace("127.0.0.1", "[::1"),
            with_option(&endpoint, "sslmode=verify"),
            with_option(&endpoint, "sslcert=/c.pem"),
            with_option(&endpoint, "sslrootcert=/nonexistent/ca.pem"),
        ] {
            let err = open(&bad).await.expect_err("bad input");
            assert!(
                matches!(err, Error::InvalidInput { .. }),
                "{bad:?}: {err:?}"
            );
            assert_no_secret("bad URL", &err, TLS_PASSWORD);
        }
    }
}

#[tokio::test]
async fn verify_reports_the_sessions_transport() {
    for server in &SERVERS {
        let Some(checked) = url(server, "").await else {
            continue;
        };
        let checked = with_option(&with_test_tls(&checked), "sslmode=verify-full");
        let store = SqlStore::new(open(&checked).await.expect("TLS"))
            .await
            .expect("store");
        let transport = check(&store.verify().await.expect("verify"), "transport").clone();
        assert_eq!(
            transport.verdict,
            Verdict::Pass,
            "{}: {transport:?}",
            server.name
        );
        assert!(
            transport.detail.contains("certificate and host name"),
            "{transport:?}"
        );

        let unchecked = with_option(&server.endpoint(), "sslmode=require");
        let store = SqlStore::new(open(&unchecked).await.expect("TLS, unchecked"))
            .await
            .expect("store");
        let transport = check(&store.verify().await.expect("verify"), "transport").clone();
        assert_eq!(
            transport.verdict,
            Verdict::Warn,
            "{}: {transport:?}",
            server.name
        );
        assert!(
            transport.detail.contains("sslmode=require"),
            "{transport:?}"
        );
    }
}
