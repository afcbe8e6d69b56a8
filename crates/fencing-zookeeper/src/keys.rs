//! Where things live in ZooKeeper's tree.
//!
//! - `{prefix}`: a persistent znode, created at connect, whose ACL lets
//!   nobody delete its children (but for the moment a removal of an idle
//!   resource needs, see `removal`). Its data is [`CZXID_MARK`] when a
//!   `token=czxid` issuer of this release made it (empty otherwise): only
//!   under such a prefix may idle resource znodes be removed, and a
//!   `token=cversion` issuer refuses it. Its data version counts removals,
//!   and every write that read a resource znode checks it, so a znode
//!   removed and made again is never taken for the one that was read.
//! - `{prefix}/{resource}`: the resource znode, the name as it is (`/`
//!   and `%` included), so resource `jobs/a` is Curator's and kazoo's lock
//!   path `{prefix}/jobs/a`; persistent, deleted only by `remove_idle` (czxid mode); its data
//!   is the resource's floor offset (empty for none). The znodes between
//!   the prefix and it (`{prefix}/jobs`) are made as needed, persistent,
//!   with the prefix's ACL (until one is a resource's znode itself). A name that is no such path (an empty
//!   segment, `.` or `..`, a character ZooKeeper refuses, a segment named
//!   [`KEEPER`]) is refused, never given another path.
//! - `{prefix}/{resource}/_f_<nonce>-lock-NNNNNNNNNN`: a lock node,
//!   ephemeral and sequential, in the session its lease's TTL class shares;
//!   its data is the holder id (and, with [`TokenSource::ParentCversion`],
//!   the token).
//!   Any other ephemeral child (kazoo's, Curator's lock nodes) is another
//!   client's, in the same queue. A persistent child is no lock node
//!   (every recipe's lock nodes end with their session): it is the znode
//!   of a resource below (`jobs/a` under `jobs`), in no queue of `jobs`.
//! - `{prefix}/{resource}/_fencing-keeper`: a persistent, empty
//!   child in no queue, deleted only with the resource znode. (Its data
//!   version counts `remove_idle`'s readings of the server's clock.) A resource znode that
//!   Curator created is a *container*, which ZooKeeper deletes once it has
//!   no children, and with it the floor offset and the cversion; no client
//!   can tell one from a persistent znode (its `Stat` hides it), so every
//!   resource znode gets the keeper, and a container with a child is
//!   never deleted. Every lock node's create checks in the same
//!   transaction that it is there.
//!
//! Releases before this one kept a name with `/` or `%` as one escaped
//! znode (`jobs/a` at `{prefix}/jobs%2Fa`); the first use of the new path
//! carries that znode's floor over (see [`Znode::legacy`]).
//!
//! [`TokenSource::ParentCversion`]: crate::TokenSource::ParentCversion

use fencing_core::{Error, Result};

use crate::token::TokenSource;

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
/// persistent, empty node in no queue, deleted only with the resource
/// znode by `remove_idle` (ZooKeeper deletes an
/// empty *container*, and Curator makes resource znodes as containers).
/// Curator orders it after every lock node (its name has no `lock-`, and
/// `_` sorts after digits); kazoo's patterns never match it.
pub const KEEPER: &str = "_fencing-keeper";

/// The data of a prefix znode made by a `token=czxid` issuer: no
/// `token=cversion` issuer has granted under it, so removing a resource
/// znode there cannot restart a count that tokens came from.
pub(crate) const CZXID_MARK: &[u8] = b"fencing:czxid";

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

/// The znode of a resource: `{prefix}/{resource}` (a name [`check`]
/// accepts).
pub(crate) fn resource_path(prefix: &str, resource: &str) -> String {
    format!("{prefix}/{resource}")
}

/// A resource's znode, and what making it needs.
#[derive(Clone, Debug)]
pub(crate) struct Znode {
    pub(crate) prefix: String,
    /// `{prefix}/{resource}`.
    pub(crate) dir: String,
    /// Where a release before this one kept the resource, if elsewhere
    /// (`{prefix}/jobs%2Fa`): its floor, and with `token=cversion` its
    /// cversion, are carried into a resource znode made new.
    pub(crate) legacy: Option<String>,
    pub(crate) source: TokenSource,
}

impl Znode {
    /// The znode of `resource`, after [`check`].
    ///
    /// # Errors
    /// As [`check`].
    pub(crate) fn of(prefix: &str, resource: &str, source: TokenSource) -> Result<Self> {
        check(resource)?;
        let dir = resource_path(prefix, resource);
        let escaped = format!("{prefix}/{}", escape_component(resource));
        Ok(Self {
            prefix: prefix.to_owned(),
            legacy: (escaped != dir).then_some(escaped),
            dir,
            source,
        })
    }
}

/// Refuses a resource name that is no znode path below the prefix, as
/// Curator and kazoo would use it: every `/`-separated segment non-empty,
/// not `.` or `..`, not [`KEEPER`] (it would be a resource's keeper), with
/// no character ZooKeeper refuses.
///
/// # Errors
/// [`Error::InvalidInput`] naming the resource and why.
pub(crate) fn check(resource: &str) -> Result<()> {
    let why = if resource.split('/').any(str::is_empty) {
        Some("an empty path segment (a `/` at either end, or `//`)")
    } else if resource.split('/').any(|s| s == "." || s == "..") {
        Some("a `.` or `..` path segment")
    } else if resource.split('/').any(|s| s == KEEPER) {
        Some("a path segment named as a resource znode's keeper")
    } else if resource
        .chars()
        .any(|c| c != '%' && c != '/' && needs_escape(c))
    {
        Some("a character ZooKeeper refuses in a path")
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::invalid_input(format!(
            "resource name {resource:?} is refused: it has {why}; the lock path {{prefix}}/NAME of \
             Curator and kazoo must be the same znode"
        ))),
        None => Ok(()),
    }
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

/// A resource name as releases before this one kept it, one znode name:
/// `%`, `/` and the characters ZooKeeper refuses percent-escaped (`jobs/a`
/// → `jobs%2Fa`); `.` and `..` as `%2E` and `%2E%2E`.
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
    fn earlier_releases_kept_a_name_as_one_escaped_component() {
        assert_eq!(escape_component("jobs/nightly"), "jobs%2Fnightly");
        assert_eq!(escape_component("50%"), "50%25");
        assert_eq!(escape_component(".."), "%2E%2E");
        assert_eq!(escape_component("a.b"), "a.b");
        assert_eq!(escape_component("tab\there"), "tab%09here");
        assert!(!escape_component("a/b").contains('/'));
        assert_eq!(resource_path("/p", "a/b"), "/p/a/b");
    }

    #[test]
    fn a_resource_is_curators_lock_path_or_refused() {
        let of = |r| Znode::of("/p", r, TokenSource::Czxid);
        let jobs = of("jobs/a").unwrap();
        assert_eq!(jobs.dir, "/p/jobs/a");
        assert_eq!(jobs.legacy.as_deref(), Some("/p/jobs%2Fa"));
        assert_eq!(of("50%").unwrap().dir, "/p/50%");
        assert_eq!(of("plain").unwrap().legacy, None);
        for bad in [
            "a//b",
            "a/",
            "/a",
            "a/./b",
            "..",
            "tab\there",
            "jobs/_fencing-keeper",
        ] {
            assert!(
                matches!(of(bad), Err(Error::InvalidInput { .. })),
                "{bad:?}"
            );
        }
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
