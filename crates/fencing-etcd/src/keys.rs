//! Where things live in etcd's key space.
//!
//! [`Layout::Queue`] (the default):
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
//!
//! [`Layout::SingleKey`] (python-etcd3's `Lock`):
//! - `{prefix}{resource}`, as written: the lock itself, created only if
//!   absent, with the holder's etcd lease; its value `fencing:{holder}`
//!   for ours. Nobody queues.
//! - `{prefix}%floor/{escaped resource}`: the floor offset, as above.

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget};
use fencing_core::HolderId;

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

    /// Where the resource's lock keys are. Queue: `{prefix}{escaped
    /// resource}/`, which every lock key of the resource, and only its
    /// keys, start with. Single key: the lock key itself.
    pub(crate) fn dir(&self, resource: &str) -> String {
        match self.layout {
            Layout::Queue => format!("{}{}/", self.prefix, escape(resource)),
            Layout::SingleKey => format!("{}{resource}", self.prefix),
        }
    }

    /// `options` over every lock key of a resource (from [`dir`](Self::dir)).
    pub(crate) fn all(&self, options: GetOptions) -> GetOptions {
        match self.layout {
            Layout::Queue => options.with_prefix(),
            Layout::SingleKey => options,
        }
    }

    /// The resource's holder's key (from [`dir`](Self::dir)).
    pub(crate) fn first(&self) -> GetOptions {
        match self.layout {
            Layout::Queue => first_created(),
            Layout::SingleKey => GetOptions::new(),
        }
    }

    /// True while nobody holds or waits for the resource: every lock key's
    /// create revision is 0.
    pub(crate) fn free(&self, resource: &str) -> Compare {
        let free = Compare::create_revision(self.dir(resource), CompareOp::Equal, 0);
        match self.layout {
            Layout::Queue => free.with_prefix(),
            Layout::SingleKey => free,
        }
    }

    /// Whether `key` is one of the resource's lock keys.
    pub(crate) fn is_lock_key_of(&self, resource: &str, key: &str) -> bool {
        match self.layout {
            Layout::Queue => key.starts_with(&self.dir(resource)),
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
        let keys = |p: &str| Keys::new(p.to_owned(), Layout::Queue);
        assert_eq!(keys("fencing/").dir("jobs/a"), "fencing/jobs%2Fa/");
        assert_eq!(keys("p/").dir("50%/x"), "p/50%25%2Fx/");
        let a = keys("p/").dir("a");
        for other in ["a/b", "a%2Fb", "a/", "a%"] {
            assert!(!keys("p/").dir(other).starts_with(&a), "{other}");
        }
        assert!(!keys("p/").floor_key("a").starts_with(&a));
    }

    #[test]
    fn a_single_key_is_python_etcd3s_lock() {
        let keys = Keys::new(SINGLE_KEY_PREFIX.to_owned(), Layout::SingleKey);
        assert_eq!(keys.dir("jobs/a"), "/locks/jobs/a");
        assert!(keys.is_lock_key_of("jobs/a", "/locks/jobs/a"));
        assert!(!keys.is_lock_key_of("jobs/a", "/locks/jobs/ab"));
        assert_eq!(keys.value("h-1"), "fencing:h-1");
        assert_eq!(keys.floor_key("jobs/a"), "/locks/%floor/jobs%2Fa");
    }
}
