//! The pattern table: what `fence audit` looks for, as data.
//!
//! Each [`Rule`] names a language set, a category, a stable `kind` (the
//! JSON `kind` field), a role, a regular expression matched against one line
//! at a time, an optional file-level context (the file must also match it
//! somewhere, e.g. import the library) and a one-line message.
//!
//! Each [`Evidence`] is a sign of fencing-token use. A lock whose window (or
//! file, for [`Scope::File`] evidence) shows one is reported as fenced; a lock
//! with none is reported as **unfenced**. The list errs on the side of
//! "fenced": a false "unfenced" costs a reader's trust, a missed one costs
//! nothing that the scan was promising.
//!
//! Matching conventions (enforced by the scanner, not the patterns):
//! - lines that are comments are skipped by every rule except
//!   [`Category::Hint`] ones, and never count as evidence;
//! - on one line, only the first matching rule of each category (in table
//!   order) is reported, so specific rows come before generic ones;
//! - an [`Role::Acquire`] match on a function definition line (`fn`, `def`,
//!   `func`, `function`, a Java/Kotlin method) is downgraded to a mention;
//! - a mention is dropped when the same file has an acquisition of the same
//!   kind (the import of a library whose lock call was found says nothing new).

mod evidence;
mod language;
mod table;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub(crate) use evidence::{EVIDENCE, Evidence, Scope, UNFENCED, WINDOW_AFTER, WINDOW_BEFORE};
pub(crate) use language::{CommentStyle, Langs, NOT_A_NAME, redis_client_definition};
pub use language::{Language, is_test_path};
pub(crate) use table::RULES;

/// What a finding is about; the JSON `category` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Category {
    /// Distributed-lock usage: Redis, Redlock, etcd, ZooKeeper, Redisson,
    /// ShedLock, DynamoDB, advisory locks, home-grown ones.
    Lock,
    /// Optimistic-concurrency checks: version columns, `If-Match`, object
    /// store preconditions, token columns.
    Optimistic,
    /// Leader election and singleton-job guards.
    Leader,
    /// Language signals in comments and strings ("only one process should
    /// write at a time", "GC pause"): low-severity hints.
    Hint,
}

impl Category {
    /// Every category, in report order.
    pub const ALL: [Category; 4] = [
        Category::Lock,
        Category::Optimistic,
        Category::Leader,
        Category::Hint,
    ];

    /// Position in [`Category::ALL`].
    pub(crate) const fn index(self) -> usize {
        match self {
            Category::Lock => 0,
            Category::Optimistic => 1,
            Category::Leader => 2,
            Category::Hint => 3,
        }
    }

    /// The JSON name.
    pub const fn name(self) -> &'static str {
        match self {
            Category::Lock => "lock",
            Category::Optimistic => "optimistic",
            Category::Leader => "leader",
            Category::Hint => "hint",
        }
    }

    /// The heading in the text report.
    pub const fn title(self) -> &'static str {
        match self {
            Category::Lock => "Distributed locks",
            Category::Optimistic => "Optimistic concurrency checks",
            Category::Leader => "Leader election and singleton-job guards",
            Category::Hint => "Hints (language signals, low severity)",
        }
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of parsing a [`Category`] from a name it does not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownCategory(pub String);

impl fmt::Display for UnknownCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown category `{}` (expected one of: lock, optimistic, leader, hint)",
            self.0
        )
    }
}

impl std::error::Error for UnknownCategory {}

impl FromStr for Category {
    type Err = UnknownCategory;

    /// Parses the JSON name (`lock`, `optimistic`, `leader`, `hint`).
    fn from_str(s: &str) -> Result<Category, UnknownCategory> {
        Category::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| UnknownCategory(s.to_owned()))
    }
}

/// What a match means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// A lock, lease or leadership is taken (or created to be taken) here:
    /// the finding is checked for fencing (`fenced` is `true` or `false`).
    Acquire,
    /// A library import, a type, a check or a hint: reported, not checked
    /// (`fenced` is `null`).
    Mention,
}

/// One row of the pattern table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rule {
    /// The JSON `kind`: stable, kebab-case; several rows may share one.
    pub(crate) kind: &'static str,
    /// The JSON `category`.
    pub(crate) category: Category,
    /// Whether a match takes a lock (checked for fencing) or only mentions one.
    pub(crate) role: Role,
    /// Languages the row applies to.
    pub(crate) langs: Langs,
    /// Matched against one line (without its line terminator).
    pub(crate) pattern: &'static str,
    /// If set, the file must also match this somewhere (any line, comments
    /// included): the import that makes a generic call name specific.
    pub(crate) context: Option<&'static str>,
    /// What the finding is, in one line.
    pub(crate) message: &'static str,
    /// If set, the matched line must also match this (or, with `near`, one
    /// of [`STATEMENT_BEFORE`] lines above or [`STATEMENT_AFTER`] below, for
    /// a call spread over lines): e.g. the expiry that makes a `SET … NX` a
    /// lease.
    pub(crate) needs: Option<&'static str>,
    /// Whether `needs` may match near the line, not only on it.
    pub(crate) near: bool,
    /// Whether a `needs` line must name the matched call's first argument
    /// (the key: `SETNX k` then `EXPIRE k`, not another key's).
    pub(crate) same_key: bool,
    /// If set, a matched line that also matches this is not a finding (e.g.
    /// `SetNX(ctx, k, v, 0)`: no expiry).
    pub(crate) unless: Option<&'static str>,
}

/// Lines above a match searched for a rule's [`Rule::needs`].
pub(crate) const STATEMENT_BEFORE: usize = 2;
/// Lines below a match searched for a rule's [`Rule::needs`] (a call
/// spread over several lines, or `SETNX` then `EXPIRE`).
pub(crate) const STATEMENT_AFTER: usize = 4;

const fn rule(
    category: Category,
    role: Role,
    kind: &'static str,
    langs: Langs,
    pattern: &'static str,
    message: &'static str,
) -> Rule {
    Rule {
        kind,
        category,
        role,
        langs,
        pattern,
        context: None,
        message,
        needs: None,
        near: false,
        same_key: false,
        unless: None,
    }
}

/// An optimistic-concurrency check: always a mention.
const fn check(
    kind: &'static str,
    langs: Langs,
    pattern: &'static str,
    message: &'static str,
) -> Rule {
    rule(
        Category::Optimistic,
        Role::Mention,
        kind,
        langs,
        pattern,
        message,
    )
}

/// A language signal: a mention, in every language.
const fn hint(kind: &'static str, pattern: &'static str, message: &'static str) -> Rule {
    rule(
        Category::Hint,
        Role::Mention,
        kind,
        language::ALL,
        pattern,
        message,
    )
}

impl Rule {
    const fn within(mut self, context: &'static str) -> Rule {
        self.context = Some(context);
        self
    }

    const fn needs(mut self, needs: &'static str) -> Rule {
        self.needs = Some(needs);
        self
    }

    const fn needs_near(mut self, needs: &'static str) -> Rule {
        self.needs = Some(needs);
        self.near = true;
        self
    }

    const fn same_key(mut self) -> Rule {
        self.same_key = true;
        self
    }

    const fn unless(mut self, unless: &'static str) -> Rule {
        self.unless = Some(unless);
        self
    }
}

/// Every rule kind (the JSON `kind` values) with its category, in table
/// order, each once.
pub fn kinds() -> Vec<(Category, &'static str)> {
    let mut kinds: Vec<(Category, &'static str)> = Vec::new();
    for r in RULES {
        if !kinds.iter().any(|&(_, k)| k == r.kind) {
            kinds.push((r.category, r.kind));
        }
    }
    kinds
}

#[cfg(test)]
mod tests {
    use super::language::ALL;
    use super::*;

    #[test]
    fn every_pattern_compiles() {
        for r in RULES {
            regex::Regex::new(r.pattern).unwrap_or_else(|e| panic!("{}: {e}", r.kind));
            if let Some(c) = r.context {
                regex::Regex::new(c).unwrap_or_else(|e| panic!("{} context: {e}", r.kind));
            }
        }
        for e in EVIDENCE {
            regex::Regex::new(e.pattern).unwrap_or_else(|err| panic!("{}: {err}", e.name));
        }
        for l in Language::ALL {
            regex::Regex::new(l.definition()).unwrap();
        }
    }

    #[test]
    fn kinds_are_kebab_case_and_rows_apply_somewhere() {
        for r in RULES {
            assert!(
                r.kind
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{}",
                r.kind
            );
            assert!(r.langs.0 != 0 && r.langs.0 <= ALL.0, "{}", r.kind);
            assert!(!r.message.is_empty());
        }
    }

    #[test]
    fn a_kind_is_acquired_in_one_category_only() {
        for a in RULES {
            for b in RULES {
                if a.kind == b.kind {
                    assert_eq!(a.category, b.category, "{}", a.kind);
                }
            }
        }
    }
}
