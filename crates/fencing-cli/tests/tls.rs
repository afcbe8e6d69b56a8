//! The real `fence` binary on the TLS-only, password-required servers
//! (`integration/services.sh up tls`): `fence doctor` passes a checked
//! connection and warns of an unchecked one, and no password shows in
//! anything it prints (text or `--json`), whatever fails: a bad URL, a
//! refused connection, a wrong password, a wrong CA. (An Azure SAS in a
//! refused request's URL: `fencing-azure`'s tests.)

mod common;

use common::{assert_exit, fence, text};
use fencing_harness::env::{
    MYSQL_TLS, POSTGRES_TLS, REDIS_TLS, TLS_PASSWORD, tls_file, with_option, with_test_tls,
};

fn lines_of(out: &std::process::Output, name: &str) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(name))
        .map(str::to_owned)
        .collect()
}

#[test]
fn doctor_passes_a_checked_connection_and_warns_of_an_unchecked_one() {
    if POSTGRES_TLS.skipped() {
        return;
    }
    let checked = with_option(
        &with_test_tls(&POSTGRES_TLS.endpoint()),
        "sslmode=verify-full",
    );
    let out = fence(&["doctor", &checked]);
    if out.status.code() == Some(1) {
        POSTGRES_TLS.unavailable(&text(&out));
    }
    assert_exit(&out, 0);
    let transport = lines_of(&out, "transport");
    assert!(
        !transport.is_empty() && transport.iter().all(|l| l.trim_start().starts_with("pass")),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains(TLS_PASSWORD), "{}", text(&out));

    let unchecked = with_option(&POSTGRES_TLS.endpoint(), "sslmode=require");
    let out = fence(&["doctor", &unchecked]);
    assert_exit(&out, 0); // a warning, not unsafe
    let transport = lines_of(&out, "transport");
    assert!(
        !transport.is_empty()
            && transport
                .iter()
                .all(|l| l.trim_start().starts_with("warn") && l.contains("sslmode=require")),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains(TLS_PASSWORD), "{}", text(&out));
}

#[test]
fn no_password_shows_whatever_fails() {
    const PW: &str = "pw-that-must-not-show";
    let wrong_ca = tls_file("other-ca.pem").display().to_string();
    let redis_port = REDIS_TLS
        .endpoint()
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    let cases = [
        // Bad URLs: a scheme typo, a database that is not a number, a host list with a password.
        format!("redis:/u:{PW}@127.0.0.1"),
        format!("redis://:{PW}@127.0.0.1:{redis_port}/notadb"),
        format!("etcd://user:{PW}@127.0.0.1:1"),
        format!("postgres://fencing:{PW}@[::1:5432/fencing"),
        // A refused connection, a wrong CA, a wrong password.
        format!("rediss://default:{PW}@127.0.0.1:1"),
        format!("rediss://fencing:{PW}@127.0.0.1:{redis_port}?sslrootcert={wrong_ca}"),
        format!(
            "rediss://fencing:{PW}@127.0.0.1:{redis_port}?sslrootcert={}",
            tls_file("ca.pem").display()
        ),
        with_option(
            &POSTGRES_TLS.endpoint().replace(TLS_PASSWORD, PW),
            &format!("sslmode=verify-full&sslrootcert={wrong_ca}"),
        ),
        with_option(
            &MYSQL_TLS.endpoint().replace(TLS_PASSWORD, PW),
            &format!(
                "sslmode=verify-full&sslrootcert={}",
                tls_file("ca.pem").display()
            ),
        ),
    ];
    for url in &cases {
        for args in [
            vec!["holder", "--issuer", url, "--resource", "r"],
            vec!["get", "--store", url, "k"],
            vec!["doctor", url],
            vec!["doctor", "--json", url],
        ] {
            let out = fence(&args);
            assert!(!out.status.success(), "{args:?} succeeded: {}", text(&out));
            let all = text(&out);
            assert!(!all.contains(PW), "{args:?} shows the password: {all}");
        }
    }
}

/// The endpoint `fence doctor` judges is the one the SDK resolved
/// (`AWS_ENDPOINT_URL` here), not "AWS itself" for a URL without one.
#[tokio::test]
async fn doctor_judges_the_endpoint_the_sdk_resolved() {
    use fencing_harness::env::S3;
    let Some(bucket) = common::emulator_bucket(&S3).await else {
        return;
    };
    let out = std::process::Command::new(common::FENCE)
        .args([
            "doctor",
            &format!("s3://{}?path_style=true&region=us-east-1", bucket.name),
        ])
        .env("AWS_ENDPOINT_URL", S3.endpoint())
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .output()
        .expect("run fence doctor");
    let transport = lines_of(&out, "transport");
    assert!(
        !transport.is_empty() && transport.iter().all(|l| l.contains("plaintext")),
        "{}",
        text(&out)
    );
}
