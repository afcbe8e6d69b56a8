#![doc = include_str!("../README.md")]

mod report;
mod rules;
mod scan;
pub mod schema;

use std::path::Path;

pub use report::{ByCategory, JSON_VERSION, Report, Summary, summarize, write_text};
pub use rules::{Category, Language, UnknownCategory, is_test_path, kinds};
pub use scan::{Auditor, Finding, MAX_FILE_BYTES, SKIPPED_DIRS, Scan};

/// Scans `root` (a directory or a single file) with the built-in rules.
///
/// The same as `Auditor::new().scan(root)`; build an [`Auditor`] to scan
/// several trees with the rules compiled once.
pub fn scan(root: &Path) -> Scan {
    Auditor::new().scan(root)
}
