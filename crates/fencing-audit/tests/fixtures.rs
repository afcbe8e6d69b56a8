//! The scanner on the fixture trees in
//! `tests/fixtures/locks/<language>/{unfenced,fenced}/`: every finding at its
//! line, through the JSON report and the text report.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use fencing_audit::{Report, schema};
use serde_json::Value;

const LANGUAGES: [&str; 7] = [
    "rust",
    "go",
    "java",
    "kotlin",
    "python",
    "javascript",
    "typescript",
];

/// A finding expected in a fixture: (file, line, kind).
type Site = (&'static str, u64, &'static str);

/// Every lock, lease and leader election. Those in
/// `*/fenced/` pass the lease's token to a write the store checks; those in
/// `*/unfenced/` do not.
const SITES: [Site; 34] = [
    ("go/fenced/billing.go", 11, "redis-set-nx"),
    ("go/fenced/reindex.go", 17, "etcd-lock"),
    ("go/unfenced/billing.go", 14, "redsync"),
    ("go/unfenced/leader.go", 12, "k8s-leader-election"),
    ("go/unfenced/reindex.go", 25, "etcd-lock"),
    ("java/fenced/InvoiceJob.java", 18, "redisson-lock"),
    ("java/fenced/LedgerCloser.java", 12, "hazelcast-lock"),
    ("java/unfenced/IndexRebuilder.java", 16, "zookeeper-lock"),
    ("java/unfenced/InvoiceJob.java", 13, "redisson-lock"),
    ("java/unfenced/ReportScheduler.java", 15, "shedlock"),
    ("javascript/fenced/billing.js", 6, "etcd-lock"),
    ("javascript/fenced/cleanup.js", 7, "redis-set-nx"),
    ("javascript/unfenced/billing.js", 8, "redlock"),
    ("javascript/unfenced/cleanup.js", 7, "redis-set-nx"),
    ("kotlin/fenced/Exporter.kt", 9, "etcd-lock"),
    ("kotlin/fenced/LedgerCloser.kt", 8, "hazelcast-lock"),
    ("kotlin/unfenced/Exporter.kt", 8, "zookeeper-election"),
    ("kotlin/unfenced/PartnerSync.kt", 9, "pg-advisory-lock"),
    ("python/fenced/report_job.py", 7, "redis-set-nx"),
    ("python/fenced/workers.py", 9, "zookeeper-lock"),
    ("python/unfenced/report_job.py", 10, "redis-set-nx"),
    ("python/unfenced/workers.py", 10, "zookeeper-lock"),
    ("python/unfenced/workers.py", 16, "dynamodb-lock"),
    ("python/unfenced/workers.py", 27, "pg-advisory-lock"),
    ("rust/fenced/compactor.rs", 10, "etcd-lock"),
    ("rust/fenced/report_job.rs", 7, "redis-set-nx"),
    ("rust/unfenced/compactor.rs", 13, "etcd-lock"),
    ("rust/unfenced/compactor.rs", 24, "pg-advisory-lock"),
    ("rust/unfenced/report_job.rs", 16, "redis-set-nx"),
    ("typescript/fenced/reports.ts", 6, "redis-set-nx"),
    ("typescript/fenced/reports.ts", 22, "acquire-lock"),
    ("typescript/unfenced/queue.ts", 8, "redis-lock"),
    ("typescript/unfenced/queue.ts", 18, "pg-advisory-lock"),
    ("typescript/unfenced/scheduler.ts", 8, "etcd-election"),
];

/// Everything else found, by category; `fenced` null.
const OTHERS: [(&str, &[Site]); 3] = [
    (
        "hint",
        &[
            ("go/unfenced/billing.go", 12, "single-writer"),
            ("javascript/unfenced/cleanup.js", 5, "process-pause"),
            ("python/unfenced/report_job.py", 9, "ttl-assumption"),
            ("rust/unfenced/report_job.rs", 12, "ttl-assumption"),
            ("typescript/unfenced/scheduler.ts", 6, "single-writer"),
        ],
    ),
    (
        "leader",
        &[
            ("go/unfenced/leader.go", 11, "k8s-lease"),
            ("java/unfenced/ReportScheduler.java", 14, "scheduled-job"),
            // Not in the list above because they are lock sites:
            ("go/unfenced/leader.go", 12, "k8s-leader-election"),
            ("kotlin/unfenced/Exporter.kt", 8, "zookeeper-election"),
        ],
    ),
    (
        "optimistic",
        &[
            ("java/fenced/InvoiceJob.java", 26, "token-column"),
            ("python/fenced/workers.py", 18, "gcs-precondition"),
            ("typescript/fenced/uploads.ts", 6, "if-match"),
            ("typescript/fenced/uploads.ts", 10, "gcs-precondition"),
        ],
    ),
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/locks")
}

/// The JSON report of `path`, checked against the shipped schema and read
/// back into the serde type.
fn audit_json(path: &Path) -> Value {
    let scan = fencing_audit::scan(path);
    let report = Report::new(path, &scan);
    let mut bytes = Vec::new();
    report.write_json(&mut bytes).unwrap();
    let json: Value = serde_json::from_slice(&bytes).unwrap();
    if let Err(errors) = schema::validate(&json) {
        panic!("the report does not match the schema: {errors:#?}");
    }
    let back: Report = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back.findings.len(), report.findings.len());
    assert_eq!(back.summary, report.summary);
    json
}

/// The text report of `path` (`verbose`: every mention listed too).
fn audit_text(path: &Path, verbose: bool) -> String {
    let scan = fencing_audit::scan(path);
    let summary = fencing_audit::summarize(&scan);
    let mut out = Vec::new();
    fencing_audit::write_text(&mut out, path, &scan, &summary, verbose).unwrap();
    String::from_utf8(out).unwrap()
}

fn findings(json: &Value) -> &Vec<Value> {
    json["findings"].as_array().expect("findings array")
}

fn sites(json: &Value, fenced: bool) -> BTreeSet<(String, u64, String)> {
    findings(json)
        .iter()
        .filter(|f| f["fenced"] == Value::Bool(fenced))
        .map(|f| {
            (
                f["file"].as_str().unwrap().to_owned(),
                f["line"].as_u64().unwrap(),
                f["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Whether a fixture is in a `fenced/` directory.
fn is_fenced(file: &str) -> bool {
    file.contains("/fenced/")
}

/// The [`SITES`] reported as fenced (or unfenced).
fn expected_sites(fenced: bool) -> BTreeSet<(String, u64, String)> {
    let rows: Vec<_> = SITES
        .into_iter()
        .filter(|(f, ..)| is_fenced(f) == fenced)
        .collect();
    expected(&rows)
}

fn expected(rows: &[Site]) -> BTreeSet<(String, u64, String)> {
    rows.iter()
        .map(|(f, l, k)| ((*f).to_owned(), *l, (*k).to_owned()))
        .collect()
}

#[test]
fn every_unfenced_lock_is_found_at_its_line_and_nothing_else_is() {
    let json = audit_json(&fixtures());
    assert_eq!(sites(&json, false), expected_sites(false));
    for f in findings(&json) {
        if f["fenced"] == Value::Bool(false) {
            let message = f["message"].as_str().unwrap();
            assert!(
                message.contains("UNFENCED")
                    && message.contains("paused")
                    && message.contains("fencing token with every write")
                    && message.contains("refuse tokens lower"),
                "the risk and the fix are explained: {message}"
            );
        }
    }
}

#[test]
fn no_fenced_example_is_flagged_and_each_is_recognised_as_fenced() {
    let json = audit_json(&fixtures());
    for f in findings(&json) {
        let file = f["file"].as_str().unwrap();
        if file.contains("/fenced/") {
            assert_ne!(f["fenced"], Value::Bool(false), "false positive: {f}");
        }
    }
    assert_eq!(sites(&json, true), expected_sites(true));
    for f in findings(&json) {
        if f["fenced"] == Value::Bool(true) {
            assert!(
                f["message"].as_str().unwrap().contains("; fenced: "),
                "the evidence is named: {f}"
            );
        }
    }
}

#[test]
fn every_finding_is_accounted_for_with_the_documented_schema() {
    let root = fixtures();
    let json = audit_json(&root);
    assert_eq!(json["version"], 1);
    assert_eq!(json["root"], root.to_str().unwrap());
    let keys = [
        "file", "line", "column", "category", "kind", "language", "snippet", "fenced", "message",
    ];
    let mut all = BTreeSet::new();
    for f in findings(&json) {
        let object = f.as_object().unwrap();
        assert_eq!(object.len(), keys.len(), "{f}");
        for k in keys {
            assert!(object.contains_key(k), "{k} missing in {f}");
        }
        assert!(f["column"].as_u64().unwrap() >= 1);
        assert!(!f["snippet"].as_str().unwrap().is_empty());
        let file = f["file"].as_str().unwrap();
        let language = file.split('/').next().unwrap();
        assert_eq!(f["language"], language, "{f}");
        if f["fenced"].is_boolean() {
            assert!(
                matches!(f["category"].as_str(), Some("lock" | "leader")),
                "only locks and leader elections are checked: {f}"
            );
        } else {
            assert!(f["fenced"].is_null(), "{f}");
        }
        all.insert((
            file.to_owned(),
            f["line"].as_u64().unwrap(),
            f["category"].as_str().unwrap().to_owned(),
            f["kind"].as_str().unwrap().to_owned(),
        ));
    }
    let leader_kinds = ["k8s-leader-election", "zookeeper-election", "etcd-election"];
    let mut want: BTreeSet<(String, u64, String, String)> = SITES
        .iter()
        .map(|(f, l, k)| {
            let category = if leader_kinds.contains(k) {
                "leader"
            } else {
                "lock"
            };
            ((*f).to_owned(), *l, category.to_owned(), (*k).to_owned())
        })
        .collect();
    for (category, rows) in OTHERS {
        want.extend(
            rows.iter()
                .map(|(f, l, k)| ((*f).to_owned(), *l, category.to_owned(), (*k).to_owned())),
        );
    }
    assert_eq!(all, want);

    // Sorted by file, then line.
    let order: Vec<(String, u64)> = findings(&json)
        .iter()
        .map(|f| {
            (
                f["file"].as_str().unwrap().to_owned(),
                f["line"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
}

#[test]
fn the_json_summary_counts_exactly() {
    let json = audit_json(&fixtures());
    assert_eq!(
        json["summary"],
        serde_json::json!({
            "files_scanned": 30,
            "files_skipped": 0,
            "errors": 0,
            "findings": 45,
            "by_category": {"lock": 31, "optimistic": 4, "leader": 5, "hint": 5},
            "lock_sites": 34,
            "fenced": 14,
            "unfenced": 20
        })
    );
}

#[test]
fn each_language_has_both_kinds_of_example_and_its_fenced_tree_has_no_unfenced_lock() {
    for language in LANGUAGES {
        let count = |fenced: bool| {
            SITES
                .iter()
                .filter(|(f, ..)| f.starts_with(&format!("{language}/")) && is_fenced(f) == fenced)
                .count()
        };
        let (unfenced, fenced) = (count(false), count(true));
        assert!(unfenced >= 1 && fenced >= 1, "{language}");

        let dir = fixtures().join(language).join("fenced");
        let json = audit_json(&dir);
        assert_eq!(json["summary"]["unfenced"], 0, "{language}: {json}");
        assert_eq!(json["summary"]["fenced"], fenced, "{language}");

        let dir = fixtures().join(language).join("unfenced");
        let json = audit_json(&dir);
        assert_eq!(json["summary"]["unfenced"], unfenced, "{language}");
    }
}

#[test]
fn the_text_report_groups_by_category_with_locations_and_a_summary() {
    let root = fixtures();
    let text = audit_text(&root, false);
    let headings = [
        "Distributed locks: 31 lock sites (17 unfenced)",
        "Optimistic concurrency checks: 4",
        "Leader election and singleton-job guards: 3 lock sites (3 unfenced)",
        "Hints (language signals, low severity): 5",
    ];
    let mut last = 0;
    for h in headings {
        let at = text
            .find(h)
            .unwrap_or_else(|| panic!("{h} missing:\n{text}"));
        assert!(at >= last, "categories in order");
        last = at;
    }
    let shown = root.join("rust/unfenced/report_job.rs");
    let line = format!(
        "  UNFENCED {}:16:9  [redis-set-nx]",
        shown.to_str().unwrap()
    );
    assert!(text.contains(&line), "{line} missing:\n{text}");
    assert!(text.contains(".arg(\"NX\")"), "the snippet is shown");
    assert!(text.contains("fenced: an etcd create revision at line 27"));
    // Mentions are folded into the site of their file, or counted where
    // there is none; --verbose lists them.
    assert!(!text.contains("  usage "), "{text}");
    assert!(
        text.contains("+ 1 mention in this file (k8s-lease; --verbose lists them)"),
        "{text}"
    );
    assert!(
        text.contains(
            "Lock libraries are also mentioned where no lock is taken: 1 mention in 1 file"
        ),
        "{text}"
    );
    let verbose = audit_text(&root, true);
    assert_eq!(verbose.matches("\n  usage ").count(), 2, "{verbose}");
    assert!(!verbose.contains("also mentioned"), "{verbose}");
    let summary = text.lines().last().unwrap();
    assert!(
        summary.starts_with(
            "Summary: 45 findings (31 lock, 4 optimistic, 5 leader, 5 hint); \
             34 lock sites, 20 unfenced, 14 fenced; 30 files"
        ),
        "{summary}"
    );
}

/// A scratch tree, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    /// A fresh tree holding `files` (path, contents).
    fn with(name: &str, files: &[(&str, &[u8])]) -> Scratch {
        let dir = std::env::temp_dir().join(format!("fencing-audit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, contents) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, contents).unwrap();
        }
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_walk_skips_ignored_dependency_build_binary_and_large_files() {
    let lock: &[u8] = b"ok = r.set('job', me, nx=True, px=30000)\n";
    let mut binary = lock.to_vec();
    binary.extend_from_slice(b"\0\x01\x02");
    let mut big = lock.to_vec();
    big.resize(2 * 1024 * 1024 + 1, b' ');
    let tree = Scratch::with(
        "walk",
        &[
            ("app/main.py", lock),
            (".gitignore", b"generated/\nscratch.py\n"),
            ("generated/client.py", lock),
            ("scratch.py", lock),
            ("node_modules/redlock/index.py", lock),
            ("target/debug/build.py", lock),
            ("vendor/lib.py", lock),
            ("build/lib.py", lock),
            (".git/hooks/pre-commit.py", lock),
            (".hidden/tool.py", lock),
            ("notes.txt", lock),
            ("app/blob.py", &binary),
            ("app/big.py", &big),
        ],
    );

    let json = audit_json(&tree.0);
    assert_eq!(
        sites(&json, false),
        expected(&[("app/main.py", 1, "redis-set-nx")])
    );
    assert_eq!(json["summary"]["files_scanned"], 1);
    assert_eq!(json["summary"]["files_skipped"], 2, "binary and too large");

    // A single file as PATH: `file` is its name.
    let json = audit_json(&tree.0.join("app/main.py"));
    assert_eq!(
        sites(&json, false),
        expected(&[("main.py", 1, "redis-set-nx")])
    );
}

#[test]
fn a_tree_without_locks_says_so() {
    let tree = Scratch::with(
        "empty",
        &[(
            "src/lib.rs",
            b"pub fn add(a: u64, b: u64) -> u64 { a + b }\n",
        )],
    );
    let text = audit_text(&tree.0, false);
    assert!(text.contains("No distributed locks"), "{text}");
    assert!(text.contains("0 lock sites, 0 unfenced"), "{text}");
}
