//! The languages the scan reads: file names, comments, definitions, tests.

use serde::{Deserialize, Serialize};

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

    /// A line that only names a module: an import, a package declaration,
    /// one entry of Go's `import (…)` block, a bare `require`. A lock's
    /// name there is no finding (it is still evidence: `use fencing_tokens::`).
    pub(crate) const fn import(self) -> &'static str {
        match self {
            Language::Rust => {
                r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:use\s|extern\s+crate\s|mod\s+\w+\s*;)"
            }
            Language::Go => r#"^\s*(?:package\s|import\s|(?:[\w.]+\s+)?"[^"\s]+"\s*(?://.*)?$)"#,
            Language::Java | Language::Kotlin => r"^\s*(?:import|package)\s",
            Language::Python => r"^\s*(?:import\s|from\s+[\w.]+\s+import\s)",
            Language::JavaScript | Language::TypeScript => {
                r#"^\s*(?:import[\s{*'"(]|export\s[^;]*\sfrom\s+['"]|(?:const|let|var)\s+[\w{}\s,:]+=\s*require\(\s*['"][^'"]+['"]\s*\)[\w.\s]*;?\s*$)"#
            }
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
pub(crate) struct Langs(pub(super) u8);

impl Langs {
    /// Whether `language` is in the set.
    pub(crate) const fn has(self, language: Language) -> bool {
        self.0 & language.bit() != 0
    }

    pub(super) const fn or(self, other: Langs) -> Langs {
        Langs(self.0 | other.0)
    }
}

pub(super) const RUST: Langs = Langs(1);
pub(super) const GO: Langs = Langs(1 << 1);
pub(super) const JAVA: Langs = Langs(1 << 2);
pub(super) const KOTLIN: Langs = Langs(1 << 3);
pub(super) const PYTHON: Langs = Langs(1 << 4);
pub(super) const JS: Langs = Langs(1 << 5);
pub(super) const TS: Langs = Langs(1 << 6);
pub(super) const JVM: Langs = JAVA.or(KOTLIN);
pub(super) const JS_TS: Langs = JS.or(TS);
pub(super) const ALL: Langs = Langs(0x7f);

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

#[cfg(test)]
mod tests {
    use super::*;

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
