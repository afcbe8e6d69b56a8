//! Where things live in etcd's key space.
//!
//! - `{prefix}{escaped resource}/{lease_id:016x}`: a lock key, created in
//!   a transaction with its etcd lease attached and the holder id as its
//!   value. The holder is the key with the lowest create revision. Any
//!   other key under the same prefix (`etcdctl lock`'s, one put by hand) is
//!   another client's, in the same queue: a foreign holder or waiter.
//! - `{prefix}%floor/{escaped resource}`: the resource's floor offset.
//!
//! In the resource name `/` is written `%2F` and `%` is written `%25`, so
//! the keys of resource `a` can never fall under the prefix of `a/b`, and
//! no resource directory can contain a floor key.

use etcd_client::{GetOptions, SortOrder, SortTarget};

/// The key prefix when none is given.
pub const DEFAULT_PREFIX: &str = "fencing/";

/// The key layout under one prefix.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(prefix: String) -> Self {
        Self { prefix }
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `{prefix}{escaped resource}/`: every lock key of the resource, and
    /// only its keys, start with this.
    pub(crate) fn dir(&self, resource: &str) -> String {
        format!("{}{}/", self.prefix, escape(resource))
    }

    /// The lock key of etcd lease `lease_id` in `dir`.
    pub(crate) fn lock_key(dir: &str, lease_id: i64) -> String {
        format!("{dir}{lease_id:016x}")
    }

    /// `{prefix}%floor/{escaped resource}`: the resource's floor offset,
    /// added to every create revision.
    pub(crate) fn floor_key(&self, resource: &str) -> String {
        format!("{}%floor/{}", self.prefix, escape(resource))
    }
}

/// A resource name with `%` and `/` escaped.
fn escape(resource: &str) -> String {
    let mut dir = String::with_capacity(resource.len());
    for c in resource.chars() {
        match c {
            '%' => dir.push_str("%25"),
            '/' => dir.push_str("%2F"),
            c => dir.push(c),
        }
    }
    dir
}

/// The key under a prefix with the lowest create revision: the holder.
pub(crate) fn first_created() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1)
}

/// The key under a prefix created last before `revision`: the one just
/// ahead of a waiter's key (names only).
pub(crate) fn just_before(revision: i64) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_max_create_revision(revision - 1)
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(1)
        .with_keys_only()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_resource_dir_is_a_prefix_of_another() {
        let keys = |p: &str| Keys::new(p.to_owned());
        assert_eq!(keys("fencing/").dir("jobs/a"), "fencing/jobs%2Fa/");
        assert_eq!(keys("p/").dir("50%/x"), "p/50%25%2Fx/");
        let a = keys("p/").dir("a");
        for other in ["a/b", "a%2Fb", "a/", "a%"] {
            assert!(!keys("p/").dir(other).starts_with(&a), "{other}");
        }
        assert!(!keys("p/").floor_key("a").starts_with(&a));
    }
}
