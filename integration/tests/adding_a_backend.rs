//! `docs/adding-a-backend.md` tells the truth: every file its table says a
//! backend touches is there, for every backend of the registry, and holds
//! that backend's line. A table row that no longer matches the tree fails
//! here, naming the row.

use std::path::{Path, PathBuf};

use fencing_integration::backends::ALL;
use fencing_tokens::registry::BACKENDS;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| {
        panic!("docs/adding-a-backend.md names {path}, which cannot be read: {e}")
    })
}

/// The backticked paths of the first column of the table under "What a new
/// backend touches".
fn table_paths() -> Vec<String> {
    let doc = read("docs/adding-a-backend.md");
    let section = doc
        .split("## What a new backend touches")
        .nth(1)
        .expect("the section \"What a new backend touches\"");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut paths = Vec::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let first = row.split('|').nth(1).unwrap_or_default();
        paths.extend(first.split('`').skip(1).step_by(2).map(str::to_owned));
    }
    paths
}

#[test]
fn every_path_of_the_table_exists_for_every_backend() {
    let paths = table_paths();
    assert!(paths.len() >= 10, "the table lost rows: {paths:?}");
    for descriptor in BACKENDS {
        let name = descriptor
            .crate_name
            .strip_prefix("fencing-")
            .expect("crates are named fencing-<name>");
        let modules: Vec<_> = ALL
            .iter()
            .filter(|b| b.descriptor == descriptor.name)
            .collect();
        assert!(
            !modules.is_empty(),
            "{}: no module in integration/src/backends/",
            descriptor.name
        );
        for path in &paths {
            if path.contains("<server>") {
                for module in &modules {
                    if let Some(server) = module.server {
                        assert!(
                            fencing_servers::service(server.service).is_some(),
                            "{}: its server {} has no spec in integration/servers/src/specs/",
                            module.name,
                            server.service
                        );
                    }
                }
            } else if path == "integration/src/backends/<name>.rs" {
                for module in &modules {
                    let file = format!("integration/src/backends/{}.rs", module.name);
                    assert!(root().join(&file).is_file(), "{file} is missing");
                }
            } else if path.contains("<name>") {
                let concrete = path.replace("<name>", name);
                assert!(
                    root().join(&concrete).exists(),
                    "docs/adding-a-backend.md: {concrete} does not exist"
                );
            } else {
                let text = read(path);
                let line = expected_line(path, name, &modules);
                assert!(
                    line.iter().any(|l| text.contains(l.as_str())),
                    "docs/adding-a-backend.md says {path} holds {}'s line, but it has none of {line:?}",
                    descriptor.name
                );
            }
        }
    }
}

/// What a file of the table holds for the backend of crate `fencing-<name>`.
fn expected_line(
    path: &str,
    name: &str,
    modules: &[&&fencing_integration::backends::Backend],
) -> Vec<String> {
    let crate_dash = format!("fencing-{name}");
    let crate_snake = format!("fencing_{name}");
    match path {
        "crates/fencing-tokens/src/registry.rs" => vec![format!("{crate_snake}::BACKEND")],
        "crates/fencing-tokens/Cargo.toml" => vec![format!("dep:{crate_dash}")],
        "crates/fencing-tokens/src/lib.rs" => vec![format!("pub use {crate_snake}")],
        "Cargo.toml" | "integration/Cargo.toml" => {
            vec![format!("{crate_dash} ="), format!("{crate_dash}.workspace")]
        }
        // Its name in the `backends!(…)` list, which declares the module
        // and lists it in `ALL`.
        "integration/src/backends/mod.rs" => modules
            .iter()
            .flat_map(|m| [format!(" {},", m.name), format!("({},", m.name)])
            .collect(),
        // A server's three lines: only new servers add them, so any spec does.
        "integration/servers/src/lib.rs" | "integration/servers/src/specs/mod.rs" => {
            vec!["specs::".to_owned(), "pub mod".to_owned()]
        }
        other => panic!("docs/adding-a-backend.md names {other}: say here what it holds"),
    }
}

/// The keys of one `NAME: dict[...] = { "key": ..., }` literal of a Python
/// file: the first quoted word of each entry line.
fn python_dict_keys(source: &str, name: &str) -> Vec<String> {
    let start = source
        .find(&format!("\n{name}:"))
        .unwrap_or_else(|| panic!("conftest.py has no {name} = {{...}}"));
    let body = &source[start..];
    let body = &body[..body.find("\n}").expect("the dict's closing brace")];
    body.lines()
        .map(str::trim_start)
        .filter_map(|line| line.strip_prefix('"'))
        .filter_map(|line| line.split_once('"').map(|(key, _)| key.to_owned()))
        .collect()
}

/// The Python tests run every issuer and every store the integration tests
/// run, by the same names: `conftest.py`'s `ISSUERS` and `STORES` are the
/// backends of `integration/src/backends` that open each role (they had
/// drifted: no GCS issuer, `mysql` for `mariadb`).
#[test]
fn the_python_tests_run_the_same_backends() {
    use fencing_tokens::registry::Role;

    let conftest = read("crates/fencing-py/tests/conftest.py");
    for (dict, role) in [("ISSUERS", Role::Issuer), ("STORES", Role::Store)] {
        let mut python = python_dict_keys(&conftest, dict);
        python.sort();
        let mut integration: Vec<String> = ALL
            .iter()
            .filter(|b| b.opens(role))
            .map(|b| b.name.to_owned())
            .collect();
        integration.sort();
        assert_eq!(
            python, integration,
            "crates/fencing-py/tests/conftest.py's {dict} (left) must name the backends \
             integration/src/backends opens as {role:?} (right)"
        );
    }
}
