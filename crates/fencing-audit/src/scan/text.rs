//! Line-level text helpers of the scan: comment tracking, the statement
//! around a match, call arguments, columns and snippets.

use std::sync::OnceLock;

use regex::bytes::Regex;

use super::{SNIPPET_CHARS, line_regex};
use crate::rules::{CommentStyle, STATEMENT_AFTER, STATEMENT_BEFORE};

/// Tells comment lines apart, line by line.
#[derive(Debug)]
pub(super) struct CommentTracker {
    style: CommentStyle,
    /// The closing delimiter of the block comment (or docstring) the next
    /// line starts in.
    open: Option<&'static [u8]>,
    /// Python: whether the last code line ended with `:` (so a string opening
    /// the next line is a docstring), or there was no code yet.
    docstring_may_follow: bool,
}

impl CommentTracker {
    pub(super) fn new(style: CommentStyle) -> CommentTracker {
        CommentTracker {
            style,
            open: None,
            docstring_may_follow: true,
        }
    }

    /// Whether `line` is (entirely, or starts as) a comment.
    pub(super) fn is_comment(&mut self, line: &[u8]) -> bool {
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
pub(super) fn statement(lines: &[&[u8]], at: usize) -> (usize, usize) {
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
pub(super) fn first_argument(line: &[u8]) -> Option<&[u8]> {
    static FIRST: OnceLock<Regex> = OnceLock::new();
    let re = FIRST.get_or_init(|| {
        line_regex(r"\(\s*(?:ctx\s*,\s*)?([^,()\s][^,()]*?)\s*[,)]").expect("compiles")
    });
    re.captures(line)
        .and_then(|c| c.get(1))
        .map(|m| m.as_bytes())
}

pub(super) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

pub(super) fn char_column(line: &[u8], byte: usize) -> usize {
    String::from_utf8_lossy(&line[..byte]).chars().count() + 1
}

pub(super) fn snippet(line: &[u8], start: usize) -> String {
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
