//! Where things live in ZooKeeper's tree.
//!
//! - `{prefix}`: a persistent znode, created at connect, whose ACL lets
//!   nobody delete its children.
//! - `{prefix}/{escaped resource}`: the resource znode, persistent and never
//!   deleted; its data is the resource's floor offset (empty for none).
//! - `{prefix}/{escaped resource}/_f_<nonce>-lock-NNNNNNNNNN`: a lock node,
//!   ephemeral and sequential, in the session its lease's TTL class shares;
//!   its data is the holder id (and, with [`TokenSource::ParentCversion`],
//!   the token).
//!   Any other child (kazoo's, Curator's lock nodes) is another client's,
//!   in the same queue.
//! - `{prefix}/{escaped resource}/_fencing-keeper`: a persistent, empty
//!   child that is never deleted and in no queue. A resource znode that
//!   Curator created is a *container*, which ZooKeeper deletes once it has
//!   no children, and with it the floor offset and the cversion; no client
//!   can tell one from a persistent znode (its `Stat` hides it), so every
//!   resource znode gets the keeper, and a container with a child is
//!   never deleted. Every lock node's create checks in the same
//!   transaction that it is there.
//!
//! [`TokenSource::ParentCversion`]: crate::TokenSource::ParentCversion

use fencing_core::{Error, Result};

/// The znode under which every resource lives when no prefix is given.
pub const DEFAULT_PREFIX: &str = "/fencing";

/// Lock nodes are `_f_<nonce>-lock-<sequence>` children of the resource's
/// znode: the nonce finds a node whose create's answer was lost (as
/// Curator's `_c_<uuid>-lock-`), and Curator, which orders children by
/// what follows the last `lock-`, orders ours with its own.
pub(crate) fn lock_node_prefix(nonce: &str) -> String {
    format!("{PROTECTED_PREFIX}{nonce}-{LOCK_MARK}")
}

const PROTECTED_PREFIX: &str = "_f_";
const LOCK_MARK: &str = "lock-";

/// The child that keeps a resource znode from ever being empty: a
/// persistent, empty node in no queue, never deleted (ZooKeeper deletes an
/// empty *container*, and Curator makes resource znodes as containers).
/// Curator orders it after every lock node (its name has no `lock-`, and
/// `_` sorts after digits); kazoo's patterns never match it.
pub const KEEPER: &str = "_fencing-keeper";

/// The keeper of the resource znode `dir`.
pub(crate) fn keeper_path(dir: &str) -> String {
    format!("{dir}/{KEEPER}")
}

/// Whether a child of a resource znode is one of our lock nodes: this
/// release's `_f_<nonce>-lock-N`, or an earlier one's `lock-N`.
pub(crate) fn is_lock_node(name: &str) -> bool {
    name.starts_with(LOCK_MARK)
        || name
            .strip_prefix(PROTECTED_PREFIX)
            .and_then(|rest| rest.split_once('-'))
            .is_some_and(|(nonce, rest)| {
                nonce.len() == 16
                    && nonce.bytes().all(|b| b.is_ascii_hexdigit())
                    && rest.starts_with(LOCK_MARK)
            })
}

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

    #[test]
    fn our_lock_nodes_are_told_from_foreign_ones() {
        let ours = format!("{}0000000042", lock_node_prefix("00ff00ff00ff00ff"));
        assert_eq!(ours, "_f_00ff00ff00ff00ff-lock-0000000042");
        assert!(is_lock_node(&ours));
        assert!(is_lock_node("lock-0000000001"), "an earlier release's");
        assert!(!is_lock_node(KEEPER));
        for foreign in [
            "_c_8a3c1f2e-3d4b-4c5d-9e6f-0a1b2c3d4e5f-lock-0000000003", // Curator
            "3f2a__lock__0000000004",                                  // kazoo
            "_f_short-lock-0000000001",
            "x-lock-0000000002",
        ] {
            assert!(!is_lock_node(foreign), "{foreign}");
        }
    }
}
