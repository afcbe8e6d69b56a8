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

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

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

/// A source language the scan understands; the JSON `language` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// `.rs`
    Rust,
    /// `.go`
    Go,
    /// `.java`
    Java,
    /// `.kt`, `.kts`
    Kotlin,
    /// `.py`, `.pyw`
    Python,
    /// `.js`, `.mjs`, `.cjs`, `.jsx` (not `.min.js`)
    JavaScript,
    /// `.ts`, `.tsx`, `.mts`, `.cts` (not `.d.ts`)
    TypeScript,
}

impl Language {
    /// Every language.
    pub const ALL: [Language; 7] = [
        Language::Rust,
        Language::Go,
        Language::Java,
        Language::Kotlin,
        Language::Python,
        Language::JavaScript,
        Language::TypeScript,
    ];

    /// Position in [`Language::ALL`].
    pub(crate) const fn index(self) -> usize {
        match self {
            Language::Rust => 0,
            Language::Go => 1,
            Language::Java => 2,
            Language::Kotlin => 3,
            Language::Python => 4,
            Language::JavaScript => 5,
            Language::TypeScript => 6,
        }
    }

    const fn bit(self) -> u8 {
        match self {
            Language::Rust => RUST.0,
            Language::Go => GO.0,
            Language::Java => JAVA.0,
            Language::Kotlin => KOTLIN.0,
            Language::Python => PYTHON.0,
            Language::JavaScript => JS.0,
            Language::TypeScript => TS.0,
        }
    }

    /// The JSON name.
    pub const fn name(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Go => "go",
            Language::Java => "java",
            Language::Kotlin => "kotlin",
            Language::Python => "python",
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
        }
    }

    /// The language of a file, from its name; `None` for files the scan
    /// skips (other languages, minified bundles, TypeScript declarations).
    pub fn from_file_name(name: &str) -> Option<Language> {
        let lower = name.to_ascii_lowercase();
        if lower.ends_with(".min.js") || lower.ends_with(".d.ts") {
            return None;
        }
        let ext = lower.rsplit_once('.')?.1;
        Some(match ext {
            "rs" => Language::Rust,
            "go" => Language::Go,
            "java" => Language::Java,
            "kt" | "kts" => Language::Kotlin,
            "py" | "pyw" => Language::Python,
            "js" | "mjs" | "cjs" | "jsx" => Language::JavaScript,
            "ts" | "tsx" | "mts" | "cts" => Language::TypeScript,
            _ => return None,
        })
    }

    /// How comments look, for skipping them.
    pub(crate) const fn comments(self) -> CommentStyle {
        match self {
            Language::Python => CommentStyle::Hash,
            _ => CommentStyle::Slash,
        }
    }

    /// A line that defines a function or method (an `Acquire` match there is
    /// the lock's implementation, not a use of it). The name is group 1,
    /// checked against [`NOT_A_NAME`].
    pub(crate) const fn definition(self) -> &'static str {
        match self {
            Language::Rust => {
                r#"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:(?:const|async|unsafe|extern\s+"[^"]*")\s+)*fn\s+(\w+)"#
            }
            // A func, or an interface method (`Name(arg Type, …) Result`).
            Language::Go => r"^\s*func\s+(?:\([^)]*\)\s*)?(\w+)|^\s*(\w+)\s*\(\s*\w+\s+[\w.*\[]",
            Language::Python => r"^\s*(?:async\s+)?def\s+(\w+)|^\s*class\s+(\w+)",
            Language::Kotlin => {
                r"^\s*(?:(?:public|private|protected|internal|open|override|suspend|inline|final|abstract|operator)\s+)*fun\s+(?:<[^>]*>\s*)?(?:[\w.]+\.)?(\w+)"
            }
            // A method, or a constructor (a capitalised name opening a line
            // without `new`).
            Language::Java => {
                r"^\s*(?:(?:public|private|protected|static|final|synchronized|abstract|default|native)\s+)+[\w<>\[\],.?\s]+?\s+(\w+)\s*\([^;]*$|^\s*(?:(?:public|private|protected)\s+)?([A-Z]\w*)\s*\([^;]*$"
            }
            // A function, a method, or a TypeScript signature
            // (`name(key: Type, …): Result;`).
            Language::JavaScript | Language::TypeScript => {
                r"^\s*(\w+)\s*\(\s*\w+\??\s*:\s*\w|^\s*(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*(\w+)|^\s*(?:(?:public|private|protected|static|async|override|readonly)\s+)*(\w+)\s*\([^)]*\)\s*(?::\s*[^{;=]+)?\{\s*$"
            }
        }
    }
}

/// Words that look like a method name to the JavaScript/Java definition
/// patterns but are control flow (`if (acquireLock(...)) {`).
pub(crate) const NOT_A_NAME: &[&str] = &[
    "if",
    "for",
    "while",
    "switch",
    "catch",
    "return",
    "await",
    "new",
    "else",
    "do",
    "try",
    "synchronized",
    "function",
    "with",
];

/// How a language writes comments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommentStyle {
    /// `//` and `/* … */` (Rust, Go, Java, Kotlin, JavaScript, TypeScript).
    Slash,
    /// `#`, and docstrings (a triple-quoted string opening a line right after a
    /// `def`/`class` line or at the top of the module).
    Hash,
}

/// A set of languages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Langs(u8);

impl Langs {
    /// Whether `language` is in the set.
    pub(crate) const fn has(self, language: Language) -> bool {
        self.0 & language.bit() != 0
    }

    const fn or(self, other: Langs) -> Langs {
        Langs(self.0 | other.0)
    }
}

const RUST: Langs = Langs(1);
const GO: Langs = Langs(1 << 1);
const JAVA: Langs = Langs(1 << 2);
const KOTLIN: Langs = Langs(1 << 3);
const PYTHON: Langs = Langs(1 << 4);
const JS: Langs = Langs(1 << 5);
const TS: Langs = Langs(1 << 6);
const JVM: Langs = JAVA.or(KOTLIN);
const JS_TS: Langs = JS.or(TS);
const ALL: Langs = Langs(0x7f);

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

use Category::{Hint, Leader, Lock, Optimistic};
use Role::{Acquire, Mention};

/// The pattern table, in priority order within each category.
#[rustfmt::skip]
pub(crate) static RULES: &[Rule] = &[
    // ---- Distributed locks -------------------------------------------------
    // Redis SET NX, in every client's spelling. A lease only when it expires:
    // `SET k v NX` with no EX/PX (or SETNX with no EXPIRE after it) is a
    // set-if-absent that nobody can outlive, not a lock.
    rule(Lock, Acquire, "redis-set-nx", ALL, r#"(?i)["'`]SET\s[^"'`]*\bNX\b"#, SET_NX)
        .needs(r#"(?i)\b(?:PX|EX|PXAT|EXAT)\b"#),
    rule(Lock, Acquire, "redis-set-nx", ALL, r#"(?i)["']set["']\s*[,)].*["']nx["']"#, SET_NX)
        .needs(EXPIRY_WORD),
    rule(Lock, Acquire, "redis-set-nx", ALL, r#"(?i)\.set\s*\(.*["']nx["']"#, SET_NX)
        .needs(EXPIRY_WORD),
    rule(Lock, Acquire, "redis-set-nx", GO, r"\.SetNX\s*\(", SETNX)
        // The expiry is the last argument; 0 or KeepTTL (on a key that does
        // not exist) means none.
        .unless(r"\bSetNX\s*\((?:[^,()]|\([^()]*\))*(?:,(?:[^,()]|\([^()]*\))*){2},\s*(?:0|redis\.KeepTTL)\s*\)"),
    rule(Lock, Acquire, "redis-set-nx", ALL, r"(?i)\bset_?nx\s*\(", SETNX)
        .needs_near(r"(?i)\bp?expire(?:at)?\s*\(|\.arg\(\s*\w*(?:ttl|expir)|['\x22]p?expire['\x22]")
        .same_key(),
    rule(Lock, Acquire, "redis-set-nx", ALL, r"(?i)\bnx\s*[:=]\s*true\b", SET_NX)
        .needs_near(r"(?i)\b(?:px|ex|pxat|exat|ttl|expiration)\s*[:=]"),
    rule(Lock, Acquire, "redis-set-nx", ALL, r#"(?i)\.arg\(\s*"nx"\s*\)|\bExistenceCheck::NX\b"#, SET_NX)
        .needs_near(r#"(?i)"(?:px|ex|pxat|exat)"|\bSetExpiry::"#),
    rule(Lock, Acquire, "redis-set-nx", ALL, r#"(?i)\bmode\s*:\s*"nx""#, SET_NX)
        .needs_near(r"\b(?:TTL|ExpireAt)\s*:"),
    rule(Lock, Acquire, "redis-set-nx", JVM, r"\.nx\(\)|\.setIfAbsent\s*\(", SET_NX)
        .needs_near(r"(?i)\.(?:px|ex|pxAt|exAt)\s*\(|\bDuration\b|\bTimeUnit\.|\bexpire\s*\("),
    // Redlock and other Redis lock libraries.
    rule(Lock, Acquire, "redlock", RUST.or(PYTHON).or(JS_TS),
        r#"\.lock\s*\(\s*[bfr]?["'`]|\.(?:acquire|using)\s*\(\s*\[|\bRedlock\s*\(\s*key\s*="#,
        "Redlock lease (several Redis nodes; still no fencing token)")
        .within(r"(?i)redlock|rslock"),
    rule(Lock, Mention, "redlock", ALL, r"\bnew\s+Redlock\s*\(|\bimport\s+Redlock\b|\bRedlock\s*=\s*require\(",
        "Redlock library (a lease over several Redis nodes)"),
    rule(Lock, Acquire, "redisson-lock", JVM, r"\bRedisson(?:Red|Multi)Lock\s*\(",
        "Redisson RedLock/MultiLock (a Redis lease with no fencing token)"),
    rule(Lock, Acquire, "redisson-lock", JVM, r"\.get(?:Fair|Spin|ReadWrite|Fenced)?Lock\s*\(",
        "Redisson lock (a Redis lease; only RFencedLock issues a token)")
        .within(r"(?i)redisson"),
    rule(Lock, Acquire, "hazelcast-lock", JVM, r"\b(?:getCPSubsystem\s*\(\s*\)|cpSubsystem)\s*\.getLock\s*\(",
        "Hazelcast CP lock (a FencedLock: its fence is the token, if it is used)"),
    rule(Lock, Acquire, "hazelcast-lock", JVM, r"\.getLock\s*\(",
        "Hazelcast lock (only the CP FencedLock's fence is a token)")
        .within(r"(?i)\bhazelcast\b"),
    rule(Lock, Acquire, "redsync", GO, r"\.NewMutex\s*\(",
        "redsync mutex (Redlock in Go: a Redis lease with no fencing token)")
        .within(r"go-redsync/redsync"),
    rule(Lock, Mention, "redsync", GO, r"go-redsync/redsync", "redsync (Redis locks for Go)"),
    rule(Lock, Acquire, "redis-lock", GO, r"\.Obtain\s*\(",
        "redislock lease (Redis; no fencing token)")
        .within(r"bsm/redislock"),
    rule(Lock, Acquire, "redis-lock", JS_TS, r"\bnew\s+(?:Redlock)?(?:Mutex|Semaphore)\s*\(",
        "redis-semaphore lock (Redis; no fencing token)")
        .within(r"redis-semaphore"),
    rule(Lock, Acquire, "redis-lock", PYTHON, r"\bredis_lock\.Lock\s*\(",
        "python-redis-lock (Redis; no fencing token)"),
    // etcd.
    rule(Lock, Acquire, "etcd-lock", GO, r"\bconcurrency\.New(?:Mutex|Locker)\s*\(",
        "etcd concurrency mutex (a lease; its key's create revision is the fencing token)"),
    rule(Lock, Mention, "etcd-lock", GO, r"clientv3/concurrency|client/v3/concurrency",
        "etcd concurrency package (mutexes and elections on leases)"),
    rule(Lock, Acquire, "etcd-lock", RUST, r"\.lock\s*\(\s*[^)\s]",
        "etcd lock (a lease; the lock key's create revision is the fencing token)")
        .within(r"etcd_client|etcd-client"),
    rule(Lock, Acquire, "etcd-lock", PYTHON.or(JS_TS), r#"\.lock\s*\(\s*[bfr]?["'`]"#,
        "etcd3 lock (a lease; the lock key's create revision is the fencing token)")
        .within(r"\betcd3\b"),
    rule(Lock, Acquire, "etcd-lock", JVM, r"\.lock\s*\(\s*[^)\s]",
        "jetcd lock (a lease; the lock key's create revision is the fencing token)")
        .within(r"io\.etcd\.jetcd"),
    // ZooKeeper.
    rule(Lock, Acquire, "zookeeper-lock", JVM,
        r"\bInterProcess(?:Semaphore)?Mutex\s*\(|\bInterProcess(?:ReadWrite|Multi)Lock\s*\(|\bInterProcessSemaphoreV2\s*\(",
        "Curator ZooKeeper lock (a session lease; the lock node's czxid is the fencing token)"),
    rule(Lock, Mention, "zookeeper-lock", JVM, r"curator\.framework\.recipes\.locks",
        "Curator lock recipes"),
    rule(Lock, Acquire, "zookeeper-lock", PYTHON,
        r"\b(?:Lock|WriteLock|ReadLock|Semaphore)\s*\(\s*[^)\s]",
        "kazoo ZooKeeper lock (a session lease; the lock node's czxid is the fencing token)")
        .within(r"\bkazoo\b"),
    rule(Lock, Mention, "zookeeper-lock", PYTHON, r"\bkazoo\.recipe\.lock\b", "kazoo lock recipe"),
    rule(Lock, Acquire, "zookeeper-lock", GO, r"\bzk\.NewLock\s*\(",
        "go-zookeeper lock (a session lease; the lock node's czxid is the fencing token)"),
    rule(Lock, Acquire, "zookeeper-lock", RUST, r"\.lock\s*\(\s*[^)\s]",
        "ZooKeeper lock (a session lease; the lock node's czxid is the fencing token)")
        .within(r"zookeeper_client|zookeeper-client"),
    rule(Lock, Acquire, "redis-lock", PYTHON, r#"\.lock\s*\(\s*[bfr]?["']"#,
        "redis-py lock (SET NX PX underneath; no fencing token)")
        .within(r"(?m)^\s*(?:import\s+redis\b|from\s+redis\b)|\baioredis\b"),
    // Consul.
    rule(Lock, Acquire, "consul-lock", GO, r"\.Lock(?:Key|Opts)\s*\(",
        "Consul lock (a session lease; its LockIndex can serve as the fencing token)")
        .within(r"hashicorp/consul/api"),
    // ShedLock, Spring Integration, DynamoDB, tooz.
    rule(Lock, Acquire, "shedlock", JVM, r"@SchedulerLock\b|\.executeWithLock\s*\(",
        "ShedLock job lock (a TTL lease; a paused run overlaps the next)"),
    rule(Lock, Mention, "shedlock", JVM, r"@EnableSchedulerLock\b|\bnet\.javacrumbs\.shedlock\b",
        "ShedLock"),
    rule(Lock, Acquire, "spring-lock-registry", JVM, r"\.obtain\s*\(",
        "Spring Integration LockRegistry lock (a lease with no fencing token)")
        .within(r"\b\w*LockRegistry\b"),
    rule(Lock, Mention, "spring-lock-registry", JVM, r"\b(?:Redis|Jdbc|Zookeeper)LockRegistry\b",
        "Spring Integration LockRegistry"),
    rule(Lock, Acquire, "dynamodb-lock", ALL, r"\.(?:acquire_lock|AcquireLock|acquireLock|tryAcquireLock)\s*\(",
        "DynamoDB lock client lease (no fencing token)")
        .within(r"(?i)dynamo\w*lock"),
    rule(Lock, Mention, "dynamodb-lock", ALL, r"\bAmazonDynamoDBLockClient\b|\bpython_dynamodb_lock\b|cirello\.io/dynamolock",
        "DynamoDB lock client"),
    rule(Lock, Acquire, "tooz-lock", PYTHON, r"\.get_lock\s*\(", "tooz coordination lock")
        .within(r"\btooz\b"),
    // Database locks held across a session.
    rule(Lock, Acquire, "pg-advisory-lock", ALL, r"(?i)\bpg_(?:try_)?advisory_lock(?:_shared)?\s*\(",
        "PostgreSQL session advisory lock (released if the session drops; writes elsewhere are unprotected)"),
    rule(Lock, Mention, "pg-advisory-xact-lock", ALL, r"(?i)\bpg_(?:try_)?advisory_xact_lock(?:_shared)?\s*\(",
        "PostgreSQL transaction advisory lock (safe for writes in the same transaction; writes elsewhere need a token)"),
    rule(Lock, Acquire, "mysql-get-lock", ALL, r"\bGET_LOCK\s*\(|(?i)\bselect\s+get_lock\s*\(",
        "MySQL named lock (released if the session drops; writes elsewhere are unprotected)"),
    // Home-grown.
    rule(Lock, Acquire, "distributed-lock", ALL, r"(?i)\b\w*distributed\w*(?:lock|mutex)\w*\s*\(",
        "home-grown distributed lock"),
    rule(Lock, Acquire, "acquire-lock", ALL,
        r"\b(?:acquire_lock|acquireLock|AcquireLock|try_acquire_lock|tryAcquireLock|TryAcquireLock|obtain_lock|obtainLock|ObtainLock)\s*\(",
        "lock acquisition in a file that talks to a lock service")
        // Code words only: "distributed" alone is in every Apache license header.
        .within(r"(?i)redis|etcd|zookeeper|kazoo|curator|consul|dynamo\w*lock|advisory_lock|leader_?elect|distributed[_ ]?(?:lock|mutex)|\blease_?(?:id|ttl|duration|timeout|seconds)\b"),
    rule(Lock, Mention, "distributed-lock", ALL, r"(?i)\b\w*distributed\w*(?:lock|mutex)\w*",
        "home-grown distributed lock"),
    // ---- Optimistic concurrency -------------------------------------------
    rule(Optimistic, Mention, "token-column", ALL,
        r"(?i)\b(?:lock|fencing|fence)_token\s*(?:<=?|>=?|=\s*(?:\?|\$\d|:\w|@\w|excluded\.|%s)|\s(?:BIGINT|INTEGER|INT|NUMERIC)\b)",
        "fencing-token column checked by the store"),
    rule(Optimistic, Mention, "version-check", ALL,
        r"(?i)\b(?:where|and)\s+(?:\w+\.)?(?:version|row_?version|revision|lock_?version)\s*=\s*(?:\?|\$\d|:\w|@\w|%s|%\(\w+\)s|\{\w*\}|excluded\.|\d+\b)",
        "version-column check (compare-and-set)"),
    rule(Optimistic, Mention, "version-check", ALL, r"(?i)\bversion\s*=\s*(?:\w+\.)?version\s*\+\s*1\b",
        "version-column bump (compare-and-set)"),
    rule(Optimistic, Mention, "version-check", JVM, r"@(?:\w+\.)*Version\b|@OptimisticLock\w*|\bLockModeType\.OPTIMISTIC\w*",
        "JPA optimistic locking (@Version)"),
    rule(Optimistic, Mention, "version-check", PYTHON, r"\bversion_id_col\b|\b\w*VersionField\b",
        "ORM version column"),
    rule(Optimistic, Mention, "version-check", JS_TS, r"@VersionColumn\b|\boptimisticConcurrency\s*:\s*true",
        "ORM version column"),
    rule(Optimistic, Mention, "if-match", ALL, r"(?i)\bif[-_]?(?:none[-_]?)?match\b",
        "conditional write (If-Match / If-None-Match)"),
    rule(Optimistic, Mention, "gcs-precondition", ALL,
        r"(?i)\bif_?(?:meta)?generation_?(?:not_?)?match\b|\bGenerationMatch\s*:",
        "GCS precondition (ifGenerationMatch)"),
    rule(Optimistic, Mention, "etag-condition", ALL,
        r"\bmatch_condition\s*=|\bMatchConditions\.\w+|\bETagCondition\b|\bBlob(?:Request|Access)Conditions\b",
        "ETag condition on a write"),
    rule(Optimistic, Mention, "conditional-write", ALL, r"\bConditionExpression\b|\.condition_expression\s*\(|\.conditionExpression\s*\(|\battribute_not_exists\s*\(",
        "DynamoDB conditional write"),
    rule(Optimistic, Mention, "etcd-revision-compare", GO, r"\bclientv3\.(?:Mod|Create)Revision\s*\(",
        "etcd transaction comparing a revision"),
    rule(Optimistic, Mention, "etcd-revision-compare", RUST, r"\bCompare::(?:mod|create)_revision\s*\(",
        "etcd transaction comparing a revision"),
    rule(Optimistic, Mention, "etcd-revision-compare", JVM, r"\bCmpTarget\.(?:mod|create)Revision\s*\(",
        "etcd transaction comparing a revision"),
    // ---- Leader election and singleton jobs ------------------------------
    rule(Leader, Acquire, "k8s-leader-election", GO, r"\bleaderelection\.(?:RunOrDie|NewLeaderElector)\s*\(",
        "Kubernetes leader election (a Lease with a TTL; no fencing token reaches the writes)"),
    rule(Leader, Acquire, "k8s-leader-election", GO, r"\bLeaderElection\s*:\s*true\b",
        "controller-runtime leader election (a Lease with a TTL)"),
    rule(Leader, Mention, "k8s-leader-election", GO, r"client-go/tools/leaderelection",
        "Kubernetes leader election package"),
    rule(Leader, Mention, "k8s-lease", GO, r"\bresourcelock\.(?:LeaseLock|New)\b|\bcoordinationv1\.Lease\b",
        "Kubernetes Lease object"),
    rule(Leader, Acquire, "k8s-leader-election", PYTHON, r"\bleaderelection\.LeaderElection\s*\(",
        "Kubernetes leader election (a Lease with a TTL)"),
    rule(Leader, Acquire, "k8s-leader-election", JVM, r"\bLeaderElector\s*\(|\.leaderElector\s*\(",
        "Kubernetes leader election (a Lease with a TTL)"),
    rule(Leader, Acquire, "k8s-leader-election", RUST, r"\bLease(?:Lock|Manager)::new\s*\(",
        "Kubernetes leader election (a Lease with a TTL)")
        .within(r"(?i)kube"),
    rule(Leader, Acquire, "etcd-election", GO, r"\bconcurrency\.NewElection\s*\(",
        "etcd election (a lease; the leader key's create revision is the fencing token)"),
    rule(Leader, Acquire, "etcd-election", RUST, r"\.campaign\s*\(",
        "etcd election (a lease; the leader key's create revision is the fencing token)")
        .within(r"etcd_client|etcd-client"),
    rule(Leader, Acquire, "etcd-election", JS_TS, r#"\.election\s*\(\s*["'`]"#,
        "etcd election (a lease; the leader key's create revision is the fencing token)")
        .within(r"\betcd3\b"),
    rule(Leader, Acquire, "etcd-election", JVM, r"\bgetElectionClient\s*\(",
        "jetcd election (a lease; the leader key's create revision is the fencing token)"),
    rule(Leader, Acquire, "zookeeper-election", JVM, r"\bLeader(?:Latch|Selector)\s*\(",
        "Curator leader election (a ZooKeeper session; czxid is the fencing token)"),
    rule(Leader, Acquire, "zookeeper-election", PYTHON, r"\.Election\s*\(\s*[^)\s]",
        "kazoo leader election (a ZooKeeper session; czxid is the fencing token)")
        .within(r"\bkazoo\b"),
    rule(Leader, Acquire, "spring-leader", JVM, r"\b(?:LockRegistry)?LeaderInitiator\s*\(",
        "Spring Integration leader election (a lock with a TTL)"),
    rule(Leader, Mention, "scheduled-job", JVM, r"@Scheduled\b",
        "scheduled job in a file that takes a lock: every instance runs the schedule, the lock picks one")
        .within(r"@SchedulerLock\b|\bgetLock\s*\(|\bInterProcess\w+|\bLockRegistry\b|(?i)distributed\w*lock|\bFencedLock\b"),
    rule(Leader, Mention, "singleton-guard", ALL,
        r"(?i)\b\w*(?:single_?instance_?(?:lock|guard|job|check|only)|(?:ensure|enforce)_?single_?instance|only_?one_?instance|run_?once_?globally|singleton_?(?:job|task|lock|guard|runner))\w*",
        "singleton-job guard"),
    rule(Leader, Mention, "singleton-guard", ALL, r"(?i)\b\w*cron_?(?:job_?)?lock\w*",
        "cron lock"),
    rule(Leader, Mention, "singleton-guard", PYTHON, r"\bcelery_once\b|\bQueueOnce\b|\bcelery_singleton\b",
        "Celery singleton task"),
    // ---- Hints: the skill's language signals ----------------------------
    rule(Hint, Mention, "single-writer", ALL,
        r"(?i)\bonly\s+one\s+(?:process|instance|worker|node|replica|pod|server|writer|client|job|leader|holder|consumer|machine|host)(?:es|s)?\s+(?:should|must|can|may|will|is\s+allowed\s+to)\s+(?:ever\s+)?(?:write|run|process|execute|update|modify|hold|own|perform|handle|act|access)\w*\b",
        "single-writer assumption: is it enforced by the store, or only by a lease?"),
    rule(Hint, Mention, "ttl-assumption", ALL,
        r"(?i)\b(?:lease|lock)\s+(?:has|have|with|uses?|gets?)\s+an?\s+\d+(?:\.\d+)?[- ]?(?:ms|milliseconds?|s|secs?|seconds?|min|minutes?)\s+(?:ttl|timeout|expiry)\b",
        "TTL as the safety argument: no TTL bounds a process pause"),
    rule(Hint, Mention, "ttl-assumption", ALL,
        r"(?i)\bttl\b[^.\n]{0,60}?\bso\s+(?:we|it)(?:'re|\s+are|\s+is|'ll\s+be|\s+should\s+be)\s+safe\b",
        "TTL as the safety argument: no TTL bounds a process pause"),
    rule(Hint, Mention, "process-pause", ALL,
        r"(?i)\b(?:gc|garbage[- ]collection|stop[- ]the[- ]world|vm|process)\s+(?:pause|freeze|suspension)s?\b",
        "process pauses: a paused lock holder can outlive its lease"),
    rule(Hint, Mention, "process-pause", ALL, r"(?i)\bmiss(?:ed|es|ing)?\s+(?:its|their|the|a|our)\s+heartbeats?\b",
        "missed heartbeats: a paused lock holder can outlive its lease"),
    rule(Hint, Mention, "duplicate-despite-lock", ALL,
        r"(?i)\bduplicate\s+(?:processing|writes?|runs?|executions?|jobs?|deliver(?:y|ies))\b[^.\n]{0,60}\b(?:despite|even\s+though|although)\b[^.\n]{0,40}\block|\bjobs?\s+(?:ran|runs|executed|was\s+run)\s+twice\b",
        "duplicates despite a lock: the classic symptom of an unfenced lease"),
    rule(Hint, Mention, "lock-service", ALL,
        r"(?i)\b(?:redis|etcd|zookeeper|consul|dynamodb|postgres(?:ql)?)\b[^.\n]{0,40}?\bfor\s+(?:distributed\s+)?(?:locking|locks|leader\s+election|mutual\s+exclusion)\b",
        "a lock service in use: do its grants carry a fencing token to the writes?"),
    rule(Hint, Mention, "split-brain", ALL, r"(?i)\bsplit[- ]brain\b",
        "split brain: two holders at once is what fencing tokens make harmless"),
];

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

const SET_NX: &str =
    "Redis SET NX lock with an expiry (a TTL lease; Redis issues no fencing token)";
const SETNX: &str = "Redis SETNX lock with an expiry (a TTL lease; Redis issues no fencing token)";
/// An expiry option among a command's string arguments.
const EXPIRY_WORD: &str = r#"(?i)["'`](?:px|ex|pxat|exat)["'`]"#;

/// A file that implements a Redis client: it defines the `SET` command with
/// its `NX` option (or `SETNX`). In a tree with one, `redis-set-nx` matches
/// in that file and in test files are the client's own option tests, not
/// lock sites. Matched against the whole file.
pub(crate) const fn redis_client_definition(language: Language) -> &'static str {
    match language {
        Language::Python => r"(?s)\bdef\s+set\s*\(\s*self\b[^)]{0,800}?\bnx\b",
        Language::Go => r#"(?i)\bNew\w*Cmd\(\s*ctx\s*,\s*"set(?:nx)?"\s*,"#,
        Language::JavaScript | Language::TypeScript => {
            r"(?m)^\s*(?:async\s+)?set(?:nx|NX)\s*\(\s*key\s*[:,)?]|\bNX\?\s*:\s*boolean\b"
        }
        Language::Java | Language::Kotlin => {
            r"\bset(?:nx)?\s*\(\s*(?:final\s+)?(?:String|byte\[\]|K)\s+key\s*,[^;{]*(?:SetParams|SetArgs|\bvalue\s*\))\s*(?:throws\s+\w+\s*)?[{;]"
        }
        Language::Rust => r"\bfn\s+set_nx\s*<",
    }
}

/// Whether a path (relative, `/`-separated) is a test: under a
/// `test`/`tests`/`__tests__`/`spec`/`testing`/`doctests` directory, or a
/// test file by its language's convention.
pub fn is_test_path(path: &str) -> bool {
    let mut parts = path.split('/');
    let file = parts.next_back().unwrap_or_default();
    if parts.any(|d| {
        matches!(
            d,
            "test" | "tests" | "__tests__" | "spec" | "testing" | "doctests" | "testutil"
        )
    }) {
        return true;
    }
    let stem = file.split('.').next().unwrap_or_default();
    file.ends_with("_test.go")
        || (file.ends_with(".py") && (stem.starts_with("test_") || stem.ends_with("_test")))
        || [".test.", ".spec.", ".test-d."]
            .iter()
            .any(|m| file.contains(m))
        || ((file.ends_with(".java") || file.ends_with(".kt"))
            && (stem.ends_with("Test") || stem.ends_with("Tests") || stem.starts_with("Test")))
}

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

/// Signs of fencing-token use.
#[rustfmt::skip]
pub(crate) static EVIDENCE: &[Evidence] = &[
    evidence("a fencing token", ALL, Scope::Window, r"(?i)fenc(?:e|ing)_?token"),
    evidence("a lock_token column", ALL, Scope::Window, r"(?i)\block_token\b"),
    evidence("a token passed to a write", ALL, Scope::Window,
        r"(?i)\b(?:write|put|save|update|insert|upsert|store|persist|commit|replace|set_?data)\w*\s*\(.*\btoken\b"),
    evidence("a fenced API", ALL, Scope::Window, r"(?i)\bfence\s*\(|\w*fenced\w*\s*\("),
    evidence("If-Match", ALL, Scope::Window, r"(?i)\bif[-_]?(?:none[-_]?)?match\b"),
    evidence("a generation precondition", ALL, Scope::Window,
        r"(?i)\bif_?generation_?match\b|\bGenerationMatch\s*:"),
    evidence("a lock's fence", ALL, Scope::Window, r"(?i)getfence\b|andgettoken\b|andgetfence\b"),
    evidence("a fenced lock or store", ALL, Scope::File, r"\b\w*Fenced(?:Lock|Store)\b"),
    evidence("an etcd create revision", ALL, Scope::Window,
        r"(?i)\bcreate_?revision\b|\bHeader\(\)\.(?:Revision|GetRevision\(\))"),
    evidence("a ZooKeeper zxid", ALL, Scope::Window, r"(?i)zxid|cversion"),
    evidence("a Consul lock index", GO, Scope::Window, r"\bLockIndex\b"),
    evidence("a Lease's transition count", ALL, Scope::Window, r"(?i)\b(?:leader|lease)_?transitions\b"),
    evidence("a max-seen token", ALL, Scope::Window, r"(?i)\bmax_?seen_?token\b"),
    evidence("the fencing crate", RUST, Scope::File, r"\bfencing(?:_\w+)?::|\buse\s+fencing\b"),
];

/// Why an unfenced lock is a risk, and the fix; appended to its message.
pub(crate) const UNFENCED: &str = "UNFENCED: no fencing token reaches the writes near this lock, so a holder paused past its lease (GC, VM freeze, network delay) can still write after another holder took over. Fix: send the lease's fencing token with every write and have the store refuse tokens lower than the highest it has accepted.";

#[cfg(test)]
mod tests {
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

    #[test]
    fn test_paths() {
        for test in [
            "tests/test_commands.py",
            "commands_test.go",
            "src/single.test.ts",
            "test/typing/commands.test-d.ts",
            "src/test/java/a/TestLeaderLatch.java",
            "internal/testutil/testutil.go",
            "doctests/dt_string.py",
            "pkg/lock_test.py",
        ] {
            assert!(is_test_path(test), "{test}");
        }
        for not_test in [
            "redis/lock.py",
            "mutex.go",
            "src/index.ts",
            "latest/x.py",
            "Contest.java",
        ] {
            assert!(!is_test_path(not_test), "{not_test}");
        }
    }

    #[test]
    fn languages_come_from_file_names() {
        assert_eq!(Language::from_file_name("a.rs"), Some(Language::Rust));
        assert_eq!(Language::from_file_name("B.KT"), Some(Language::Kotlin));
        assert_eq!(
            Language::from_file_name("x.tsx"),
            Some(Language::TypeScript)
        );
        assert_eq!(Language::from_file_name("x.d.ts"), None);
        assert_eq!(Language::from_file_name("app.min.js"), None);
        assert_eq!(Language::from_file_name("Makefile"), None);
        assert_eq!(Language::from_file_name("x.sql"), None);
    }
}
