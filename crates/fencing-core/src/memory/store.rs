use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;

use crate::{Error, FencedStore, FencingToken, Limits, Result, Versioned};

/// A fenced key-value store in process memory.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<String, Entry>,
    floor: Option<FencingToken>,
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
        let mut state = self.state.lock().expect("poisoned");
        if let Some(floor) = state.floor.filter(|floor| token <= *floor) {
            return Err(Error::below_floor(key, token, floor));
        }
        let entry = state.entries.entry(key.to_owned()).or_insert(Entry {
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
        let state = self.state.lock().expect("poisoned");
        Ok(state.entries.get(key).and_then(|e| {
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
            .state
            .lock()
            .expect("poisoned")
            .entries
            .get(key)
            .map(|e| e.mark))
    }

    async fn delete(&self, key: &str, token: FencingToken) -> Result<()> {
        Self::LIMITS.check_write(key, token, 0)?;
        self.apply(key, token, |slot| *slot = None)
    }

    async fn floor(&self) -> Result<Option<FencingToken>> {
        Ok(self.state.lock().expect("poisoned").floor)
    }

    async fn raise_floor(&self, floor: FencingToken) -> Result<FencingToken> {
        Self::LIMITS.check_floor(floor)?;
        let mut state = self.state.lock().expect("poisoned");
        match state.floor {
            Some(current) if current > floor => Err(Error::floor_lowered(current, floor)),
            _ => {
                state.floor = Some(floor);
                Ok(floor)
            }
        }
    }

    async fn remove_floored_marks(&self, most: u32) -> Result<u64> {
        let mut state = self.state.lock().expect("poisoned");
        let Some(floor) = state.floor else {
            return Ok(0);
        };
        let covered: Vec<String> = state
            .entries
            .iter()
            .filter(|(_, e)| e.value.is_none() && e.mark <= floor)
            .map(|(k, _)| k.clone())
            .take(most as usize)
            .collect();
        for key in &covered {
            state.entries.remove(key);
        }
        Ok(covered.len() as u64)
    }
}
