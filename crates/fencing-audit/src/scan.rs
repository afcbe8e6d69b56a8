//! The walk, the matching and the unfenced check.
//!
//! Files are walked in parallel by the `ignore` crate (the walker behind
//! ripgrep): `.gitignore`, `.ignore` and git's excludes are honoured (also
//! outside a git repository), hidden entries are skipped, and so are the
//! directories in [`SKIPPED_DIRS`]. Only files of a known [`Language`] are
//! read; a file over [`MAX_FILE_BYTES`] or with a NUL byte in its first
//! 8 KiB is counted as skipped.
//!
//! Each language's rules are compiled once into a `RegexSet` that is run over
//! the whole file first; only the rules it reports are then run line by line.
//! Most files match nothing and cost one pass of one automaton. Matching is
//! byte-oriented and ASCII-only (`\w`, `\b` and `(?i)` are ASCII), which is
//! what source identifiers and keywords need and keeps the automata small.

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, mpsc};
use std::time::{Duration, Instant};

use ignore::{DirEntry, WalkBuilder, WalkState};
use regex::bytes::{Regex, RegexBuilder, RegexSet, RegexSetBuilder};
use serde::{Deserialize, Serialize};

mod text;
mod walk;

use self::text::*;
use crate::rules::{
    Category, EVIDENCE, Evidence, Language, NOT_A_NAME, RULES, Role, Rule, STATEMENT_AFTER, Scope,
    UNFENCED, WINDOW_AFTER, WINDOW_BEFORE, is_test_path, redis_client_definition,
};

/// Files larger than this are skipped (generated code, data, bundles).
pub const MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;

/// Directory names never descended into (build output, dependencies).
pub const SKIPPED_DIRS: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    "target",
    "node_modules",
    "bower_components",
    "vendor",
    "build",
    "dist",
    "out",
    ".gradle",
    "__pycache__",
    "site-packages",
    "venv",
    ".venv",
];

/// A snippet longer than this many characters is cut around the match.
const SNIPPET_CHARS: usize = 160;

/// One finding; one element of the JSON `findings` array (see
/// [`crate::schema`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Finding {
    /// The file, relative to the scanned root, with `/` separators (the file
    /// name when the root is a file).
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What it is about.
    pub category: Category,
    /// The rule's kind (see [`crate::kinds`]), e.g. `redis-set-nx`.
    pub kind: String,
    /// The file's language.
    pub language: Language,
    /// The matched line, trimmed (cut around the match if long).
    pub snippet: String,
    /// `Some(true/false)` for a lock, lease or leadership acquisition (was a
    /// fencing token found near it?); `None` (JSON `null`) for everything else.
    pub fenced: Option<bool>,
    /// What it is and, for an unfenced lock, the risk and the fix.
    pub message: String,
    /// The path as walked (the root joined with `file`), for the text report.
    #[serde(skip)]
    pub shown: String,
}

impl Finding {
    /// Whether this finding takes a lock, lease or leadership (it was checked
    /// for fencing).
    pub fn is_lock_site(&self) -> bool {
        self.fenced.is_some()
    }
}

/// The outcome of a scan.
#[derive(Debug)]
#[non_exhaustive]
pub struct Scan {
    /// Every finding, sorted by file, line, column and category.
    pub findings: Vec<Finding>,
    /// Source files read and matched.
    pub files_scanned: u64,
    /// Source files skipped as too large or binary.
    pub files_skipped: u64,
    /// Bytes of source matched.
    pub bytes_scanned: u64,
    /// Entries that could not be read (permission denied, broken link, bad
    /// ignore file), as messages.
    pub errors: Vec<String>,
    /// Wall-clock time of the walk.
    pub elapsed: Duration,
}

/// A match in one file, before it gets a path.
#[derive(Clone, Debug)]
pub(crate) struct Hit {
    pub(crate) line: usize,
    pub(crate) column: usize,
    pub(crate) rule: &'static Rule,
    pub(crate) role: Role,
    pub(crate) definition: bool,
    pub(crate) snippet: String,
    pub(crate) fenced: Option<bool>,
    /// The evidence that made it fenced: its line and what it is.
    pub(crate) evidence: Option<(usize, &'static str)>,
}

impl Hit {
    fn into_finding(self, file: &str, shown: &str, language: Language) -> Finding {
        Finding {
            file: file.to_owned(),
            line: self.line,
            column: self.column,
            category: self.rule.category,
            kind: self.rule.kind.to_owned(),
            language,
            message: self.message(),
            snippet: self.snippet,
            fenced: self.fenced,
            shown: shown.to_owned(),
        }
    }

    fn message(&self) -> String {
        match (self.fenced, self.evidence) {
            (Some(true), Some((line, what))) => {
                format!("{}; fenced: {what} at line {line}", self.rule.message)
            }
            (Some(false), _) => format!("{}. {UNFENCED}", self.rule.message),
            _ if self.definition => format!("{} (its definition)", self.rule.message),
            _ => self.rule.message.to_owned(),
        }
    }
}

/// The compiled rules for every language, each compiled on first use.
///
/// Build one and reuse it: compiling a language's rules takes a few
/// milliseconds.
#[derive(Debug, Default)]
pub struct Auditor {
    by_language: [OnceLock<LanguageMatcher>; Language::ALL.len()],
}

#[derive(Debug)]
struct LanguageMatcher {
    language: Language,
    rules: Vec<&'static Rule>,
    /// All of `rules`, over the whole file.
    prefilter: RegexSet,
    /// Each of `rules`, over one line.
    lines: Vec<Regex>,
    /// Each rule's `needs` and `unless`.
    needs: Vec<Option<Regex>>,
    unless: Vec<Option<Regex>>,
    /// A file that implements a Redis client (see
    /// [`redis_client_definition`]).
    redis_client: Regex,
    /// Distinct file-level contexts, and which one each rule needs.
    contexts: RegexSet,
    context_of: Vec<Option<usize>>,
    evidence: Vec<&'static Evidence>,
    evidence_prefilter: RegexSet,
    evidence_lines: Vec<Regex>,
    definition: Regex,
    import: Regex,
}

fn line_regex(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(pattern).unicode(false).build()
}

fn line_regexes<'a>(
    patterns: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<Regex>, regex::Error> {
    patterns.into_iter().map(line_regex).collect()
}

/// [`line_regexes`] for optional patterns (a rule's `needs`, `unless`).
fn optional_line_regexes<'a>(
    patterns: impl IntoIterator<Item = Option<&'a str>>,
) -> Result<Vec<Option<Regex>>, regex::Error> {
    patterns
        .into_iter()
        .map(|p| p.map(line_regex).transpose())
        .collect()
}

fn file_set<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Result<RegexSet, regex::Error> {
    RegexSetBuilder::new(patterns)
        .unicode(false)
        .multi_line(true)
        .size_limit(64 << 20)
        .dfa_size_limit(64 << 20)
        .build()
}

impl Auditor {
    /// An auditor with the built-in rules.
    pub fn new() -> Auditor {
        Auditor::default()
    }

    fn get(&self, language: Language) -> &LanguageMatcher {
        self.by_language[language.index()].get_or_init(|| {
            LanguageMatcher::new(language)
                .expect("the pattern table compiles (checked by every_language_compiles)")
        })
    }

    /// Matches one file's contents.
    fn scan_text(&self, language: Language, text: &[u8]) -> FileHits {
        self.get(language).scan(text)
    }

    /// Matches one source text of `language`; each finding's `file` (and
    /// `shown`) is `name`.
    pub fn scan_source(&self, name: &str, language: Language, text: &[u8]) -> Vec<Finding> {
        self.scan_text(language, text)
            .hits
            .into_iter()
            .map(|h| h.into_finding(name, name, language))
            .collect()
    }

    /// Walks `root` (a directory or a single file) and matches every source
    /// file: see the [crate docs](crate) for what is read and skipped.
    pub fn scan(&self, root: &Path) -> Scan {
        walk::scan(root, self)
    }
}

impl LanguageMatcher {
    fn new(language: Language) -> Result<LanguageMatcher, regex::Error> {
        let rules: Vec<&'static Rule> = RULES.iter().filter(|r| r.langs.has(language)).collect();
        let mut contexts: Vec<&'static str> = Vec::new();
        let context_of = rules
            .iter()
            .map(|r| {
                r.context.map(|c| {
                    contexts.iter().position(|&x| x == c).unwrap_or_else(|| {
                        contexts.push(c);
                        contexts.len() - 1
                    })
                })
            })
            .collect();
        let evidence: Vec<&'static Evidence> =
            EVIDENCE.iter().filter(|e| e.langs.has(language)).collect();
        Ok(LanguageMatcher {
            language,
            prefilter: file_set(rules.iter().map(|r| r.pattern))?,
            lines: line_regexes(rules.iter().map(|r| r.pattern))?,
            needs: optional_line_regexes(rules.iter().map(|r| r.needs))?,
            unless: optional_line_regexes(rules.iter().map(|r| r.unless))?,
            redis_client: RegexBuilder::new(redis_client_definition(language))
                .unicode(false)
                .build()?,
            contexts: file_set(contexts.iter().copied())?,
            context_of,
            evidence_prefilter: file_set(evidence.iter().map(|e| e.pattern))?,
            evidence_lines: line_regexes(evidence.iter().map(|e| e.pattern))?,
            evidence,
            definition: line_regex(language.definition())?,
            import: line_regex(language.import())?,
            rules,
        })
    }

    fn is_definition(&self, line: &[u8]) -> bool {
        self.definition.captures(line).is_some_and(|c| {
            c.iter()
                .skip(1)
                .flatten()
                .next()
                .is_some_and(|name| !NOT_A_NAME.iter().any(|k| k.as_bytes() == name.as_bytes()))
        })
    }

    /// Whether the rule matched at `number` (1-based) in `lines` also has
    /// what it needs nearby.
    fn statement_has(&self, rule: usize, lines: &[&[u8]], number: usize) -> bool {
        let Some(needs) = &self.needs[rule] else {
            return true;
        };
        let line = lines[number - 1];
        if !self.rules[rule].near {
            return needs.is_match(line);
        }
        let key = if self.rules[rule].same_key {
            match first_argument(line) {
                Some(key) => Some(key),
                None => return false,
            }
        } else {
            None
        };
        let (from, to) = if key.is_some() {
            // `SETNX k` then `EXPIRE k`: the expiry follows.
            (number - 1, (number + STATEMENT_AFTER).min(lines.len()))
        } else {
            statement(lines, number - 1)
        };
        lines[from..to]
            .iter()
            .any(|l| needs.is_match(l) && key.is_none_or(|k| contains(l, k)))
    }

    fn scan(&self, text: &[u8]) -> FileHits {
        let mut hits = self.scan_hits(text);
        let redis_client =
            hits.iter().any(|h| h.rule.kind == REDIS_SET_NX) && self.redis_client.is_match(text);
        if redis_client {
            // The client's own `SET … NX` code: not a lock.
            hits.retain(|h| h.rule.kind != REDIS_SET_NX);
        }
        FileHits {
            hits,
            redis_client: redis_client || self.redis_client.is_match(text),
        }
    }

    fn scan_hits(&self, text: &[u8]) -> Vec<Hit> {
        let candidates = self.prefilter.matches(text);
        if !candidates.matched_any() {
            return Vec::new();
        }
        let contexts = self.contexts.matches(text);
        let active: Vec<usize> = candidates
            .iter()
            .filter(|&i| self.context_of[i].is_none_or(|c| contexts.matched(c)))
            .collect();
        if active.is_empty() {
            return Vec::new();
        }
        let evidence_active: Vec<usize> = self.evidence_prefilter.matches(text).iter().collect();

        let mut hits = Vec::new();
        let mut window_evidence: Vec<(usize, &'static str)> = Vec::new();
        let mut file_evidence: Option<(usize, &'static str)> = None;
        let mut comments = CommentTracker::new(self.language.comments());
        let lines: Vec<&[u8]> = text
            .split(|&b| b == b'\n')
            .map(|raw| raw.strip_suffix(b"\r").unwrap_or(raw))
            .collect();
        for (index, &line) in lines.iter().enumerate() {
            let number = index + 1;
            let comment = comments.is_comment(line);
            // An import names a lock library; the file's uses of it are the
            // findings.
            let import = !comment && self.import.is_match(line);
            let mut taken = [false; Category::ALL.len()];
            for &i in &active {
                let rule = self.rules[i];
                let slot = rule.category.index();
                if taken[slot] || import || (comment && rule.category != Category::Hint) {
                    continue;
                }
                if let Some(m) = self.lines[i].find(line) {
                    if self.unless[i].as_ref().is_some_and(|u| u.is_match(line))
                        || !self.statement_has(i, &lines, number)
                    {
                        // Not this rule; a later one may still apply.
                        continue;
                    }
                    taken[slot] = true;
                    let definition = rule.role == Role::Acquire && self.is_definition(line);
                    hits.push(Hit {
                        line: number,
                        column: char_column(line, m.start()),
                        rule,
                        role: if definition { Role::Mention } else { rule.role },
                        definition,
                        snippet: snippet(line, m.start()),
                        fenced: None,
                        evidence: None,
                    });
                }
            }
            if !comment {
                for &e in &evidence_active {
                    if self.evidence_lines[e].is_match(line) {
                        let found = (number, self.evidence[e].name);
                        match self.evidence[e].scope {
                            Scope::Window => window_evidence.push(found),
                            Scope::File => {
                                file_evidence.get_or_insert(found);
                            }
                        }
                    }
                }
            }
        }

        // A mention says nothing new where the same kind was acquired.
        let acquired: HashSet<&str> = hits
            .iter()
            .filter(|h| h.role == Role::Acquire)
            .map(|h| h.rule.kind)
            .collect();
        hits.retain(|h| h.role == Role::Acquire || !acquired.contains(h.rule.kind));

        for hit in hits.iter_mut().filter(|h| h.role == Role::Acquire) {
            // Name the first evidence at or after the lock (the guarded write
            // comes after it), else the closest one above it.
            let mut window = window_evidence
                .iter()
                .filter(|(l, _)| *l + WINDOW_BEFORE >= hit.line && *l <= hit.line + WINDOW_AFTER);
            let after = window.clone().find(|(l, _)| *l >= hit.line);
            let near = after.or_else(|| window.next_back()).copied();
            hit.evidence = near.or(file_evidence);
            hit.fenced = Some(hit.evidence.is_some());
        }
        hits
    }
}

/// The kind whose matches in a Redis client's own code and tests are not
/// lock sites.
const REDIS_SET_NX: &str = "redis-set-nx";

/// What one file produced.
#[derive(Debug)]
struct FileHits {
    hits: Vec<Hit>,
    /// The file implements a Redis client's `SET`.
    redis_client: bool,
}

#[cfg(test)]
mod tests;
