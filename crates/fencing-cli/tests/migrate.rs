//! `fence migrate issuer` with the real binary: from a SQLite issuer to the
//! append-only Redis of `integration/services.sh`; the first token after
//! the migration is above every earlier token and every mark.

use std::process::{Command, Output};

const FENCE: &str = env!("CARGO_BIN_EXE_fence");

fn fence(args: &[&str]) -> Output {
    Command::new(FENCE).args(args).output().expect("run fence")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn redis_url() -> Option<String> {
    let server = fencing_harness::env::REDIS_AOF;
    (!server.skipped()).then(|| server.endpoint())
}

#[test]
fn sql_to_redis_never_goes_backwards() {
    let Some(redis) = redis_url() else { return };
    sql_to(&redis, "redis");
}

#[test]
fn sql_to_etcd_never_goes_backwards() {
    let server = fencing_harness::env::ETCD;
    if server.skipped() {
        return;
    }
    let hosts = server.endpoint().replace("http://", "");
    sql_to(&format!("etcd://{hosts}"), "etcd");
}

/// Migrates a resource with history from a SQLite issuer to `target`.
fn sql_to(target: &str, name: &str) {
    let dir = std::env::temp_dir().join(format!("fence-migrate-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let old = format!("sqlite://{}", dir.join("old.sqlite").display());
    let resource = fencing_testkit::unique_name("migrated-job");

    // History on the old issuer: tokens 1..=3, and a store mark of 40 (a
    // holder that fenced far ahead).
    let mut last = 0;
    for _ in 0..3 {
        let lease = json(&fence(&[
            "acquire",
            "--issuer",
            &old,
            "--resource",
            &resource,
            "--json",
        ]));
        last = lease["token"].as_u64().unwrap();
        let (holder, token) = (
            lease["holder"].as_str().unwrap().to_owned(),
            last.to_string(),
        );
        assert!(
            fence(&[
                "release",
                "--issuer",
                &old,
                "--resource",
                &resource,
                "--holder",
                &holder,
                "--token",
                &token
            ])
            .status
            .success()
        );
    }
    assert_eq!(last, 3);
    assert!(
        fence(&["fence", "--store", &old, "report", "--token", "40"])
            .status
            .success()
    );

    // Held on the old issuer: refused unless forced.
    let held = json(&fence(&[
        "acquire",
        "--issuer",
        &old,
        "--resource",
        &resource,
        "--ttl",
        "60s",
        "--json",
    ]));
    let store_arg = format!("{old}#report");
    let refused = fence(&[
        "migrate",
        "issuer",
        "--from",
        &old,
        "--to",
        target,
        "--resource",
        &resource,
        "--store",
        &store_arg,
    ]);
    assert_eq!(
        refused.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--force"));
    let (holder, token) = (
        held["holder"].as_str().unwrap().to_owned(),
        held["token"].to_string(),
    );
    assert!(
        fence(&[
            "release",
            "--issuer",
            &old,
            "--resource",
            &resource,
            "--holder",
            &holder,
            "--token",
            &token
        ])
        .status
        .success()
    );

    let report = json(&fence(&[
        "migrate",
        "issuer",
        "--from",
        &old,
        "--to",
        target,
        "--resource",
        &resource,
        "--store",
        &store_arg,
        "--json",
    ]));
    assert_eq!(report["floor"], 40, "{report}");
    assert!(report["first_new_token"].as_u64().unwrap() > 40, "{report}");

    // Holders on the new issuer write above the old mark.
    let lease = json(&fence(&[
        "acquire",
        "--issuer",
        target,
        "--resource",
        &resource,
        "--json",
    ]));
    let token = lease["token"].as_u64().unwrap();
    assert!(token > 40 && token > last);
    let put = fence(&[
        "put",
        "--store",
        &old,
        "report",
        "--token",
        &token.to_string(),
        "after the migration",
    ]);
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn store_migration_copies_values_and_marks_and_never_lowers_one() {
    let dir = std::env::temp_dir().join(format!("fence-migrate-store-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (from, to) = (
        format!("sqlite://{}", dir.join("from.sqlite").display()),
        format!("sqlite://{}", dir.join("to.sqlite").display()),
    );
    assert!(
        fence(&["put", "--store", &from, "a", "--token", "5", "value a"])
            .status
            .success()
    );
    assert!(
        fence(&["put", "--store", &from, "b", "--token", "9", "value b"])
            .status
            .success()
    );
    assert!(
        fence(&["fence", "--store", &from, "c", "--token", "4"])
            .status
            .success()
    );
    // The target already moved past the source on "b".
    assert!(
        fence(&["put", "--store", &to, "b", "--token", "20", "newer b"])
            .status
            .success()
    );

    let keys = dir.join("keys.txt");
    std::fs::write(&keys, "a\nb\nc\nmissing\n").unwrap();
    let out = fence(&[
        "migrate",
        "store",
        "--from",
        &from,
        "--to",
        &to,
        "--keys-from",
        keys.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let outcomes: Vec<_> = lines
        .iter()
        .map(|l| (l["key"].as_str().unwrap(), l["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("a", "copied"),
            ("b", "up-to-date"),
            ("c", "copied"),
            ("missing", "absent")
        ]
    );

    let a = json(&fence(&["get", "--store", &to, "a", "--json"]));
    assert_eq!(
        (a["value"].as_str(), a["token"].as_u64()),
        (Some("value a"), Some(5))
    );
    let b = json(&fence(&["get", "--store", &to, "b", "--json"]));
    assert_eq!(
        (b["value"].as_str(), b["token"].as_u64()),
        (Some("newer b"), Some(20)),
        "a mark went down"
    );
    let c = json(&fence(&["mark", "--store", &to, "c", "--json"]));
    assert_eq!(c["mark"], 4);
    assert_eq!(
        fence(&["get", "--store", &to, "c"]).status.code(),
        Some(6),
        "a fenced-only key gets no value"
    );

    // Resumable: a second run changes nothing.
    let again = fence(&[
        "migrate", "store", "--from", &from, "--to", &to, "--key", "a", "--key", "c",
    ]);
    let text = String::from_utf8_lossy(&again.stdout);
    assert_eq!(text.matches("up-to-date").count(), 2, "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}
