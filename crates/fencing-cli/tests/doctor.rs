//! `fence doctor`, run as a user runs it: the real binary against the real
//! servers and emulators. Stores that honour preconditions pass; s3rver
//! (which ignores `If-Match` / `If-None-Match`) and a Redis without an
//! append-only file are flagged unsafe (exit 7); a server that is down is
//! "could not run" (exit 1).

mod common;

use std::process::{Command, Output};

use common::{FENCE, Scratch, assert_exit, assert_prints, emulator_bucket, text};
use fencing_harness::env::{AZURE, GCS, REDIS, REDIS_AOF, S3, S3RVER, Server};

/// `fence doctor` with ARGS; `creds` sets the AWS keys (s3rver checks them),
/// otherwise they are cleared so the emulator defaults apply.
fn doctor(args: &[&str], creds: Option<(&str, &str)>) -> Output {
    let mut cmd = Command::new(FENCE);
    cmd.arg("doctor").args(args);
    for var in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
    ] {
        cmd.env_remove(var);
    }
    cmd.env_remove("FENCE_STORE").env_remove("FENCE_ISSUER");
    if let Some((key, secret)) = creds {
        cmd.env("AWS_ACCESS_KEY_ID", key)
            .env("AWS_SECRET_ACCESS_KEY", secret);
    }
    cmd.output().expect("run fence doctor")
}

/// `fence doctor URL` on `server`, which must be up: "could not check"
/// fails the test naming the server.
fn doctor_on(server: &Server, url: &str) -> Output {
    let out = doctor(&[url], None);
    if String::from_utf8_lossy(&out.stderr).contains("could not check") {
        server.unavailable(&text(&out));
    }
    out
}

/// The `--json` report, which exited with `code`: every check's (role,
/// verdict, name).
fn json_checks(out: &Output, code: i32) -> (serde_json::Value, Vec<(String, String, String)>) {
    assert_exit(out, code);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(out)));
    let mut checks = Vec::new();
    for url in report["urls"].as_array().expect("urls") {
        for section in url["sections"].as_array().expect("sections") {
            for c in section["checks"].as_array().expect("checks") {
                checks.push((
                    section["role"].as_str().unwrap().to_owned(),
                    c["verdict"].as_str().unwrap().to_owned(),
                    c["name"].as_str().unwrap().to_owned(),
                ));
            }
        }
    }
    (report, checks)
}

/// Doctor on a bucket that must pass, as a store and as the bucket issuer
/// (one URL opens both): exit 0, every check `pass` (text and JSON), the
/// precondition checks among them.
fn assert_store_passes(server: &Server, url: &str) {
    let out = doctor(&[url], None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}: {}",
        server.name,
        text(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("  ")).collect();
    assert!(lines.len() >= 5, "{}: {}", server.name, text(&out));
    assert!(
        lines.iter().all(|l| l.trim_start().starts_with("pass ")),
        "{}: {}",
        server.name,
        text(&out)
    );
    assert!(
        stdout.contains("refuses a write under a stale version")
            && stdout.contains("refuses a create-only write")
            && stdout.contains(&format!("{url} (store)"))
            && stdout.contains(&format!("{url} (issuer)"))
            && stdout.contains(&format!("{url}: safe: all")),
        "{}: {}",
        server.name,
        text(&out)
    );

    let (report, checks) = json_checks(&doctor(&["--json", url], None), 0);
    assert_eq!(report["safe"], true, "{report}");
    assert_eq!(report["urls"][0]["verdict"], "safe", "{report}");
    assert!(checks.len() >= 5, "{report}");
    assert!(
        checks
            .iter()
            .all(|(role, v, _)| (role == "store" || role == "issuer") && v == "pass"),
        "{report}"
    );
}

/// Doctor on a fresh bucket of `server`'s emulator (`S3`, `GCS`, `AZURE`).
async fn assert_emulator_passes(server: &Server) {
    if let Some(bucket) = emulator_bucket(server).await {
        assert_store_passes(server, &format!("{}&emulator=true", bucket.url));
    }
}

#[tokio::test]
async fn doctor_passes_on_moto() {
    assert_emulator_passes(&S3).await;
}

#[tokio::test]
async fn doctor_passes_on_fake_gcs_server() {
    assert_emulator_passes(&GCS).await;
}

#[tokio::test]
async fn doctor_passes_on_azurite() {
    assert_emulator_passes(&AZURE).await;
}

/// The access key and secret s3rver checks SigV4 signatures with.
const S3RVER_KEY: &str = "S3RVER";

fn s3rver_client(endpoint: &str) -> aws_sdk_s3::Client {
    use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(S3RVER_KEY, S3RVER_KEY, None, None, "test"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

#[tokio::test]
async fn doctor_flags_s3rver_as_unsafe() {
    if S3RVER.skipped() {
        return;
    }
    let (endpoint, bucket) = (S3RVER.endpoint(), fencing_testkit::unique_prefix());
    if let Err(e) = fencing_s3::emulator::create_bucket(&s3rver_client(&endpoint), &bucket).await {
        S3RVER.unavailable(&e);
    }
    // s3rver's own keys, from the AWS variables: `emulator=true` would
    // sign with the emulator's test keys instead, which s3rver refuses.
    let url = format!("s3://{bucket}?endpoint={endpoint}");
    let out = doctor(&[&url], Some((S3RVER_KEY, S3RVER_KEY)));
    let wanted = [
        "UNSAFE  refuses a write under a stale version (If-Match / ifGenerationMatch): s3 APPLIED",
        "UNSAFE  refuses a create-only write over an existing object (If-None-Match / ifGenerationMatch=0): s3 APPLIED",
        // The client-side token check still works: only the preconditions are missing.
        "pass    refuses a lower token",
        // The bucket issuer on it is as unsafe: two waiters could take one lease.
        &format!("{url} (issuer)"),
        &format!("{url}: UNSAFE: 5 of 15 checks failed"),
    ];
    assert_prints(&out, 7, &wanted);

    let out = doctor(&["--json", &url], Some((S3RVER_KEY, S3RVER_KEY)));
    let (report, checks) = json_checks(&out, 7);
    assert_eq!(report["safe"], false, "{report}");
    assert_eq!(report["urls"][0]["verdict"], "unsafe", "{report}");
    let unsafe_: Vec<&str> = checks
        .iter()
        .filter(|(_, v, _)| v == "unsafe")
        .map(|(_, _, name)| name.as_str())
        .collect();
    assert_eq!(unsafe_.len(), 5, "{report}");
    assert!(
        unsafe_
            .iter()
            .all(|n| n.contains("If-Match") || n.contains("If-None-Match")),
        "{report}"
    );
}

#[test]
fn doctor_runs_store_and_issuer_checks_on_a_sql_url() {
    let s = Scratch::new("doctor-sql");
    let url = s.url();
    let out = doctor(&[&url], None);
    let (store, issuer) = (format!("{url} (store)"), format!("{url} (issuer)"));
    let wanted = [&store, &issuer, "refuses a lower token", "tokens rise"];
    assert_prints(&out, 0, &wanted);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("UNSAFE"), "{}", text(&out));

    let (report, checks) = json_checks(&doctor(&["--json", &url], None), 0);
    assert_eq!(report["safe"], true, "{report}");
    assert!(
        checks.iter().any(|(role, _, _)| role == "store"),
        "{report}"
    );
    assert!(
        checks.iter().any(|(role, _, _)| role == "issuer"),
        "{report}"
    );
    assert!(checks.iter().all(|(_, v, _)| v != "unsafe"), "{report}");
}

#[test]
fn doctor_passes_the_append_only_redis_and_flags_the_volatile_one() {
    for server in [REDIS_AOF, REDIS] {
        if server.skipped() {
            return;
        }
    }
    let (aof, volatile) = (REDIS_AOF.endpoint(), REDIS.endpoint());
    let wanted = [
        "pass    appendonly",
        "pass    tokens rise",
        &format!("{aof}: safe"),
    ];
    assert_prints(&doctor_on(&REDIS_AOF, &aof), 0, &wanted);
    let wanted = [
        "UNSAFE  opens without an opt-in",
        "UNSAFE  appendonly: appendonly is \"no\"",
        &format!("{volatile}: UNSAFE"),
    ];
    assert_prints(&doctor_on(&REDIS, &volatile), 7, &wanted);

    // Both at once: one unsafe URL makes the run unsafe.
    let (report, _) = json_checks(&doctor(&["--json", &aof, &volatile], None), 7);
    assert_eq!(report["urls"][0]["verdict"], "safe", "{report}");
    assert_eq!(report["urls"][1]["verdict"], "unsafe", "{report}");
}

/// A local port nothing listens on.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn doctor_exits_1_when_the_server_is_down() {
    let (s3, redis) = (dead_port(), dead_port());
    let s3_url = format!("s3://nowhere?endpoint=http://127.0.0.1:{s3}&emulator=true");
    let redis_url = format!("redis://127.0.0.1:{redis}");
    for url in [&s3_url, &redis_url] {
        let out = doctor(&[url], None);
        assert_exit(&out, 1);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            stdout.contains("ERROR   could not run the")
                && stdout.contains("Connection refused")
                && stdout.contains("is the server up and reachable at that address?")
                && stdout.contains(&format!("{url}: COULD NOT CHECK")),
            "{}",
            text(&out)
        );
        assert!(
            stderr.contains(&format!("fence doctor: could not check {url}")),
            "{}",
            text(&out)
        );
    }
    // Bad input is exit 2, as elsewhere.
    let out = doctor(&["ftp://example.com/x"], None);
    assert_exit(&out, 2);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("not a store or issuer URL"),
        "{}",
        text(&out)
    );
}

#[test]
fn doctor_hides_passwords_in_what_it_prints() {
    let port = dead_port();
    let out = doctor(
        &[&format!(
            "postgres://fencing:s3cret@127.0.0.1:{port}/fencing"
        )],
        None,
    );
    assert_exit(&out, 1);
    let all = text(&out);
    assert!(
        !all.contains("s3cret") && all.contains("fencing:***@127.0.0.1"),
        "{all}"
    );
}
