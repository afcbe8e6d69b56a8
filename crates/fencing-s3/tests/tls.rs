//! S3 over HTTPS with a private CA (`sslrootcert=`): the object-store
//! conformance suite against moto behind TLS (`integration/services.sh up
//! s3-tls`, `FENCING_S3_TLS_ENDPOINT`), and the failures a wrong or missing
//! CA gives: typed, and without the secret key in any message.

use aws_sdk_s3::config::Credentials;
use fencing_core::safety::Verdict;
use fencing_core::{Error, FencedStore};
use fencing_harness::env::{S3_TLS, assert_no_secret, tls_file};
use fencing_s3::{S3Backend, S3Config, S3Store, emulator};

mod suite {
    fencing_testkit::blob_store_conformance!(super::backend);
}

/// The URL of `bucket` on the TLS endpoint, trusting `ca`.
fn url(bucket: &str, ca: &str) -> String {
    format!(
        "s3://{bucket}?endpoint={}&emulator=true&sslrootcert={}",
        S3_TLS.endpoint(),
        tls_file(ca).display()
    )
}

async fn backend() -> Option<S3Backend> {
    if S3_TLS.skipped() {
        return None;
    }
    let bucket = fencing_harness::object_store::run_bucket("s3-tls");
    let client = S3Config::from_url(&url(&bucket, "ca.pem"))
        .expect("URL")
        .client()
        .await
        .expect("client");
    if let Err(e) = emulator::create_bucket(&client, &bucket).await {
        if e.is_retryable() {
            S3_TLS.unavailable(&e.chain());
        }
        panic!("cannot create {bucket}: {}", e.chain());
    }
    Some(S3Backend::new(client, bucket))
}

const SECRET_KEY: &str = "secret-key-that-must-not-show";

/// A store on the TLS endpoint trusting `ca` (or the system roots only),
/// with static credentials whose secret the errors must not show.
async fn store_trusting(ca: Option<&str>) -> S3Store {
    let endpoint = S3_TLS.endpoint();
    let mut config = S3Config::from_url(&format!(
        "s3://{}?endpoint={endpoint}",
        fencing_harness::object_store::run_bucket("s3-tls")
    ))
    .expect("URL")
    .with_region("us-east-1")
    .with_credentials(Credentials::new("AKIDTEST", SECRET_KEY, None, None, "test"));
    if let Some(ca) = ca {
        config = config.with_ca_file(tls_file(ca));
    }
    config.connect_store().await.expect("store")
}

#[tokio::test]
async fn a_wrong_or_missing_ca_is_a_tls_error_without_the_secret() {
    if backend().await.is_none() {
        return;
    }
    for ca in [Some("other-ca.pem"), None] {
        let store = store_trusting(ca).await;
        let err = store
            .put("k", "v".into(), fencing_core::FencingToken::new(1))
            .await
            .expect_err("the server's certificate must not be trusted");
        assert!(
            matches!(err, Error::Tls { backend: "s3", .. }),
            "{ca:?}: {err:?}"
        );
        assert!(!err.is_retryable(), "{ca:?}");
        assert_no_secret("s3 tls", &err, SECRET_KEY);
    }
}

#[tokio::test]
async fn the_right_ca_writes_and_a_bad_ca_file_is_invalid_input() {
    if backend().await.is_none() {
        return;
    }
    let store = store_trusting(Some("ca.pem")).await;
    let key = fencing_testkit::unique_name("tls");
    store
        .put(&key, "over TLS".into(), fencing_core::FencingToken::new(3))
        .await
        .expect("a fenced write over TLS with the private CA");
    let missing = S3Config::from_url(
        "s3://b?endpoint=https://127.0.0.1:1&emulator=true&sslrootcert=/nonexistent/ca.pem",
    )
    .expect("URL")
    .connect_store()
    .await
    .expect_err("a CA file that cannot be read");
    assert!(
        matches!(&missing, Error::InvalidInput { message } if message.contains("/nonexistent/ca.pem")),
        "{missing:?}"
    );
}

/// `verify` (what `fence doctor` prints) says how the endpoint is reached:
/// HTTPS passes, plaintext past the loopback is a warning naming it.
#[tokio::test]
async fn verify_reports_the_endpoints_transport() {
    let Some(backend) = backend().await else {
        return;
    };
    let checked = S3Store::new(backend.clone().with_endpoint(Some(&S3_TLS.endpoint())));
    let checks = checked.verify().await.expect("verify");
    let transport = fencing_testkit::safety::check(&checks, "transport");
    assert_eq!(transport.verdict, Verdict::Pass, "{transport:?}");
    // The same client, named as a plaintext endpoint on another host.
    let plaintext = S3Store::new(backend.with_endpoint(Some("http://s3.internal:9000")));
    let checks = plaintext.verify().await.expect("verify");
    let transport = fencing_testkit::safety::check(&checks, "transport");
    assert_eq!(transport.verdict, Verdict::Warn, "{transport:?}");
    assert!(transport.detail.contains("s3.internal"), "{transport:?}");
}
