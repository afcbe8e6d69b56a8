//! The text and JSON reports.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::rules::Category;
use crate::scan::{Finding, Scan};

/// In the text report, mentions (not lock sites) of one kind in one file are
/// listed up to this many, then counted.
const MENTIONS_PER_FILE: usize = 3;

/// The version of the JSON schema (the report's `version` field); bumped
/// only for incompatible changes. Fields are only ever added within a version.
pub const JSON_VERSION: u32 = 1;

/// Counts; the JSON `summary` object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Summary {
    /// Source files read and matched.
    pub files_scanned: u64,
    /// Source files skipped as too large (over 2 MiB) or binary.
    pub files_skipped: u64,
    /// Entries that could not be read (listed on stderr).
    pub errors: usize,
    /// Findings reported (after `--category`).
    pub findings: usize,
    /// Findings per category.
    pub by_category: ByCategory,
    /// Findings that take a lock, lease or leadership (`fenced` not null).
    pub lock_sites: usize,
    /// Lock sites with a fencing token nearby.
    pub fenced: usize,
    /// Lock sites without one: these make the exit code 1.
    pub unfenced: usize,
}

/// Findings per category.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ByCategory {
    /// [`Category::Lock`]
    pub lock: usize,
    /// [`Category::Optimistic`]
    pub optimistic: usize,
    /// [`Category::Leader`]
    pub leader: usize,
    /// [`Category::Hint`]
    pub hint: usize,
}

impl ByCategory {
    /// The count of one category.
    pub fn get(&self, c: Category) -> usize {
        match c {
            Category::Lock => self.lock,
            Category::Optimistic => self.optimistic,
            Category::Leader => self.leader,
            Category::Hint => self.hint,
        }
    }

    fn bump(&mut self, c: Category) {
        match c {
            Category::Lock => self.lock += 1,
            Category::Optimistic => self.optimistic += 1,
            Category::Leader => self.leader += 1,
            Category::Hint => self.hint += 1,
        }
    }
}

/// Counts the findings of a scan.
pub fn summarize(scan: &Scan) -> Summary {
    let mut by_category = ByCategory::default();
    for f in &scan.findings {
        by_category.bump(f.category);
    }
    let count = |v: bool| scan.findings.iter().filter(|f| f.fenced == Some(v)).count();
    let (fenced, unfenced) = (count(true), count(false));
    Summary {
        files_scanned: scan.files_scanned,
        files_skipped: scan.files_skipped,
        errors: scan.errors.len(),
        findings: scan.findings.len(),
        by_category,
        lock_sites: fenced + unfenced,
        fenced,
        unfenced,
    }
}

/// The JSON report (`fence audit --json`): one document, described by
/// [`crate::schema::JSON_SCHEMA`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Report {
    /// [`JSON_VERSION`].
    pub version: u32,
    /// The scanned path, as given.
    pub root: String,
    /// Every finding, sorted by file, line, column and category.
    pub findings: Vec<Finding>,
    /// The counts.
    pub summary: Summary,
}

impl Report {
    /// The report of a scan of `root`.
    pub fn new(root: &Path, scan: &Scan) -> Report {
        Report {
            version: JSON_VERSION,
            root: root.display().to_string(),
            findings: scan.findings.clone(),
            summary: summarize(scan),
        }
    }

    /// Writes the report as JSON (pretty-printed, newline-terminated).
    pub fn write_json(&self, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, self)?;
        writeln!(out)
    }
}

fn label(f: &Finding) -> &'static str {
    match (f.fenced, f.category) {
        (Some(false), _) => "UNFENCED",
        (Some(true), _) => "fenced",
        (None, Category::Optimistic) => "check",
        (None, Category::Hint) => "hint",
        (None, _) => "usage",
    }
}

/// `kind ×n, other` in first-seen order.
fn tally(kinds: &[&str]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for kind in kinds {
        match counts.iter_mut().find(|(k, _)| k == kind) {
            Some((_, n)) => *n += 1,
            None => counts.push((kind, 1)),
        }
    }
    counts
        .iter()
        .map(|(k, n)| {
            if *n == 1 {
                (*k).to_owned()
            } else {
                format!("{k} ×{n}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Writes the human-readable report, findings grouped by category.
///
/// Lock sites (locks, leases and leaderships taken) are listed each, and a
/// site carries the count of the other mentions of lock libraries in its
/// file, which are its supporting evidence; mentions in files with no site
/// are counted at the end. Optimistic checks and hints are listed, past
/// three of one kind in one file counted. With `verbose`, every mention is
/// listed too. The JSON report has every finding either way.
pub fn write_text(
    out: &mut dyn Write,
    root: &Path,
    scan: &Scan,
    summary: &Summary,
    verbose: bool,
) -> io::Result<()> {
    writeln!(
        out,
        "fence audit: {} ({} scanned)\n",
        root.display(),
        plural(
            summary.files_scanned.try_into().unwrap_or(usize::MAX),
            "source file",
            "source files"
        ),
    )?;
    let mut unlisted = (0, std::collections::BTreeSet::new());
    for category in Category::ALL {
        let findings: Vec<&Finding> = scan
            .findings
            .iter()
            .filter(|f| f.category == category)
            .collect();
        let is_mention = |f: &Finding| {
            f.fenced.is_none() && matches!(category, Category::Lock | Category::Leader)
        };
        // Mentions per file, by kind, for the site that carries them.
        let mut mentions: HashMap<&str, Vec<&str>> = HashMap::new();
        for f in findings.iter().filter(|f| is_mention(f)) {
            mentions.entry(&f.file).or_default().push(&f.kind);
        }
        let site_files: std::collections::HashSet<&str> = findings
            .iter()
            .filter(|f| f.fenced.is_some())
            .map(|f| f.file.as_str())
            .collect();
        let listed: Vec<&Finding> = findings
            .iter()
            .copied()
            .filter(|f| {
                let hidden = is_mention(f) && !verbose;
                if hidden && !site_files.contains(f.file.as_str()) {
                    unlisted.0 += 1;
                    unlisted.1.insert(f.file.as_str());
                }
                !hidden
            })
            .collect();
        if listed.is_empty() {
            continue;
        }
        let sites = findings.iter().filter(|f| f.fenced.is_some()).count();
        let unfenced = findings.iter().filter(|f| f.fenced == Some(false)).count();
        if sites > 0 {
            writeln!(
                out,
                "{}: {} ({} unfenced)",
                category.title(),
                plural(sites, "lock site", "lock sites"),
                unfenced
            )?;
        } else {
            writeln!(out, "{}: {}", category.title(), listed.len())?;
        }
        // Generated clients repeat a header name hundreds of times in one
        // file: past a few, checks and hints of one kind in one file are
        // counted.
        let capped = |f: &Finding| f.fenced.is_none() && !is_mention(f);
        let mut totals: HashMap<(&str, &str), usize> = HashMap::new();
        for f in listed.iter().filter(|f| capped(f)) {
            *totals.entry((&f.file, &f.kind)).or_default() += 1;
        }
        let mut shown: HashMap<(&str, &str), usize> = HashMap::new();
        let mut folded: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for f in listed {
            let key = (f.file.as_str(), f.kind.as_str());
            if capped(f) {
                let n = shown.entry(key).or_default();
                *n += 1;
                if *n > MENTIONS_PER_FILE {
                    continue;
                }
            }
            writeln!(
                out,
                "  {:<9}{}:{}:{}  [{}]",
                label(f),
                f.shown,
                f.line,
                f.column,
                f.kind
            )?;
            writeln!(out, "           {}", f.snippet)?;
            writeln!(out, "           {}", f.message)?;
            if f.fenced.is_some()
                && !verbose
                && folded.insert(&f.file)
                && let Some(kinds) = mentions.get(f.file.as_str())
            {
                writeln!(
                    out,
                    "           + {} in this file ({}; --verbose lists them)",
                    plural(kinds.len(), "mention", "mentions"),
                    tally(kinds)
                )?;
            }
            let total = totals.get(&key).copied().unwrap_or(0);
            if capped(f) && shown[&key] == MENTIONS_PER_FILE && total > MENTIONS_PER_FILE {
                writeln!(
                    out,
                    "  {:<9}… and {} more [{}] in {} (all of them in --json)",
                    "",
                    total - MENTIONS_PER_FILE,
                    f.kind,
                    f.shown
                )?;
            }
        }
        writeln!(out)?;
    }
    if unlisted.0 > 0 {
        writeln!(
            out,
            "Lock libraries are also mentioned where no lock is taken: {} in {} (--verbose lists them).\n",
            plural(unlisted.0, "mention", "mentions"),
            plural(unlisted.1.len(), "file", "files"),
        )?;
    }
    if summary.findings == 0 {
        writeln!(
            out,
            "No distributed locks, leases, leader election or optimistic checks found.\n"
        )?;
    }
    let per_category = Category::ALL
        .iter()
        .map(|&c| format!("{} {}", summary.by_category.get(c), c.name()))
        .collect::<Vec<_>>()
        .join(", ");
    let secs = scan.elapsed.as_secs_f64();
    writeln!(
        out,
        "Summary: {} ({per_category}); {}, {} unfenced, {} fenced; {} ({:.1} MB) in {secs:.2}s{}{}.",
        plural(summary.findings, "finding", "findings"),
        plural(summary.lock_sites, "lock site", "lock sites"),
        summary.unfenced,
        summary.fenced,
        plural(
            summary.files_scanned.try_into().unwrap_or(usize::MAX),
            "file",
            "files"
        ),
        scan.bytes_scanned as f64 / 1e6,
        if summary.files_skipped > 0 {
            format!(" ({} skipped: too large or binary)", summary.files_skipped)
        } else {
            String::new()
        },
        if summary.errors > 0 {
            format!(
                ", {} unreadable (see stderr)",
                plural(summary.errors, "entry", "entries")
            )
        } else {
            String::new()
        },
    )
}
