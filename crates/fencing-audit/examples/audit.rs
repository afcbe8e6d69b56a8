//! `cargo run -p fencing-audit --example audit -- PATH [--json]`: the scan
//! without the `fence` CLI (which adds `--category`, `--no-fail` and exit
//! codes).

use std::io::{self, Write};
use std::path::PathBuf;

fn main() -> io::Result<()> {
    let mut json = false;
    let mut root = PathBuf::from(".");
    for arg in std::env::args().skip(1) {
        if arg == "--json" {
            json = true;
        } else {
            root = PathBuf::from(arg);
        }
    }
    let scan = fencing_audit::scan(&root);
    let report = fencing_audit::Report::new(&root, &scan);
    let mut out = io::stdout().lock();
    if json {
        report.write_json(&mut out)?;
    } else {
        fencing_audit::write_text(&mut out, &root, &scan, &report.summary, false)?;
    }
    out.flush()
}
