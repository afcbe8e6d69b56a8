//! `fence migrate issuer` with the real binary: from a SQLite issuer to the
//! append-only Redis of `integration/services.sh`; the first token after
//! the migration is above every earlier token and every mark.

mod common;

use common::{HELD, Scratch, assert_exit, fence, json, on_resource, put};

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
    let dir = Scratch::new(&format!("migrate-{name}"));
    let old = dir.sqlite("old.sqlite");
    let resource = fencing_testkit::unique_name("migrated-job");
    let on = |issuer, command, more: &[&str]| on_resource(command, issuer, &resource, more);

    // History on the old issuer: three grants, and a store mark 37 above
    // the last (a holder that fenced far ahead).
    let mut last = 0;
    for _ in 0..3 {
        let lease = json(&on(&old, "acquire", &["--json"]));
        last = lease["token"].as_u64().unwrap();
        let (holder, token) = (
            lease["holder"].as_str().unwrap().to_owned(),
            last.to_string(),
        );
        assert_exit(
            &on(&old, "release", &["--holder", &holder, "--token", &token]),
            0,
        );
    }
    let mark = last + 37;
    assert_exit(
        &fence(&[
            "fence",
            "--store",
            &old,
            "report",
            "--token",
            &mark.to_string(),
        ]),
        0,
    );

    // Held on the old issuer: refused unless forced.
    let held = json(&on(&old, "acquire", &["--ttl", "60s", "--json"]));
    let store_arg = format!("{old}#report");
    let migrate = |more: &[&str]| {
        let args = ["migrate", "issuer", "--from", &old, "--to", target];
        let rest = ["--resource", &resource, "--store", &store_arg];
        fence(&[&args[..], &rest, more].concat())
    };
    let refused = migrate(&[]);
    assert_exit(&refused, HELD);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--force"));
    let (holder, token) = (
        held["holder"].as_str().unwrap().to_owned(),
        held["token"].to_string(),
    );
    assert_exit(
        &on(&old, "release", &["--holder", &holder, "--token", &token]),
        0,
    );

    let report = json(&migrate(&["--json"]));
    assert_eq!(report["floor"], mark, "{report}");
    assert!(
        report["first_new_token"].as_u64().unwrap() > mark,
        "{report}"
    );

    // Holders on the new issuer write above the old mark.
    let lease = json(&on(target, "acquire", &["--json"]));
    let token = lease["token"].as_u64().unwrap();
    assert!(token > mark);
    let after = put(&old, "report", &token.to_string(), "after the migration");
    assert_exit(&after, 0);
}

#[test]
fn store_migration_copies_values_and_marks_and_never_lowers_one() {
    let dir = Scratch::new("migrate-store");
    let (from, to) = (dir.sqlite("from.sqlite"), dir.sqlite("to.sqlite"));
    assert_exit(&put(&from, "a", "5", "value a"), 0);
    assert_exit(&put(&from, "b", "9", "value b"), 0);
    assert_exit(&fence(&["fence", "--store", &from, "c", "--token", "4"]), 0);
    // The target already moved past the source on "b".
    assert_exit(&put(&to, "b", "20", "newer b"), 0);

    let keys = dir.path("keys.txt");
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
    assert_exit(&out, 0);
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
}
