//! Where things live in etcd's key space.
//!
//! [`Layout::Queue`] (the default):
//! - `{prefix}{resource}/{lease_id:016x}`: a lock key, created in a
//!   transaction with its etcd lease attached and the holder id as its
//!   value. The holder is the key with the lowest create revision. Any
//!   other key `{prefix}{resource}/{name}` (`etcdctl lock`'s, one put by
//!   hand) is another client's, in the same queue: a foreign holder or
//!   waiter. The resource is written as it is, so resource `jobs/a` is
//!   `etcdctl lock {prefix}jobs/a` (Go's `concurrency.Mutex` keeps
//!   `{pfx}/{lease id}`).
//! - `{prefix}%floor/{escaped resource}`: the resource's floor offset (in
//!   the floor key's name `/` is written `%2F` and `%` is written `%25`,
//!   as in every release).
//!
//! A range over `{prefix}jobs/` also returns the keys of `jobs/a`: only a
//! key with no `/` after `{prefix}{resource}/` is in the resource's queue,
//! so every key belongs to one resource (the one before its last `/`) and
//! `jobs` and `jobs/a` are two locks. The names `%floor` and `%floor/…`
//! are refused: their keys would be the floors.
//!
//! [`Layout::SingleKey`] (python-etcd3's `Lock`):
//! - `{prefix}{resource}`, as written: the lock itself, created only if
//!   absent, with the holder's etcd lease; its value `fencing:{holder}`
//!   for ours. Nobody queues.
//! - `{prefix}%floor/{escaped resource}`: the floor offset, as above.

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget};
use fencing_core::{Error, HolderId, Result};

/// The key prefix when none is given.
pub const DEFAULT_PREFIX: &str = "fencing/";

/// The key prefix of [`Layout::SingleKey`] when none is given:
/// python-etcd3's.
pub const SINGLE_KEY_PREFIX: &str = "/locks/";

/// How a resource's lock is kept in etcd, and so which other clients
/// share it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    /// A queue of lock keys `{prefix}{resource}/{lease id}`, ordered by
    /// create revision, as etcd's own `concurrency.Mutex`, `etcdctl lock`
    /// and the v3lock service keep it: those share our lock on
    /// `{prefix}{resource}`. Waiters watch the key ahead of theirs.
    #[default]
    Queue,
    /// One key, `{prefix}{resource}` (default prefix
    /// [`SINGLE_KEY_PREFIX`]), created only if absent with the holder's
    /// etcd lease, as python-etcd3's `Lock` keeps it (`/locks/NAME`): that
    /// shares our lock on `NAME`. Waiters watch the key's deletion and all
    /// try again. The token is still the key's create revision.
    SingleKey,
}

impl Layout {
    /// The URL words: `layout=queue|single-key`.
    pub(crate) const WORDS: &'static [&'static str] = &["queue", "single-key"];

    pub(crate) fn parse(word: &str) -> Option<Self> {
        match word {
            "queue" => Some(Self::Queue),
            "single-key" => Some(Self::SingleKey),
            _ => None,
        }
    }

    /// The key prefix when none is given.
    pub(crate) fn default_prefix(self) -> &'static str {
        match self {
            Self::Queue => DEFAULT_PREFIX,
            Self::SingleKey => SINGLE_KEY_PREFIX,
        }
    }
}

/// The key layout under one prefix.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    prefix: String,
    layout: Layout,
}

impl Keys {
    pub(crate) fn new(prefix: String, layout: Layout) -> Self {
        Self { prefix, layout }
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    /// Refuses a resource name whose keys would be another's records: in
    /// both layouts `%floor/…` under the prefix holds the floors (in the
    /// single key, resource `%floor/R` would be R's floor key itself).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the resource.
    pub(crate) fn check(&self, resource: &str) -> Result<()> {
        if resource == FLOOR_DIR || resource.starts_with(&format!("{FLOOR_DIR}/")) {
            return Err(Error::invalid_input(format!(
                "resource name {resource:?} is refused: {}{FLOOR_DIR}/ holds the resources' floors",
                self.prefix
            )));
        }
        Ok(())
    }

    /// Where the resource's lock keys are. Queue: `{prefix}{resource}/`,
    /// which every lock key of the resource starts with (and those of the
    /// resources below it, `{resource}/…`: see [`in_queue`]). Single key:
    /// the lock key itself.
    pub(crate) fn dir(&self, resource: &str) -> String {
        match self.layout {
            Layout::Queue => format!("{}{resource}/", self.prefix),
            Layout::SingleKey => format!("{}{resource}", self.prefix),
        }
    }

    /// `options` over every lock key of a resource (from [`dir`](Self::dir)),
    /// and in the queue the keys of the resources below it: filter with
    /// [`own`](Self::own).
    pub(crate) fn all(&self, options: GetOptions) -> GetOptions {
        match self.layout {
            Layout::Queue => options.with_prefix(),
            Layout::SingleKey => options,
        }
    }

    /// The resource's keys, in creation order (from [`dir`](Self::dir)):
    /// the first of them that is [`own`](Self::own) holds. Not limited to
    /// one: the first under the prefix may be a key of `{resource}/…`.
    pub(crate) fn in_order(&self) -> GetOptions {
        match self.layout {
            Layout::Queue => GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend),
            Layout::SingleKey => GetOptions::new(),
        }
    }

    /// The keys of `found` that are the resource's lock keys.
    pub(crate) fn own<'a>(
        &self,
        resource: &str,
        found: impl IntoIterator<Item = &'a KeyValue>,
    ) -> impl Iterator<Item = &'a KeyValue> {
        let dir = self.dir(resource);
        let layout = self.layout;
        found.into_iter().filter(move |kv| match layout {
            Layout::Queue => in_queue(&dir, kv.key()),
            Layout::SingleKey => kv.key() == dir.as_bytes(),
        })
    }

    /// True while nobody holds or waits for the resource: every lock key's
    /// create revision is 0. Single key only: a queue's range also holds
    /// the keys of the resources below it (see [`floor::raise`](crate::floor::raise)).
    pub(crate) fn free(&self, resource: &str) -> Compare {
        Compare::create_revision(self.dir(resource), CompareOp::Equal, 0)
    }

    /// Whether `key` is one of the resource's lock keys.
    pub(crate) fn is_lock_key_of(&self, resource: &str, key: &str) -> bool {
        match self.layout {
            Layout::Queue => in_queue(&self.dir(resource), key.as_bytes()),
            Layout::SingleKey => key == self.dir(resource),
        }
    }

    /// What our lock key holds for `holder`.
    pub(crate) fn value(&self, holder: &str) -> String {
        match self.layout {
            Layout::Queue => holder.to_owned(),
            // A foreign single-key lock holds anything (python-etcd3: 16
            // random bytes): ours say so.
            Layout::SingleKey => format!("fencing:{holder}"),
        }
    }

    /// Our holder, if `kv` is one of our lock keys of `resource`: named
    /// after its etcd lease (queue) or marked (single key), holding a
    /// holder id.
    pub(crate) fn holder_of(&self, resource: &str, kv: &KeyValue) -> Option<HolderId> {
        if kv.lease() == 0 {
            return None;
        }
        let value = kv.value_str().ok()?;
        let holder = match self.layout {
            Layout::Queue => {
                let named = Self::lock_key(&self.dir(resource), kv.lease());
                (kv.key() == named.as_bytes()).then_some(value)?
            }
            Layout::SingleKey => value.strip_prefix("fencing:")?,
        };
        HolderId::new(holder).ok()
    }

    /// The lock key of etcd lease `lease_id` in `dir`.
    pub(crate) fn lock_key(dir: &str, lease_id: i64) -> String {
        format!("{dir}{lease_id:016x}")
    }

    /// `{prefix}%floor/{escaped resource}`: the resource's floor offset,
    /// added to every create revision. Escaped, so no floor key is under
    /// another's name; where every release kept it.
    pub(crate) fn floor_key(&self, resource: &str) -> String {
        format!("{}{FLOOR_DIR}/{}", self.prefix, escape(resource))
    }
}

/// Under the prefix, the floor keys' "directory".
const FLOOR_DIR: &str = "%floor";

/// Whether `key` is in the queue whose keys start with `dir`: a key with
/// another `/` after `dir` is in the queue of a resource below
/// (`{resource}/a`'s), as `etcdctl lock` on that name would put it.
pub(crate) fn in_queue(dir: &str, key: &[u8]) -> bool {
    key.strip_prefix(dir.as_bytes())
        .is_some_and(|rest| !rest.contains(&b'/'))
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

/// The keys under a prefix created before `revision`, the latest first:
/// the first in `dir`'s queue ([`in_queue`]) is just ahead of a waiter's
/// key (names only).
pub(crate) fn before(revision: i64) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_max_create_revision(revision - 1)
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_keys_only()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_etcdctl_locks_on_the_same_name_and_every_key_has_one_resource() {
        let keys = |p: &str| Keys::new(p.to_owned(), Layout::Queue);
        // `etcdctl lock fencing/jobs/a` keeps `fencing/jobs/a/<lease hex>`.
        assert_eq!(keys("fencing/").dir("jobs/a"), "fencing/jobs/a/");
        assert_eq!(keys("p/").dir("50%"), "p/50%/");
        let k = keys("p/");
        assert!(k.is_lock_key_of("jobs", "p/jobs/694d8b3f5a1c2e01"));
        assert!(k.is_lock_key_of("jobs/a", "p/jobs/a/694d8b3f5a1c2e01"));
        assert!(!k.is_lock_key_of("jobs", "p/jobs/a/694d8b3f5a1c2e01"));
        assert!(!k.is_lock_key_of("jobs/a", "p/jobs/694d8b3f5a1c2e01"));
        assert!(k.is_lock_key_of("a/", "p/a//1"));
        assert!(!k.is_lock_key_of("a", "p/a//1"));
        assert!(!k.is_lock_key_of("a", "p/ab/1"));
        // No floor key is in any allowed resource's queue.
        for resource in ["a", "a/b", "50%", "%floorx"] {
            assert!(k.check(resource).is_ok(), "{resource}");
            for of in ["a", "a/b", "%", "x/y"] {
                assert!(
                    !k.is_lock_key_of(resource, &k.floor_key(of)),
                    "{resource} {of}"
                );
            }
        }
        for refused in ["%floor", "%floor/a", "%floor/a/b"] {
            assert!(
                matches!(k.check(refused), Err(Error::InvalidInput { .. })),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_single_key_is_python_etcd3s_lock() {
        let keys = Keys::new(SINGLE_KEY_PREFIX.to_owned(), Layout::SingleKey);
        assert_eq!(keys.dir("jobs/a"), "/locks/jobs/a");
        assert!(keys.is_lock_key_of("jobs/a", "/locks/jobs/a"));
        assert!(!keys.is_lock_key_of("jobs/a", "/locks/jobs/ab"));
        assert_eq!(keys.value("h-1"), "fencing:h-1");
        assert_eq!(keys.floor_key("jobs/a"), "/locks/%floor/jobs%2Fa");
        // Resource `%floor/jobs%2Fa` would be that floor key.
        assert!(keys.check("%floor/jobs%2Fa").is_err());
        assert!(keys.check("jobs/a").is_ok());
    }
}
