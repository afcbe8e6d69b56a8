use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;

use crate::{Error, FencedStore, FencingToken, Limits, Result, Versioned};

/// A fenced key-value store in process memory.
#[derive(Debug, Default)]
pub struct MemoryStore {
    entries: Mutex<HashMap<String, Entry>>,
}

#[derive(Debug)]
struct Entry {
    value: Option<Bytes>,
    mark: FencingToken,
}

impl MemoryStore {
    /// The limits of the in-memory stores.
    pub const LIMITS: Limits = Limits {
        max_key_len: 1024,
        max_value_len: 16 * 1024 * 1024,
        max_token: FencingToken::new(u64::MAX),
    };

    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks `token` against `key`'s mark and, if accepted, applies
    /// `change` and raises the mark, all under one lock.
    fn apply(
        &self,
        key: &str,
        token: FencingToken,
        change: impl FnOnce(&mut Option<Bytes>),
    ) -> Result<()> {
        let mut entries = self.entries.lock().expect("poisoned");
        let entry = entries.entry(key.to_owned()).or_insert(Entry {
            value: None,
            mark: FencingToken::ZERO,
        });
        if token < entry.mark {
            return Err(Error::StaleToken {
                key: key.to_owned(),
                presented: token,
                current: entry.mark,
            });
        }
        entry.mark = token;
        change(&mut entry.value);
        Ok(())
    }
}

#[async_trait]
impl FencedStore for MemoryStore {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn limits(&self) -> Limits {
        Self::LIMITS
    }

    async fn put(&self, key: &str, value: Bytes, token: FencingToken) -> Result<()> {
        Self::LIMITS.check_write(key, token, value.len())?;
        self.apply(key, token, |slot| *slot = Some(value))
    }

    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        Self::LIMITS.check_key(key)?;
        let entries = self.entries.lock().expect("poisoned");
        Ok(entries.get(key).and_then(|e| {
            e.value.clone().map(|value| Versioned {
                value,
                token: e.mark,
            })
        }))
    }

    async fn fence(&self, key: &str, token: FencingToken) -> Result<FencingToken> {
        Self::LIMITS.check_write(key, token, 0)?;
        self.apply(key, token, |_| {})?;
        Ok(token)
    }

    async fn mark(&self, key: &str) -> Result<Option<FencingToken>> {
        Self::LIMITS.check_key(key)?;
        Ok(self
            .entries
            .lock()
            .expect("poisoned")
            .get(key)
            .map(|e| e.mark))
    }

    async fn delete(&self, key: &str, token: FencingToken) -> Result<()> {
        Self::LIMITS.check_write(key, token, 0)?;
        self.apply(key, token, |slot| *slot = None)
    }
}
