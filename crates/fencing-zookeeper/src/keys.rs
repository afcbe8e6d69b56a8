//! Where things live in ZooKeeper's tree.
//!
//! - `{prefix}`: a persistent znode, created at connect, whose ACL lets
//!   nobody delete its children.
//! - `{prefix}/{escaped resource}`: the resource znode, persistent and never
//!   deleted; its data is the resource's floor offset (empty for none).
//! - `{prefix}/{escaped resource}/lock-NNNNNNNNNN`: a lock node, ephemeral
//!   and sequential, in the session of the lease it grants; its data is the
//!   holder id (and, with [`TokenSource::ParentCversion`], the token).
//!   Any other child (kazoo's, Curator's lock nodes) is another client's,
//!   in the same queue.
//!
//! [`TokenSource::ParentCversion`]: crate::TokenSource::ParentCversion

use fencing_core::{Error, Result};

/// The znode under which every resource lives when no prefix is given.
pub const DEFAULT_PREFIX: &str = "/fencing";

/// Lock nodes are `lock-<sequence>` children of the resource's znode.
pub(crate) const LOCK_PREFIX: &str = "lock-";

/// The znode of a resource: `{prefix}/{escaped resource}`.
pub(crate) fn resource_path(prefix: &str, resource: &str) -> String {
    format!("{prefix}/{}", escape_component(resource))
}

/// `/fencing`, `fencing` and `/fencing/` all mean `/fencing`.
pub(crate) fn normalize_prefix(prefix: &str) -> Result<String> {
    let trimmed = prefix.trim_matches('/');
    let bad = trimmed.is_empty()
        || trimmed
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == ".." || c.chars().any(needs_escape))
        || trimmed == "zookeeper"
        || trimmed.starts_with("zookeeper/");
    if bad {
        return Err(Error::invalid_input(format!(
            "bad ZooKeeper prefix {prefix:?}"
        )));
    }
    Ok(format!("/{trimmed}"))
}

/// Characters ZooKeeper refuses in a path, or that would make a resource
/// name more than one path component.
fn needs_escape(c: char) -> bool {
    matches!(c, '%' | '/' | '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
}

/// A resource name as one znode name: `%`, `/` and the characters
/// ZooKeeper refuses are percent-escaped (`jobs/a` → `jobs%2Fa`), so
/// resource `a` and resource `a/b` are siblings, never parent and child;
/// `.` and `..` become `%2E` and `%2E%2E`.
fn escape_component(resource: &str) -> String {
    if resource == "." || resource == ".." {
        return resource.replace('.', "%2E");
    }
    let mut out = String::with_capacity(resource.len());
    for c in resource.chars() {
        if needs_escape(c) {
            let mut buf = [0; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_are_one_component() {
        assert_eq!(escape_component("jobs/nightly"), "jobs%2Fnightly");
        assert_eq!(escape_component("50%"), "50%25");
        assert_eq!(escape_component(".."), "%2E%2E");
        assert_eq!(escape_component("a.b"), "a.b");
        assert_eq!(escape_component("tab\there"), "tab%09here");
        assert!(!escape_component("a/b").contains('/'));
        assert_eq!(resource_path("/p", "a/b"), "/p/a%2Fb");
    }

    #[test]
    fn prefixes_are_normalized_and_checked() {
        assert_eq!(normalize_prefix("fencing").unwrap(), "/fencing");
        assert_eq!(normalize_prefix("/a/b/").unwrap(), "/a/b");
        for bad in ["", "/", "a//b", "/zookeeper", "a/../b", "a%b"] {
            assert!(normalize_prefix(bad).is_err(), "{bad}");
        }
    }
}
