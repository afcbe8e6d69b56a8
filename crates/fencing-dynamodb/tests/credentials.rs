//! Credentials, as far as moto can tell them apart (it takes any keys and
//! checks no signature, so a wrong key cannot be refused here; the
//! mapping of AWS's refusals to `Error::Unauthenticated` is unit-tested in
//! `src/error.rs`):
//!
//! - no credentials anywhere and no `emulator=true` is `InvalidInput`
//!   naming `emulator=true`, never a fallback to the emulator's keys;
//! - the secret access key, from the environment or from the shared
//!   credentials file, shows in no error (`Display`, `Debug`, every
//!   `source()`, `Error::chain()`) and in no `Debug` of the config, the
//!   store or the issuer.
//!
//! AWS's chain reads the process environment, which a test may not change
//! (no `unsafe` here): each case runs this test binary again, one `child_`
//! test in a clean environment, and checks that it ran and passed.

use std::process::Command;

use aws_sdk_dynamodb::config::ProvideCredentials;
use aws_sdk_dynamodb::types::{AttributeValue, Put};
use fencing_core::{Error, FencedStore, FencingToken, LeaseRequest, TokenIssuer};
use fencing_dynamodb::{DynamoConfig, DynamoStore, FencedTransaction};
use fencing_harness::env::{DYNAMODB, assert_no_secret};
use fencing_testkit::unique_name;

/// Set in the children's environment only.
const CHILD: &str = "FENCING_DYNAMODB_CREDENTIALS_CHILD";
const ACCESS_KEY: &str = "AKIDFENCINGCHILD";
const SECRET: &str = "dynamodb-secret-that-must-never-show";

/// Runs the test `name` of this binary alone in an environment holding
/// only `vars` (and AWS's files pointed at nothing), and asserts it passed.
fn run_child(name: &str, vars: &[(&str, &str)]) {
    let nowhere = std::env::temp_dir().join("fencing-dynamodb-no-aws");
    let mut child = Command::new(std::env::current_exe().expect("this test binary"));
    child
        .args([
            name,
            "--exact",
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env_clear()
        .env(CHILD, "1")
        .env("HOME", &nowhere)
        .env("AWS_CONFIG_FILE", nowhere.join("config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", nowhere.join("credentials"))
        // No instance role: the chain would wait on 169.254.169.254.
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env(DYNAMODB.var, DYNAMODB.endpoint());
    for (k, v) in vars {
        child.env(k, v);
    }
    let out = child.output().expect("run the child test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name} in a clean environment:\n{stdout}\n{stderr}"
    );
}

/// Whether this process is a child of [`run_child`]; else the child test
/// was run by hand, and says so.
fn in_child() -> bool {
    let child = std::env::var_os(CHILD).is_some();
    if !child {
        eprintln!("not a child of run_child: run its parent test instead");
    }
    child
}

#[test]
fn no_credentials_is_invalid_input_naming_emulator_true() {
    run_child("child_no_credentials", &[]);
}

#[tokio::test]
#[ignore = "run by no_credentials_is_invalid_input_naming_emulator_true"]
async fn child_no_credentials() {
    if !in_child() {
        return;
    }
    let endpoint = DYNAMODB.endpoint();
    let url = format!("dynamodb://tab?endpoint={endpoint}");
    let config = DynamoConfig::from_url(&url).unwrap();
    let store = config.connect_store().await.map(drop);
    let issuer = config.connect_issuer().await.map(drop);
    for result in [store, issuer] {
        match result {
            Err(Error::InvalidInput { message }) => assert!(
                message.contains("no AWS credentials for dynamodb://tab")
                    && message.contains("emulator=true")
                    && message.contains("AWS_ACCESS_KEY_ID"),
                "{message}"
            ),
            other => panic!("expected InvalidInput naming emulator=true, got {other:?}"),
        }
    }
    // The same URL with emulator=true is the emulator's keys: it connects.
    let emulated = DynamoConfig::from_url(&format!("{url}&emulator=true"))
        .unwrap()
        .connect_store()
        .await;
    assert!(emulated.is_ok(), "{emulated:?}");
}

#[test]
fn the_secret_from_the_environment_never_shows() {
    if DYNAMODB.skipped() {
        return;
    }
    run_child(
        "child_the_secret_never_shows",
        &[
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", SECRET),
            ("AWS_REGION", "us-east-1"),
        ],
    );
}

#[test]
fn the_secret_from_the_credentials_file_never_shows() {
    if DYNAMODB.skipped() {
        return;
    }
    let dir = std::env::temp_dir().join(unique_name("fencing-dynamodb-creds").replace('/', "-"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("credentials");
    std::fs::write(
        &file,
        format!("[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET}\n"),
    )
    .unwrap();
    let file = file.display().to_string();
    run_child(
        "child_the_secret_never_shows",
        &[
            ("AWS_SHARED_CREDENTIALS_FILE", &file),
            ("AWS_REGION", "us-east-1"),
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Connects through AWS's chain (no `emulator=true`: moto takes the keys),
/// then makes every kind of error it can and looks for the secret.
#[tokio::test]
#[ignore = "run by the_secret_from_*_never_shows"]
async fn child_the_secret_never_shows() {
    if !in_child() {
        return;
    }
    let endpoint = DYNAMODB.endpoint();
    let table = format!("{}-creds", fencing_testkit::unique_prefix()).replace('/', "-");
    let url = format!("dynamodb://{table}?endpoint={endpoint}&create_table=true");
    let config = DynamoConfig::from_url(&url).unwrap();
    let store = config.connect_store().await.expect("the chain's keys");
    let issuer = config.connect_issuer().await.expect("the chain's keys");
    // AWS's chain finds this test's keys: the secret is in the process.
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let provider = sdk.credentials_provider().expect("a provider");
    let found = provider.provide_credentials().await.expect("credentials");
    assert_eq!(
        (found.access_key_id(), found.secret_access_key()),
        (ACCESS_KEY, SECRET)
    );
    let key = unique_name("creds");
    store
        .put(&key, "v".into(), FencingToken::new(5))
        .await
        .unwrap();
    let lease = issuer
        .try_acquire(&LeaseRequest::new(&key, std::time::Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("free");

    let missing =
        DynamoConfig::from_url(&format!("dynamodb://{table}-missing?endpoint={endpoint}"))
            .unwrap()
            .connect_store()
            .await
            .unwrap();
    let nowhere =
        DynamoConfig::from_url(&format!("dynamodb://{table}?endpoint=http://127.0.0.1:1"))
            .unwrap()
            .connect_store()
            .await
            .unwrap();
    let taken = Put::builder()
        .table_name(&table)
        .item("pk", AttributeValue::S(key.clone()))
        .condition_expression("attribute_not_exists(pk)");
    let errors: Vec<(&str, Error)> = vec![
        (
            "stale",
            store
                .put(&key, "x".into(), FencingToken::new(4))
                .await
                .unwrap_err(),
        ),
        (
            "missing table",
            missing
                .put(&key, "x".into(), FencingToken::new(9))
                .await
                .unwrap_err(),
        ),
        (
            "nothing listening",
            nowhere
                .put(&key, "x".into(), FencingToken::new(9))
                .await
                .unwrap_err(),
        ),
        (
            "stale transaction",
            FencedTransaction::new(&store, &key, FencingToken::new(4))
                .put(
                    Put::builder()
                        .table_name(&table)
                        .item("pk", AttributeValue::S(format!("{key}-other"))),
                )
                .send()
                .await
                .unwrap_err(),
        ),
        (
            "refused item",
            FencedTransaction::new(&store, unique_name("creds-fence"), FencingToken::new(4))
                .put(taken)
                .send()
                .await
                .unwrap_err(),
        ),
        ("lease lost", {
            issuer.release(&lease).await.unwrap();
            issuer.renew(&lease).await.unwrap_err()
        }),
        (
            "invalid input",
            store
                .put("", "x".into(), FencingToken::new(9))
                .await
                .unwrap_err(),
        ),
    ];
    for (what, error) in &errors {
        assert_no_secret(what, error, SECRET);
    }
    let kinds: Vec<String> = errors.iter().map(|(w, e)| format!("{w}: {e}")).collect();
    assert!(
        matches!(errors[0].1, Error::StaleToken { .. })
            && matches!(
                errors[1].1,
                Error::Backend {
                    retryable: false,
                    ..
                }
            )
            && matches!(
                errors[2].1,
                Error::Backend {
                    retryable: true,
                    ..
                }
            )
            && matches!(errors[3].1, Error::StaleToken { .. })
            && matches!(
                errors[4].1,
                Error::Backend {
                    retryable: false,
                    ..
                }
            )
            && matches!(errors[5].1, Error::LeaseLost { .. }),
        "{kinds:#?}"
    );
    let store_debug: &DynamoStore = &store;
    for shown in [
        format!("{config:?}"),
        format!("{store_debug:?}"),
        format!("{issuer:?}"),
        format!("{:?}", store.client().config()),
    ] {
        assert!(!shown.contains(SECRET), "the secret shows in {shown}");
    }
}
