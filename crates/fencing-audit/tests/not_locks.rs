//! False positives found on public repositories, reduced to fixtures in
//! `tests/fixtures/not-locks/`: none of them is a lock site.

use std::path::{Path, PathBuf};

fn not_locks() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/not-locks")
}

fn lock_sites(tree: &str) -> Vec<String> {
    let scan = fencing_audit::scan(&not_locks().join(tree));
    assert!(scan.files_scanned > 0, "{tree} is scanned");
    scan.findings
        .iter()
        .filter(|f| f.is_lock_site())
        .map(|f| format!("{}:{} [{}] {}", f.file, f.line, f.kind, f.snippet))
        .collect()
}

#[test]
fn a_redis_clients_own_set_code_and_option_tests_are_not_lock_sites() {
    for tree in ["redis-client-py", "redis-client-go", "redis-client-ts"] {
        assert_eq!(lock_sites(tree), Vec::<String>::new(), "{tree}");
    }
}

#[test]
fn the_same_option_tests_outside_a_client_tree_are_lock_sites() {
    // Without the client's definition of SET, its tests read as any code
    // taking a lease with an expiry would: the exemption is the tree's.
    let scan = fencing_audit::scan(&not_locks().join("redis-client-py/tests"));
    let sites: Vec<(usize, &str)> = scan
        .findings
        .iter()
        .filter(|f| f.is_lock_site())
        .map(|f| (f.line, f.kind.as_str()))
        .collect();
    assert_eq!(sites, [(7, "redis-set-nx"), (12, "redis-set-nx")]);
}

#[test]
fn set_if_absent_markers_other_commands_nx_and_declarations_are_not_lock_sites() {
    assert_eq!(lock_sites("app"), Vec::<String>::new());
    // Declarations are still reported, as mentions.
    let scan = fencing_audit::scan(&not_locks().join("app"));
    let definitions = scan
        .findings
        .iter()
        .filter(|f| f.message.ends_with("(its definition)"))
        .count();
    assert_eq!(definitions, 4, "{:#?}", scan.findings);
}
