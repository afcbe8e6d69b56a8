//! `fence audit` end to end, the real binary: exit codes, the JSON report
//! against the `fencing-audit` schema, the text report, `--category`. What
//! the scan finds is tested in the `fencing-audit` crate, on its fixtures.
#![cfg(feature = "audit")]

use std::path::Path;
use std::process::Output;

use serde_json::Value;

mod common;

use common::{Scratch, fence};

const UNFENCED: &str = "import redis\n\
r = redis.Redis()\n\
# only one worker should write at a time\n\
if r.set('report-job', me, nx=True, px=30000):\n\
    db.execute('UPDATE report SET body = %s', (body,))\n";

const FENCED: &str = "import redis\n\
ok = r.set('report-job', me, nx=True, px=30000)\n\
token = r.incr('report-job:fence')\n\
store.write('report', body, fencing_token=token)\n";

fn tree(name: &str) -> Scratch {
    let tree = Scratch::new(name);
    tree.write("jobs/unfenced.py", UNFENCED)
        .write("jobs/fenced.py", FENCED);
    tree
}

fn json_of(out: &Output) -> Value {
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    if let Err(errors) = fencing_audit::schema::validate(&json) {
        panic!("fence audit --json does not match the schema: {errors:#?}\n{json:#}");
    }
    let _: fencing_audit::Report =
        serde_json::from_value(json.clone()).expect("the serde type reads the output");
    json
}

#[test]
fn json_output_matches_the_schema_and_an_unfenced_lock_exits_1() {
    let tree = tree("json");
    let out = fence(&["audit", "--json", tree.dir()]);
    assert_eq!(out.status.code(), Some(1));
    let json = json_of(&out);
    assert_eq!(json["version"], fencing_audit::JSON_VERSION);
    assert_eq!(json["root"], tree.dir());
    let sites: Vec<(&str, u64, bool)> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["fenced"].is_boolean())
        .map(|f| {
            (
                f["file"].as_str().unwrap(),
                f["line"].as_u64().unwrap(),
                f["fenced"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        sites,
        [("jobs/fenced.py", 2, true), ("jobs/unfenced.py", 4, false)]
    );
    assert_eq!(json["summary"]["unfenced"], 1);
    assert_eq!(json["summary"]["by_category"]["hint"], 1);
}

#[test]
fn no_fail_exits_0_and_a_fenced_tree_exits_0() {
    let tree = tree("no-fail");
    let out = fence(&["audit", "--no-fail", "--json", tree.dir()]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json_of(&out)["summary"]["unfenced"], 1);
    let fenced = Scratch::new("fenced");
    fenced.write("fenced.py", FENCED);
    assert_eq!(fence(&["audit", fenced.dir()]).status.code(), Some(0));
}

#[test]
fn the_text_report_names_the_site_and_sums_up() {
    let tree = tree("text");
    let out = fence(&["audit", tree.dir()]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    let site = Path::new(tree.dir()).join("jobs/unfenced.py");
    let line = format!("  UNFENCED {}:4:", site.to_str().unwrap());
    assert!(text.contains(&line), "{line} missing:\n{text}");
    let summary = text.lines().last().unwrap();
    assert!(
        summary.starts_with("Summary: 3 findings (2 lock, 0 optimistic, 0 leader, 1 hint); 2 lock sites, 1 unfenced, 1 fenced; 2 files"),
        "{summary}"
    );
}

#[test]
fn category_filter_narrows_the_report_and_the_exit_code() {
    let tree = tree("category");
    let out = fence(&[
        "audit",
        "--json",
        "--category",
        "optimistic,hint",
        tree.dir(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "no lock reported, none unfenced"
    );
    assert_eq!(
        json_of(&out)["summary"]["by_category"],
        serde_json::json!({"lock": 0, "optimistic": 0, "leader": 0, "hint": 1})
    );
    let out = fence(&["audit", "--json", "--category", "lock", tree.dir()]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_missing_path_exits_2_with_a_clear_message() {
    let missing = std::env::temp_dir().join("fence-audit-no-such-dir");
    let out = fence(&["audit", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot read")
            && stderr.contains("no-such-dir")
            && stderr.contains("no such file or directory"),
        "{stderr}"
    );
    let out = fence(&["audit", "--json", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing half-written on stdout");
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(fence(&["audit"]).status.code(), Some(2));
    assert_eq!(
        fence(&["audit", "--frobnicate", "."]).status.code(),
        Some(2)
    );
    let out = fence(&["audit", "--category", "nonsense", "."]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("lock") && stderr.contains("optimistic"),
        "{stderr}"
    );
}

#[test]
fn help_documents_exit_codes_and_the_json_schema() {
    let out = fence(&["audit", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--json",
        "--no-fail",
        "--category",
        "1  at least one unfenced lock found",
        "2  usage or I/O error",
        "\"fenced\": true|false",
        "\"summary\"",
        "report-v1.schema.json",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}
