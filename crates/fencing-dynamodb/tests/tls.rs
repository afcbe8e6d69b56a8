//! DynamoDB over HTTPS with a private CA (`sslrootcert=`), against moto
//! behind TLS with the throwaway CA of `integration/.state/tls`: the
//! `s3-tls` instance of `integration/services.sh` (`FENCING_S3_TLS_ENDPOINT`,
//! default `https://127.0.0.1:9443`), whose moto serves DynamoDB's API on
//! the same port. The right CA writes; another CA, or the system roots, is
//! `Error::Tls` without the secret key in any message.

use aws_sdk_dynamodb::config::Credentials;
use aws_sdk_dynamodb::types::{AttributeValue, Put};
use fencing_core::safety::Verdict;
use fencing_core::{Error, FencedStore, FencingToken};
use fencing_dynamodb::{DynamoConfig, DynamoStore, FencedTransaction};
use fencing_harness::env::{S3_TLS, Server, assert_no_secret, tls_file};
use fencing_testkit::unique_name;

/// moto's `s3-tls` instance, as its DynamoDB API is reached.
const DYNAMODB_TLS: Server = Server {
    name: "DynamoDB (moto's s3-tls instance, HTTPS)",
    ..S3_TLS
};

const SECRET_KEY: &str = "dynamodb-tls-secret-that-must-not-show";

/// This run's table on the TLS endpoint, trusting `ca` (a file of the
/// throwaway PKI) with the emulator's keys.
fn url(ca: &str) -> String {
    format!(
        "dynamodb://{}-tls?endpoint={}&emulator=true&sslrootcert={}",
        fencing_testkit::unique_prefix(),
        DYNAMODB_TLS.endpoint(),
        tls_file(ca).display()
    )
}

/// The store over TLS with the right CA, its table created; `None` when
/// the run skips the server.
async fn store() -> Option<DynamoStore> {
    if DYNAMODB_TLS.skipped() {
        return None;
    }
    let config = DynamoConfig::from_url(&format!("{}&create_table=true", url("ca.pem")));
    match config.expect("URL").connect_store().await {
        Ok(store) => Some(store),
        Err(e) if e.is_retryable() => DYNAMODB_TLS.unavailable(&e.chain()),
        Err(e) => panic!("cannot set up the table over TLS: {}", e.chain()),
    }
}

#[tokio::test]
async fn the_right_ca_writes_and_a_guarded_transaction_goes_through() {
    let Some(store) = store().await else { return };
    let key = unique_name("tls");
    store
        .put(&key, "over TLS".into(), FencingToken::new(3))
        .await
        .unwrap();
    let e = store
        .put(&key, "x".into(), FencingToken::new(2))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::StaleToken { .. }), "{e:?}");
    let item = unique_name("tls-item");
    FencedTransaction::new(&store, &key, FencingToken::new(4))
        .put(
            Put::builder()
                .table_name(store.table())
                .item("pk", AttributeValue::S(item)),
        )
        .send()
        .await
        .expect("a guarded transaction over TLS");
    let got = store.get(&key).await.unwrap().expect("a value");
    assert_eq!(
        (got.token, &got.value[..]),
        (FencingToken::new(4), &b"over TLS"[..])
    );
    // verify (what `fence doctor` prints): the transport is HTTPS.
    let checks = store.verify().await.expect("verify");
    let transport = fencing_testkit::safety::check(&checks, "transport");
    assert_eq!(transport.verdict, Verdict::Pass, "{transport:?}");
}

/// Another CA, or the system roots (no `sslrootcert=`): the handshake
/// fails, a non-retryable `Error::Tls` for a write and a read alike, and
/// the secret key of the static credentials shows nowhere.
#[tokio::test]
async fn a_wrong_or_missing_ca_is_a_tls_error_without_the_secret() {
    if store().await.is_none() {
        return;
    }
    let table = format!("{}-tls", fencing_testkit::unique_prefix());
    for ca in [Some("other-ca.pem"), None] {
        let mut config = DynamoConfig::from_url(&format!(
            "dynamodb://{table}?endpoint={}",
            DYNAMODB_TLS.endpoint()
        ))
        .expect("URL")
        .with_region("us-east-1")
        .with_credentials(Credentials::new("AKIDTEST", SECRET_KEY, None, None, "test"));
        if let Some(ca) = ca {
            config = config.with_ca_file(tls_file(ca));
        }
        let store = config.connect_store().await.expect("nothing is sent yet");
        let write = store.put("k", "v".into(), FencingToken::new(1)).await;
        let read = store.mark("k").await.map(drop);
        for (what, result) in [("put", write), ("mark", read)] {
            let err = result.expect_err("the server's certificate must not be trusted");
            assert!(
                matches!(
                    err,
                    Error::Tls {
                        backend: "dynamodb",
                        ..
                    }
                ),
                "{ca:?} {what}: {err:?}"
            );
            assert!(!err.is_retryable(), "{ca:?} {what}");
            assert_no_secret("dynamodb tls", &err, SECRET_KEY);
        }
    }
}

#[tokio::test]
async fn a_ca_file_that_cannot_be_read_is_invalid_input() {
    let e = DynamoConfig::from_url(
        "dynamodb://tab?endpoint=https://127.0.0.1:1&emulator=true&sslrootcert=/nonexistent/ca.pem",
    )
    .expect("URL")
    .connect_store()
    .await
    .expect_err("a CA file that cannot be read");
    assert!(
        matches!(&e, Error::InvalidInput { message } if message.contains("/nonexistent/ca.pem")),
        "{e:?}"
    );
}
