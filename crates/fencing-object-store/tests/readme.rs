//! The README's table of object_store's conformance functions names each
//! exactly once, agrees with what `object_store_suite!` runs (`RUN`; the
//! `memory` tests expand it, one test per name) and
//! `conformance::NOT_RUN` leaves out, and misses none of the functions
//! object_store's source defines.

use std::collections::BTreeSet;

use fencing_object_store::conformance::{NOT_RUN, RUN};

/// `(name, row)` of each row of the README's conformance table.
fn readme_rows() -> Vec<(String, String)> {
    let readme = include_str!("../README.md");
    let table = readme
        .split("<!-- conformance:")
        .nth(1)
        .expect("the README's conformance table");
    table
        .lines()
        .skip(3)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let name = line.split('`').nth(1).expect("a `name` cell").to_owned();
            (name, line.to_owned())
        })
        .collect()
}

/// The public async functions of object_store's `integration` module, from
/// the source of the version `Cargo.lock` pins, where Cargo unpacked it.
fn object_store_functions() -> BTreeSet<String> {
    let lock_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.lock");
    let lock = std::fs::read_to_string(&lock_path).expect("the workspace's Cargo.lock");
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("\nname = \"object_store\"\n"))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = ")))
        .expect("object_store in Cargo.lock")
        .trim_matches('"')
        .to_owned();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let registries = std::fs::read_dir(cargo_home.join("registry/src")).expect("registry sources");
    let source = registries
        .filter_map(Result::ok)
        .map(|r| {
            r.path()
                .join(format!("object_store-{version}/src/integration.rs"))
        })
        .find(|p| p.is_file())
        .expect("object_store's integration.rs, unpacked by the build");
    let text = std::fs::read_to_string(&source).expect("object_store's integration.rs");
    text.lines()
        .filter_map(|line| line.strip_prefix("pub async fn "))
        .map(|rest| rest.split('(').next().expect("a name").to_owned())
        .collect()
}

#[test]
fn the_conformance_table_matches_the_suite_and_object_stores_source() {
    let rows = readme_rows();
    let named: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    let unique: BTreeSet<&str> = named.iter().copied().collect();
    assert_eq!(unique.len(), named.len(), "a function twice: {named:?}");

    let run: BTreeSet<&str> = RUN.iter().copied().collect();
    let not_run: BTreeSet<&str> = NOT_RUN.iter().map(|(n, _)| *n).collect();
    assert!(run.is_disjoint(&not_run));
    let listed: BTreeSet<&str> = run.union(&not_run).copied().collect();
    assert_eq!(unique, listed, "README vs the suite");

    let defined = object_store_functions();
    let defined: BTreeSet<&str> = defined.iter().map(String::as_str).collect();
    assert_eq!(
        listed, defined,
        "the suite vs object_store's integration module"
    );

    for (name, row) in &rows {
        let in_memory = row.split('|').nth(2).expect("an InMemory cell").trim();
        if run.contains(name.as_str()) {
            assert_eq!(in_memory, "passes", "{row}");
        } else {
            assert!(in_memory.starts_with("not run: "), "{row}");
        }
    }
}
