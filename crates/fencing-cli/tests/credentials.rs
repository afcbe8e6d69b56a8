//! The shipped `fence` never falls back to an emulator's credentials: an
//! object-store endpoint without credentials is refused (exit 2) with a
//! message naming `emulator=true`, and works with it. The real binary, with
//! every cloud credential variable removed from its environment.

mod common;

use std::process::{Command, Output};

use common::{FENCE, emulator_bucket, text};
use fencing_harness::env::{AZURE, REDIS, S3, Server};

/// Variables through which a credential could reach the binary.
const CREDENTIAL_VARS: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_ACCOUNT",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

/// `fence put` on `url` with no credentials anywhere: no variables, no
/// AWS files, no instance metadata.
fn put(url: &str, token: &str) -> Output {
    let empty = std::env::temp_dir().join("fencing-no-credentials");
    let mut command = Command::new(FENCE);
    for var in CREDENTIAL_VARS {
        command.env_remove(var);
    }
    command
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", empty.join("config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", empty.join("credentials"))
        .env("HOME", &empty)
        .args(["put", "--store", url, "report", "--token", token, "value"])
        .output()
        .expect("run fence")
}

fn refused_then_works(server: &Server, url: &str) {
    let refused = put(url, "1");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{}: {stderr}", server.name);
    assert!(
        stderr.contains("emulator=true"),
        "{}: {stderr}",
        server.name
    );
    let ok = put(&format!("{url}&emulator=true"), "1");
    assert!(ok.status.success(), "{}: {}", server.name, text(&ok));
}

#[tokio::test]
async fn s3_endpoint_without_credentials_is_refused_and_emulator_true_works() {
    if let Some(bucket) = emulator_bucket(&S3).await {
        refused_then_works(&S3, &bucket.url);
    }
}

#[tokio::test]
async fn az_endpoint_without_credentials_is_refused_and_emulator_true_works() {
    if let Some(container) = emulator_bucket(&AZURE).await {
        refused_then_works(&AZURE, &container.url);
    }
}

#[test]
fn gs_endpoint_without_credentials_is_refused_naming_emulator_true() {
    let refused = put("gs://b?endpoint=http://127.0.0.1:1", "1");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("emulator=true"), "{stderr}");
}

#[test]
fn help_prints_the_registry_grammar() {
    let help = Command::new(FENCE)
        .arg("--help")
        .output()
        .expect("run fence");
    let help = String::from_utf8_lossy(&help.stdout);
    use fencing_tokens::registry::{BACKENDS, Role, grammar};
    for line in grammar(Role::Store)
        .lines()
        .chain(grammar(Role::Issuer).lines().collect::<Vec<_>>())
    {
        assert!(help.contains(line.trim()), "missing from --help: {line}");
    }
    for backend in BACKENDS {
        assert!(help.contains(backend.shape), "{} missing", backend.name);
        for option in backend.options() {
            let word = format!("{}={}", option.name, option.kind.placeholder());
            assert!(help.contains(&word), "{}'s {word} missing", backend.name);
        }
    }
}

/// A password that must never be printed.
const PASSWORD: &str = "s3cretPW";

/// `fence ARGS` with FENCE_ISSUER and FENCE_STORE holding URLs with
/// [`PASSWORD`]; asserts it is in neither stdout nor stderr.
fn prints_no_password(args: &[&str]) -> Output {
    let out = Command::new(FENCE)
        .args(args)
        .env(
            "FENCE_ISSUER",
            format!(
                "{}/",
                REDIS
                    .endpoint()
                    .replace("redis://", &format!("redis://:{PASSWORD}@"))
            ),
        )
        .env(
            "FENCE_STORE",
            format!("postgres://app:{PASSWORD}@127.0.0.1:1/db"),
        )
        .output()
        .expect("run fence");
    assert!(
        !text(&out).contains(PASSWORD),
        "`fence {}` printed the password: {}",
        args.join(" "),
        text(&out)
    );
    out
}

/// clap shows an `env =` argument's value in --help unless told not to.
#[test]
fn help_does_not_print_the_urls_in_fence_issuer_and_fence_store() {
    for command in ["run", "lead", "acquire", "holder", "token", "put", "get"] {
        let out = prints_no_password(&[command, "--help"]);
        assert!(out.status.success(), "{}", text(&out));
    }
}

/// clap echoes the value a parser refused, and so did the message.
#[test]
fn a_bad_store_url_key_does_not_print_its_password() {
    let s = common::Scratch::new("bad-fence-url");
    let bad = format!("postgres://app:{PASSWORD}@127.0.0.1:1/db");
    let out = prints_no_password(&[
        "lead",
        "--issuer",
        &s.url(),
        "--resource",
        "r",
        "--fence",
        &bad,
        "--",
        "true",
    ]);
    assert_eq!(
        out.status.code(),
        Some(common::RUN_FAILED),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("STORE_URL#KEY"), "{}", text(&out));
    let out = prints_no_password(&[
        "migrate",
        "issuer",
        "--from",
        &s.sqlite("a.sqlite"),
        "--to",
        &s.sqlite("b.sqlite"),
        "--resource",
        "r",
        "--store",
        &bad,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}
