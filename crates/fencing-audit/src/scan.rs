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

use crate::rules::{
    Category, CommentStyle, EVIDENCE, Evidence, Language, NOT_A_NAME, RULES, Role, Rule,
    STATEMENT_AFTER, STATEMENT_BEFORE, Scope, UNFENCED, WINDOW_AFTER, WINDOW_BEFORE, is_test_path,
    redis_client_definition,
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
}

fn line_regex(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(pattern).unicode(false).build()
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
        scan(root, self)
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
            lines: rules
                .iter()
                .map(|r| line_regex(r.pattern))
                .collect::<Result<_, _>>()?,
            needs: rules
                .iter()
                .map(|r| r.needs.map(line_regex).transpose())
                .collect::<Result<_, _>>()?,
            unless: rules
                .iter()
                .map(|r| r.unless.map(line_regex).transpose())
                .collect::<Result<_, _>>()?,
            redis_client: RegexBuilder::new(redis_client_definition(language))
                .unicode(false)
                .build()?,
            contexts: file_set(contexts.iter().copied())?,
            context_of,
            evidence_prefilter: file_set(evidence.iter().map(|e| e.pattern))?,
            evidence_lines: evidence
                .iter()
                .map(|e| line_regex(e.pattern))
                .collect::<Result<_, _>>()?,
            evidence,
            definition: line_regex(language.definition())?,
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
            let mut taken = [false; Category::ALL.len()];
            for &i in &active {
                let rule = self.rules[i];
                let slot = rule.category.index();
                if taken[slot] || (comment && rule.category != Category::Hint) {
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

/// Tells comment lines apart, line by line.
#[derive(Debug)]
struct CommentTracker {
    style: CommentStyle,
    /// The closing delimiter of the block comment (or docstring) the next
    /// line starts in.
    open: Option<&'static [u8]>,
    /// Python: whether the last code line ended with `:` (so a string opening
    /// the next line is a docstring), or there was no code yet.
    docstring_may_follow: bool,
}

impl CommentTracker {
    fn new(style: CommentStyle) -> CommentTracker {
        CommentTracker {
            style,
            open: None,
            docstring_may_follow: true,
        }
    }

    /// Whether `line` is (entirely, or starts as) a comment.
    fn is_comment(&mut self, line: &[u8]) -> bool {
        let t = line.trim_ascii();
        if let Some(close) = self.open {
            if contains(t, close) {
                self.open = None;
            }
            return true;
        }
        if t.is_empty() {
            return false;
        }
        match self.style {
            CommentStyle::Slash => {
                if t.starts_with(b"//") {
                    return true;
                }
                if let Some(rest) = t.strip_prefix(b"/*") {
                    if !contains(rest, b"*/") {
                        self.open = Some(b"*/");
                    }
                    return true;
                }
                false
            }
            CommentStyle::Hash => {
                if t.starts_with(b"#") {
                    return true;
                }
                let unprefixed = t
                    .strip_prefix(b"r")
                    .or_else(|| t.strip_prefix(b"u"))
                    .unwrap_or(t);
                let quote: Option<&'static [u8]> = if unprefixed.starts_with(b"\"\"\"") {
                    Some(b"\"\"\"")
                } else if unprefixed.starts_with(b"'''") {
                    Some(b"'''")
                } else {
                    None
                };
                if let (Some(q), true) = (quote, self.docstring_may_follow) {
                    if !contains(&unprefixed[3..], q) {
                        self.open = Some(q);
                    }
                    self.docstring_may_follow = false;
                    return true;
                }
                self.docstring_may_follow = t.ends_with(b":");
                false
            }
        }
    }
}

/// The lines (`from..to`) of the statement around line `at` (0-based): back
/// while the line before ends open (`(`, `,`, `{`, `[`) or this one continues
/// a chain (`.`), forward while brackets stay open, a line ends open or the
/// next line continues a chain; at most [`STATEMENT_BEFORE`] lines up and [`STATEMENT_AFTER`] down.
fn statement(lines: &[&[u8]], at: usize) -> (usize, usize) {
    let opens = |l: &[u8]| {
        l.trim_ascii_end()
            .last()
            .is_some_and(|b| b"(,{[".contains(b))
    };
    let chained = |l: &[u8]| l.trim_ascii_start().first() == Some(&b'.');
    let mut from = at;
    while from > 0
        && at - from < STATEMENT_BEFORE
        && (opens(lines[from - 1]) || chained(lines[from]))
    {
        from -= 1;
    }
    let mut depth: i64 = 0;
    let mut to = from;
    loop {
        for &b in lines[to] {
            match b {
                b'(' | b'{' | b'[' => depth += 1,
                b')' | b'}' | b']' => depth -= 1,
                _ => {}
            }
        }
        to += 1;
        let more = to < lines.len() && (depth > 0 || opens(lines[to - 1]) || chained(lines[to]));
        if !more || to >= at + 1 + STATEMENT_AFTER {
            break;
        }
    }
    (from, to.max(at + 1))
}

/// The first argument of the first call on `line` (after a Go `ctx`), e.g.
/// `"job"` in `r.setnx("job", me)`.
fn first_argument(line: &[u8]) -> Option<&[u8]> {
    static FIRST: OnceLock<Regex> = OnceLock::new();
    let re = FIRST.get_or_init(|| {
        line_regex(r"\(\s*(?:ctx\s*,\s*)?([^,()\s][^,()]*?)\s*[,)]").expect("compiles")
    });
    re.captures(line)
        .and_then(|c| c.get(1))
        .map(|m| m.as_bytes())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn char_column(line: &[u8], byte: usize) -> usize {
    String::from_utf8_lossy(&line[..byte]).chars().count() + 1
}

fn snippet(line: &[u8], start: usize) -> String {
    let text = String::from_utf8_lossy(line);
    let trimmed = text.trim();
    if trimmed.chars().count() <= SNIPPET_CHARS {
        return trimmed.to_owned();
    }
    // Cut around the match: a little before it, the rest after.
    let start_char = char_column(line, start) - 1;
    let from = start_char.saturating_sub(SNIPPET_CHARS / 4);
    let cut: String = text.chars().skip(from).take(SNIPPET_CHARS).collect();
    format!("…{}…", cut.trim())
}

/// What one file produced, for the collector.
enum Outcome {
    Findings(Vec<Finding>),
    /// A file that implements a Redis client's `SET` was read.
    RedisClient,
    Error(String),
}

fn relative(root: &Path, path: &Path) -> String {
    let rel = match path.strip_prefix(root) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel,
        _ => path.file_name().map_or(path, Path::new),
    };
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

fn skipped_dir(entry: &DirEntry) -> bool {
    entry.depth() > 0
        && entry.file_type().is_some_and(|t| t.is_dir())
        && entry
            .file_name()
            .to_str()
            .is_some_and(|n| SKIPPED_DIRS.contains(&n))
}

/// Reads a file, or says why it is skipped.
fn read_source(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    File::open(path)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut buf)?;
    let too_large = u64::try_from(buf.len()).map_or(true, |n| n > MAX_FILE_BYTES);
    let binary = buf[..buf.len().min(8192)].contains(&0);
    Ok((!too_large && !binary).then_some(buf))
}

/// Walks `root` (a directory or a single file) and matches every source file.
fn scan(root: &Path, matchers: &Auditor) -> Scan {
    let started = Instant::now();
    let scanned = AtomicU64::new(0);
    let skipped = AtomicU64::new(0);
    let bytes = AtomicU64::new(0);
    let (tx, rx) = mpsc::channel::<Outcome>();

    let mut builder = WalkBuilder::new(root);
    builder
        .hidden(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(true)
        .ignore(true)
        .parents(true)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| !skipped_dir(e));
    builder.build_parallel().run(|| {
        let tx = tx.clone();
        let (scanned, skipped, bytes) = (&scanned, &skipped, &bytes);
        Box::new(move |entry| {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    let _ = tx.send(Outcome::Error(e.to_string()));
                    return WalkState::Continue;
                }
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            let Some(language) = entry
                .file_name()
                .to_str()
                .and_then(Language::from_file_name)
            else {
                return WalkState::Continue;
            };
            let path = entry.path();
            let text = match read_source(path) {
                Ok(Some(text)) => text,
                Ok(None) => {
                    skipped.fetch_add(1, Ordering::Relaxed);
                    return WalkState::Continue;
                }
                Err(e) => {
                    let _ = tx.send(Outcome::Error(format!("{}: {e}", path.display())));
                    return WalkState::Continue;
                }
            };
            scanned.fetch_add(1, Ordering::Relaxed);
            bytes.fetch_add(
                u64::try_from(text.len()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
            let FileHits { hits, redis_client } = matchers.scan_text(language, &text);
            if redis_client {
                let _ = tx.send(Outcome::RedisClient);
            }
            if !hits.is_empty() {
                let file = relative(root, path);
                let shown = path.display().to_string();
                let findings = hits
                    .into_iter()
                    .map(|h| h.into_finding(&file, &shown, language))
                    .collect();
                let _ = tx.send(Outcome::Findings(findings));
            }
            WalkState::Continue
        })
    });
    drop(tx);

    let mut findings = Vec::new();
    let mut errors = Vec::new();
    let mut redis_client = false;
    for outcome in rx {
        match outcome {
            Outcome::Findings(f) => findings.extend(f),
            Outcome::RedisClient => redis_client = true,
            Outcome::Error(e) => errors.push(e),
        }
    }
    if redis_client {
        // A Redis client's tree: its tests of `SET … NX` test the client.
        findings.retain(|f| f.kind != REDIS_SET_NX || !is_test_path(&f.file));
    }
    findings.sort_by(|a, b| {
        (&a.file, a.line, a.column, a.category).cmp(&(&b.file, b.line, b.column, b.category))
    });
    errors.sort();
    Scan {
        findings,
        files_scanned: scanned.into_inner(),
        files_skipped: skipped.into_inner(),
        bytes_scanned: bytes.into_inner(),
        errors,
        elapsed: started.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static MATCHERS: std::sync::LazyLock<Auditor> = std::sync::LazyLock::new(Auditor::default);

    fn hits(language: Language, text: &str) -> Vec<Hit> {
        MATCHERS.scan_text(language, text.as_bytes()).hits
    }

    #[test]
    fn every_language_compiles() {
        for language in Language::ALL {
            LanguageMatcher::new(language).unwrap();
        }
    }

    fn summary(hits: &[Hit]) -> Vec<(usize, &'static str, Option<bool>)> {
        hits.iter()
            .map(|h| (h.line, h.rule.kind, h.fenced))
            .collect()
    }

    #[test]
    fn redis_set_nx_without_a_token_is_unfenced() {
        let src = "import redis\n\
                   r = redis.Redis()\n\
                   if r.set('job', me, nx=True, px=30000):\n\
                   \x20   db.execute('UPDATE report SET body = %s', (body,))\n";
        assert_eq!(
            summary(&hits(Language::Python, src)),
            [(3, "redis-set-nx", Some(false))]
        );
    }

    #[test]
    fn a_token_in_the_window_fences_the_lock_and_names_the_evidence() {
        let src = "ok = r.set('job', me, nx=True, px=30000)\n\
                   token = r.incr('job:fence')\n\
                   store.write('report', body, fencing_token=token)\n";
        let h = hits(Language::Python, src);
        assert_eq!(summary(&h), [(1, "redis-set-nx", Some(true))]);
        assert_eq!(h[0].evidence, Some((3, "a fencing token")));
        assert!(h[0].message().contains("fenced: a fencing token at line 3"));
    }

    #[test]
    fn evidence_outside_the_window_does_not_count() {
        let mut src = String::from("ok = r.set('job', me, nx=True, px=30000)\n");
        src.push_str(&"pass\n".repeat(WINDOW_AFTER + 1));
        src.push_str("store.write(k, v, fencing_token=t)\n");
        assert_eq!(
            summary(&hits(Language::Python, &src)),
            [(1, "redis-set-nx", Some(false))]
        );
    }

    #[test]
    fn file_scope_evidence_counts_anywhere() {
        let mut src = String::from("use fencing::FencedStore;\n");
        src.push_str(&"\n".repeat(300));
        src.push_str(
            "let ok = redis::cmd(\"SET\").arg(k).arg(v).arg(\"NX\").arg(\"PX\").arg(30_000);\n",
        );
        assert_eq!(
            summary(&hits(Language::Rust, &src)),
            [(302, "redis-set-nx", Some(true))]
        );
    }

    #[test]
    fn comments_are_neither_findings_nor_evidence_but_hints_are_read_there() {
        let src = "// r.set('job', me, nx=True) would be a lock\n\
                   /* SET lock me NX PX 30000\n\
                   \x20  still a comment: fencing_token */\n\
                   let ok = con.set_nx(\"job\", me)?; // only one process should write at a time\n\
                   con.expire(\"job\", 30)?;\n";
        assert_eq!(
            summary(&hits(Language::Rust, src)),
            [(4, "redis-set-nx", Some(false)), (4, "single-writer", None)]
        );
    }

    #[test]
    fn python_docstrings_are_comments_but_sql_strings_are_code() {
        let src = "def run(cur):\n\
                   \x20   \"\"\"Takes pg_advisory_lock(1) first.\"\"\"\n\
                   \x20   cur.execute(\n\
                   \x20       \"\"\"\n\
                   \x20       SELECT pg_advisory_lock(42)\n\
                   \x20       \"\"\"\n\
                   \x20   )\n";
        assert_eq!(
            summary(&hits(Language::Python, src)),
            [(5, "pg-advisory-lock", Some(false))]
        );
    }

    #[test]
    fn a_definition_is_a_mention_and_is_dropped_when_the_lock_is_also_taken() {
        let def_only = "import redis\ndef acquire_lock(name):\n    return r.get(name)\n";
        let h = hits(Language::Python, def_only);
        assert_eq!(summary(&h), [(2, "acquire-lock", None)]);
        assert!(h[0].message().contains("its definition"));
        let both = format!("{def_only}acquire_lock('job')\n");
        assert_eq!(
            summary(&hits(Language::Python, &both)),
            [(4, "acquire-lock", Some(false))]
        );
        // Control flow is not a definition.
        let js = "if (acquireLock('job')) {\n  db.update(row); // in redis\n}\n";
        assert_eq!(
            summary(&hits(Language::JavaScript, js)),
            [(1, "acquire-lock", Some(false))]
        );
    }

    #[test]
    fn generic_lock_calls_need_a_lock_service_in_the_file() {
        let local = "_imp.acquire_lock()\ntry:\n    pass\nfinally:\n    _imp.release_lock()\n";
        assert!(hits(Language::Python, local).is_empty());
        let licensed = format!("# distributed under the License on an AS IS BASIS\n{local}");
        assert!(hits(Language::Python, &licensed).is_empty());
        let remote = format!("# the lease lives in etcd\n{local}");
        assert_eq!(
            summary(&hits(Language::Python, &remote)),
            [(2, "acquire-lock", Some(false))]
        );
    }

    #[test]
    fn code_comparisons_are_not_sql_version_checks() {
        assert!(hits(Language::Python, "ok = a and ce.version == se.version\n").is_empty());
        let sql = "cur.execute('UPDATE t SET v = %s WHERE id = %s AND version = %s', args)\n";
        assert_eq!(
            summary(&hits(Language::Python, sql)),
            [(1, "version-check", None)]
        );
    }

    #[test]
    fn context_gates_generic_call_names() {
        let without = "m := rs.NewMutex(\"job\")\n";
        assert!(hits(Language::Go, without).is_empty());
        let with = format!("import \"github.com/go-redsync/redsync/v4\"\n{without}");
        assert_eq!(
            summary(&hits(Language::Go, &with)),
            [(2, "redsync", Some(false))]
        );
    }

    #[test]
    fn one_finding_per_line_and_category_in_table_order() {
        let src = "m, _ := concurrency.NewMutex(s, \"/job\") // clientv3/concurrency\n";
        assert_eq!(
            summary(&hits(Language::Go, src)),
            [(1, "etcd-lock", Some(false))]
        );
    }

    #[test]
    fn columns_count_characters_and_long_lines_are_cut() {
        let src = "/* é */ let ok = con.set_nx(\"job\", me)?;\n";
        // The line starts with a comment opener, so it is a comment.
        assert!(hits(Language::Rust, src).is_empty());
        let src = "let é = con.set_nx(\"job\", me)?; con.expire(\"job\", 30)?;\n";
        assert_eq!(hits(Language::Rust, src)[0].column, 13);
        let long = format!("x = {} r.set('k', v, nx=True, ex=9)", "a".repeat(500));
        let h = hits(Language::Python, &long);
        assert!(h[0].snippet.starts_with('…') && h[0].snippet.contains("nx=True"));
        assert!(h[0].snippet.chars().count() <= SNIPPET_CHARS + 2);
    }

    #[test]
    fn set_nx_without_an_expiry_is_not_a_lease() {
        // Python: a set-if-absent, other commands' NX, and the lease.
        let py = "import redis\n\
                  r.set('first-seen', now, nx=True)\n\
                  r.expire('k', 10, nx=True)\n\
                  r.zadd('z', {'a': 1}, nx=True)\n\
                  r.json().set('obj', Path('foo'), 'baz', nx=True)\n\
                  r.setnx('marker', 1)\n\
                  r.set(\n    'job',\n    me,\n    nx=True,\n    ex=30,\n)\n";
        assert_eq!(
            summary(&hits(Language::Python, py)),
            [(10, "redis-set-nx", Some(false))]
        );
        // SETNX followed by EXPIRE is the classic (racy) lease.
        let setnx = "if r.setnx('job', me):\n    r.expire('job', 30)\n";
        assert_eq!(
            summary(&hits(Language::Python, setnx)),
            [(1, "redis-set-nx", Some(false))]
        );
        // Go: the expiry is SetNX's last argument; 0 and KeepTTL mean none.
        let go = "ok, _ := c.SetNX(ctx, key, time.Now().Unix(), 0).Result()\n\
                  ok, _ = c.SetNX(ctx, key, v, redis.KeepTTL).Result()\n\
                  ok, _ = c.SetNX(ctx, key, v, 30*time.Second).Result()\n\
                  args := redis.SetArgs{Mode: \"NX\"}\n\
                  z := redis.ZAddArgs{NX: true}\n";
        assert_eq!(
            summary(&hits(Language::Go, go)),
            [(3, "redis-set-nx", Some(false))]
        );
        // Strings: the command needs EX/PX.
        let lua = "redis.call('SET', KEYS[1], ARGV[1], 'NX')\n\
                   redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])\n";
        assert_eq!(
            summary(&hits(Language::JavaScript, lua)),
            [(2, "redis-set-nx", Some(false))]
        );
    }

    #[test]
    fn declarations_and_constructors_are_definitions() {
        let go = "type Conn interface {\n\
                  \tSetNX(name string, value string, expiry time.Duration) (bool, error)\n}\n";
        assert!(hits(Language::Go, go).is_empty());
        let java = "public class LeaderLatch {\n\
                    \x20   public LeaderLatch(CuratorFramework client, String latchPath) {\n\
                    \x20       this(client, latchPath, \"\");\n\
                    \x20   }\n\
                    \x20   void start() { latch = new LeaderLatch(client, \"/x\"); }\n}\n";
        assert_eq!(
            summary(&hits(Language::Java, java)),
            [(5, "zookeeper-election", Some(false))]
        );
        let py = "from kazoo.client import KazooClient\n\
                  class Lock(object):\n    pass\n";
        assert_eq!(
            summary(&hits(Language::Python, py)),
            [(2, "zookeeper-lock", None)]
        );
    }

    #[test]
    fn a_redis_clients_own_set_code_is_not_a_lock_site() {
        let py = "class Commands:\n\
                  \x20   def set(self, name, value, ex=None, px=None, nx=False):\n\
                  \x20       pieces = [name, value]\n\
                  \x20       if ex: pieces += ['EX', ex]\n\
                  \x20       if nx: pieces.append('NX')\n\
                  \x20       return self.execute_command('SET', *pieces)\n\
                  \x20   def lock_like(self):\n\
                  \x20       return self.set('k', 'v', nx=True, ex=10)\n";
        assert!(hits(Language::Python, py).is_empty());
        assert!(
            MATCHERS
                .scan_text(Language::Python, py.as_bytes())
                .redis_client
        );
    }

    #[test]
    fn relative_paths_use_slashes_and_a_file_root_names_the_file() {
        assert_eq!(relative(Path::new("a"), Path::new("a/b/c.rs")), "b/c.rs");
        assert_eq!(relative(Path::new("a/c.rs"), Path::new("a/c.rs")), "c.rs");
    }
}
