//! Signs that a lock's writes carry a fencing token.

use super::Langs;
use super::language::{ALL, GO, RUST};

/// Where a piece of fencing evidence counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Within the lock's window: [`WINDOW_BEFORE`] lines above to
    /// [`WINDOW_AFTER`] lines below.
    Window,
    /// Anywhere in the file (a fenced-store type, the fencing crate).
    File,
}

/// Lines above a lock that count as its window.
pub(crate) const WINDOW_BEFORE: usize = 25;
/// Lines below a lock that count as its window.
pub(crate) const WINDOW_AFTER: usize = 100;

/// A sign that a lock's writes carry a fencing token.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Evidence {
    /// What it is, for the finding's message.
    pub(crate) name: &'static str,
    /// Languages it applies to.
    pub(crate) langs: Langs,
    /// Where it counts.
    pub(crate) scope: Scope,
    /// Matched against one (non-comment) line.
    pub(crate) pattern: &'static str,
}

const fn evidence(
    name: &'static str,
    langs: Langs,
    scope: Scope,
    pattern: &'static str,
) -> Evidence {
    Evidence {
        name,
        langs,
        scope,
        pattern,
    }
}

/// Evidence in every language that counts within a lock's window.
const fn window(name: &'static str, pattern: &'static str) -> Evidence {
    evidence(name, ALL, Scope::Window, pattern)
}

/// Signs of fencing-token use.
#[rustfmt::skip]
pub(crate) static EVIDENCE: &[Evidence] = &[
    window("a fencing token", r"(?i)fenc(?:e|ing)_?token"),
    window("a lock_token column", r"(?i)\block_token\b"),
    window("a token passed to a write",
        r"(?i)\b(?:write|put|save|update|insert|upsert|store|persist|commit|replace|set_?data)\w*\s*\(.*\btoken\b"),
    window("a fenced API", r"(?i)\bfence\s*\(|\w*fenced\w*\s*\("),
    window("If-Match", r"(?i)\bif[-_]?(?:none[-_]?)?match\b"),
    window("a generation precondition",
        r"(?i)\bif_?generation_?match\b|\bGenerationMatch\s*:"),
    window("a lock's fence", r"(?i)getfence\b|andgettoken\b|andgetfence\b"),
    evidence("a fenced lock or store", ALL, Scope::File, r"\b\w*Fenced(?:Lock|Store)\b"),
    window("an etcd create revision",
        r"(?i)\bcreate_?revision\b|\bHeader\(\)\.(?:Revision|GetRevision\(\))"),
    window("a ZooKeeper zxid", r"(?i)zxid|cversion"),
    evidence("a Consul lock index", GO, Scope::Window, r"\bLockIndex\b"),
    window("a Lease's transition count", r"(?i)\b(?:leader|lease)_?transitions\b"),
    window("a max-seen token", r"(?i)\bmax_?seen_?token\b"),
    evidence("the fencing crate", RUST, Scope::File, r"\bfencing(?:_\w+)?::|\buse\s+fencing\b"),
];

/// Why an unfenced lock is a risk, and the fix; appended to its message.
pub(crate) const UNFENCED: &str = "UNFENCED: no fencing token reaches the writes near this lock, so a holder paused past its lease (GC, VM freeze, network delay) can still write after another holder took over. Fix: send the lease's fencing token with every write and have the store refuse tokens lower than the highest it has accepted.";
