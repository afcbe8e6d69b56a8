//! [`Recent`]: what an issuer remembers per key, bounded, the least
//! recently used forgotten first.

use std::collections::HashMap;
use std::time::Instant;

#[derive(Debug)]
struct Entry<V> {
    value: V,
    /// When a try last read or wrote it.
    used: Instant,
}

/// Per key, a value an issuer keeps between tries (a version it saw and
/// since when, a counter it last knew), at most `cap` of them: a long-lived
/// process that meets many resources must not keep one entry per resource
/// for ever.
///
/// Past the cap, the entries no try has used for longest go. A waiter that
/// polls uses its own at every try (at least once a second), so it keeps
/// what it has timed; an entry lost costs only time or a request (the next
/// sighting waits a whole TTL again), never a takeover too early.
#[derive(Debug)]
pub struct Recent<V> {
    map: HashMap<String, Entry<V>>,
    cap: usize,
}

impl<V> Default for Recent<V> {
    fn default() -> Self {
        Self::with_cap(Self::DEFAULT_CAP)
    }
}

impl<V> Recent<V> {
    /// About a megabyte of keys and versions.
    pub const DEFAULT_CAP: usize = 10_000;

    /// Nothing remembered yet, at most `cap` entries (at least 1).
    pub fn with_cap(cap: usize) -> Self {
        Self {
            map: HashMap::new(),
            cap: cap.max(1),
        }
    }

    /// How many entries are remembered.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Down to nine tenths of the cap in one sweep, so that a sweep (a
    /// sort) comes once per tenth of the cap of new keys, not per key.
    fn evict(&mut self) {
        let keep = self.cap - self.cap / 10;
        let mut by_use: Vec<(Instant, String)> =
            self.map.iter().map(|(k, e)| (e.used, k.clone())).collect();
        by_use.sort_unstable();
        for (_, key) in by_use.into_iter().take(self.map.len().saturating_sub(keep)) {
            self.map.remove(&key);
        }
    }
}

impl<V: Clone> Recent<V> {
    /// The value kept for `key`, which counts as a use.
    pub fn get(&mut self, key: &str) -> Option<V> {
        let entry = self.map.get_mut(key)?;
        entry.used = Instant::now();
        Some(entry.value.clone())
    }

    /// Keeps `value` for `key` (a use), or forgets the key for `None`.
    pub fn put(&mut self, key: &str, value: Option<V>) {
        let Some(value) = value else {
            self.map.remove(key);
            return;
        };
        let used = Instant::now();
        self.map.insert(key.to_owned(), Entry { value, used });
        if self.map.len() > self.cap {
            self.evict();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Recent;

    #[test]
    fn the_least_recently_used_go_first_and_the_cap_holds() {
        let mut recent = Recent::with_cap(10);
        recent.put("polled", Some(0));
        for i in 0..100 {
            recent.put(&format!("k{i}"), Some(i));
            if i % 5 == 0 {
                assert_eq!(recent.get("polled"), Some(0), "after {i} others");
            }
            assert!(recent.len() <= 10, "{} entries", recent.len());
        }
        recent.put("polled", None);
        assert_eq!(recent.get("polled"), None);
    }
}
