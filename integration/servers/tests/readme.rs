//! `integration/README.md`'s servers tables are the specs' (rendered by
//! `fencing_servers::table`). `FENCING_BLESS=1` rewrites them.

use std::path::Path;

use fencing_servers::Group;

const GROUPS: [(Group, &str); 3] = [
    (Group::Standard, "standard"),
    (Group::OnDemand, "on-demand"),
    (Group::Tls, "tls"),
];

#[test]
fn the_readme_tables_are_the_specs() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let text = std::fs::read_to_string(&path).expect("integration/README.md");
    let mut fresh = text.clone();
    for (group, tag) in GROUPS {
        let (begin, end) = (
            format!("<!-- services:{tag} -->\n"),
            format!("<!-- /services:{tag} -->"),
        );
        let start = fresh
            .find(&begin)
            .unwrap_or_else(|| panic!("integration/README.md has no {begin:?} marker"))
            + begin.len();
        let stop = start
            + fresh[start..]
                .find(&end)
                .unwrap_or_else(|| panic!("integration/README.md has no {end:?} marker"));
        fresh.replace_range(start..stop, &fencing_servers::table::markdown(group));
    }
    if fresh == text {
        return;
    }
    if std::env::var_os("FENCING_BLESS").is_some() {
        std::fs::write(&path, fresh).expect("rewrite integration/README.md");
        return;
    }
    panic!(
        "integration/README.md's servers tables are stale: run \
         `FENCING_BLESS=1 cargo test -p fencing-servers --test readme`"
    );
}
