//! What a writer remembers of each key it wrote or read: the version, and
//! what it knew of it, so that the next conditional write can skip its
//! read. Shared by `BlobStore` and the stores built on other object-store
//! libraries (`fencing-object-store`, `fencing-opendal`).

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

/// The last version seen per key, bounded: past [`KnownVersions::CAP`]
/// keys it starts again empty. A forgotten key costs one read on its next
/// write, never safety: a remembered version is only ever a precondition,
/// which the store checks.
pub struct KnownVersions<V> {
    map: Mutex<HashMap<String, V>>,
}

impl<V: Clone> KnownVersions<V> {
    /// How many keys are remembered at most.
    pub const CAP: usize = 4096;

    /// Nothing remembered.
    pub fn new() -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
        }
    }

    /// What is remembered of `key`.
    pub fn get(&self, key: &str) -> Option<V> {
        self.map.lock().expect("poisoned").get(key).cloned()
    }

    /// Remembers `entry` for `key`, or forgets `key` (`None`).
    pub fn remember(&self, key: &str, entry: Option<V>) {
        let mut map = self.map.lock().expect("poisoned");
        match entry {
            Some(entry) => {
                if map.len() >= Self::CAP && !map.contains_key(key) {
                    map.clear();
                }
                map.insert(key.to_owned(), entry);
            }
            None => {
                map.remove(key);
            }
        }
    }
}

impl<V: Clone> Default for KnownVersions<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> fmt::Debug for KnownVersions<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self.map.lock().map_or(0, |m| m.len());
        f.debug_struct("KnownVersions")
            .field("keys", &keys)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::KnownVersions;

    #[test]
    fn it_forgets_everything_rather_than_grow_past_its_cap() {
        let known = KnownVersions::<u32>::new();
        for i in 0..KnownVersions::<u32>::CAP {
            known.remember(&format!("k{i}"), Some(1));
        }
        known.remember("k0", Some(2));
        assert_eq!(known.get("k0"), Some(2), "a known key is replaced in place");
        assert_eq!(known.get("k1"), Some(1));
        known.remember("new", Some(3));
        assert_eq!(known.get("new"), Some(3));
        assert_eq!(known.get("k1"), None, "full: started again empty");
        known.remember("new", None);
        assert_eq!(known.get("new"), None);
    }
}
