//! This crate's `[lints]` are a copy of the workspace's (Cargo cannot
//! override one workspace lint): the copy must stay the workspace's
//! `[workspace.lints]`, except `unsafe_code = "deny"` for `"forbid"`
//! (src/run/sys.rs alone allows unsafe code, for the libc calls std has no
//! safe form of). A lint added to the workspace and not here fails this.

use std::path::Path;

/// The lines of every table whose header starts with `[{prefix}` (e.g.
/// `[workspace.lints`), headers with `prefix` dropped, without comments
/// and blank lines.
fn lint_tables(toml: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in toml.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.starts_with('[') {
            inside = line.starts_with(&format!("[{prefix}lints"));
            if inside {
                out.push(line.replacen(prefix, "", 1));
            }
            continue;
        }
        if inside && !line.is_empty() {
            out.push(line.to_owned());
        }
    }
    out
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_lints_are_the_workspaces_but_unsafe_code_denied() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = crate_dir.join("../../Cargo.toml");
    let ours = crate_dir.join("Cargo.toml");
    let workspace = lint_tables(&read(&root), "workspace.");
    let copy = lint_tables(&read(&ours), "");
    assert!(
        workspace.iter().any(|l| l == r#"unsafe_code = "forbid""#),
        "the workspace no longer forbids unsafe code ({}): update this crate's copy and this test",
        root.display()
    );
    assert_eq!(
        copy.iter()
            .filter(|l| *l == r#"unsafe_code = "deny""#)
            .count(),
        1,
        "{} must deny unsafe code once (src/run/sys.rs allows it)",
        ours.display()
    );
    let expected: Vec<String> = workspace
        .iter()
        .map(|l| {
            if l == r#"unsafe_code = "forbid""# {
                r#"unsafe_code = "deny""#.to_owned()
            } else {
                l.clone()
            }
        })
        .collect();
    assert_eq!(
        copy,
        expected,
        "{}'s [lints] differ from [workspace.lints] in {} (beyond unsafe_code = \"deny\"): \
         copy the workspace's lints here, one for one\nhere:\n  {}\nworkspace (unsafe denied):\n  {}",
        ours.display(),
        root.display(),
        copy.join("\n  "),
        expected.join("\n  ")
    );
}

#[test]
fn the_tables_are_read_without_comments_or_other_tables() {
    let toml = "[package]\nname = \"x\"\n[workspace.lints.rust]\n# why\na = \"warn\" # because\n\n[profile.dev]\ndebug = 1\n";
    assert_eq!(
        lint_tables(toml, "workspace."),
        ["[lints.rust]", "a = \"warn\""]
    );
}
