//! The store trait: storage that refuses writes carrying a stale token.

use std::fmt::Debug;

use async_trait::async_trait;
use bytes::Bytes;

use crate::safety::{self, SafetyCheck};
use crate::{Error, FencingToken, Result};

/// A value read back together with the key's mark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned {
    /// The stored value.
    pub value: Bytes,
    /// The key's mark: the highest token accepted for it (by a write or a
    /// [`fence`](FencedStore::fence)).
    pub token: FencingToken,
}

/// What a store accepts. Checked before any request is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest key, in bytes.
    pub max_key_len: usize,
    /// The largest value, in bytes.
    pub max_value_len: usize,
    /// The highest token the backend can store.
    pub max_token: FencingToken,
}

impl Limits {
    /// Checks a floor for [`FencedStore::raise_floor`]: below
    /// `max_token`, so that a token above it can still be written.
    ///
    /// # Errors
    /// [`Error::TokenOutOfRange`].
    pub fn check_floor(&self, floor: FencingToken) -> Result<()> {
        if floor >= self.max_token {
            return Err(Error::TokenOutOfRange {
                token: floor,
                max: FencingToken::new(self.max_token.get() - 1),
            });
        }
        Ok(())
    }

    /// Checks a key: non-empty, at most `max_key_len` bytes, no NUL, and
    /// not `.` or `..` (GCS and Azure cannot name such an object: a URL
    /// path drops a dot segment. Refused on every store, so that keys stay
    /// portable when data moves between backends).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the limit.
    pub fn check_key(&self, key: &str) -> Result<()> {
        if key.is_empty() {
            return Err(Error::invalid_input("key is empty"));
        }
        if key == "." || key == ".." {
            return Err(Error::invalid_input(format!(
                "key {key:?} is a dot segment, which object stores cannot name"
            )));
        }
        if key.len() > self.max_key_len {
            return Err(Error::invalid_input(format!(
                "key is {} bytes; this store allows at most {}",
                key.len(),
                self.max_key_len
            )));
        }
        if key.contains('\0') {
            return Err(Error::invalid_input("key contains a NUL byte"));
        }
        Ok(())
    }

    /// Checks a token against `max_token`.
    ///
    /// # Errors
    /// [`Error::TokenOutOfRange`].
    pub fn check_token(&self, token: FencingToken) -> Result<()> {
        if token > self.max_token {
            return Err(Error::TokenOutOfRange {
                token,
                max: self.max_token,
            });
        }
        Ok(())
    }

    /// Checks a whole write: key, token and value size.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] or [`Error::TokenOutOfRange`].
    pub fn check_write(&self, key: &str, token: FencingToken, value_len: usize) -> Result<()> {
        self.check_key(key)?;
        self.check_token(token)?;
        if value_len > self.max_value_len {
            return Err(Error::invalid_input(format!(
                "value is {value_len} bytes; this store allows at most {}",
                self.max_value_len
            )));
        }
        Ok(())
    }
}

/// Storage that remembers, per key, the highest fencing token it has
/// accepted (the *mark*) and refuses writes below it.
///
/// Usable as `Arc<dyn FencedStore>`.
///
/// # Contract
/// Every implementation guarantees, and `fencing-testkit`'s store suite
/// checks:
/// 1. **`token >= mark` is accepted, `token < mark` is refused.** Equal is
///    accepted: one holder writes many times with the same token.
/// 2. **Accepting raises the mark atomically with the write**: no other
///    writer can slip between the check and the write.
/// 3. **A refusal applies nothing** (value and mark unchanged) and is
///    [`Error::StaleToken`] naming the key, the token presented and the mark.
/// 4. **[`fence`](Self::fence) advances the mark without writing a value**,
///    so a new holder can shut out a zombie before its first write. A fence
///    with a lower token is itself refused as stale.
/// 5. **Scope is one key**: there are no multi-key transactions.
/// 6. **[`delete`](Self::delete) keeps the mark**: the value goes, the mark
///    stays, so a zombie cannot recreate the key with an old token.
/// 7. **Bad input writes nothing**: an empty or oversize key, a value over
///    the limit or a token over [`Limits::max_token`] is refused before any
///    request with [`Error::InvalidInput`] or [`Error::TokenOutOfRange`].
/// 8. **A floor refuses on every key** (stores that keep one: SQL, memory):
///    once [`raise_floor`](Self::raise_floor) set it, every write, fence
///    and delete with a token at or below it is refused as stale, on keys
///    that were never written too, in the same atomic step as the mark's
///    check. It only rises. The marks it covers (keys with no value and a
///    mark at or below it) may then be removed
///    ([`remove_floored_marks`](Self::remove_floored_marks)) without a
///    stale token getting through where they were. DynamoDB checks it
///    where a key has no mark (never written, or its mark removed): a key
///    with a mark keeps its mark's rule, so there a token between the mark
///    and the floor is still accepted; what removing marks needs holds.
#[async_trait]
pub trait FencedStore: Send + Sync + Debug {
    /// A short name for messages, e.g. `"s3"`.
    fn name(&self) -> &'static str;

    /// What this store accepts.
    fn limits(&self) -> Limits;

    /// Writes `value` under `key` if `token >= mark`, raising the mark to
    /// `token`.
    ///
    /// # Errors
    /// [`Error::StaleToken`] if `token < mark`; nothing is written.
    async fn put(&self, key: &str, value: Bytes, token: FencingToken) -> Result<()>;

    /// The value and mark, or `None` if the key has no value (never written,
    /// deleted, or only fenced).
    async fn get(&self, key: &str) -> Result<Option<Versioned>>;

    /// Raises the mark to `token` without writing a value; returns the mark.
    ///
    /// # Errors
    /// [`Error::StaleToken`] if `token < mark`.
    async fn fence(&self, key: &str, token: FencingToken) -> Result<FencingToken>;

    /// The mark, or `None` if the key was never written or fenced.
    async fn mark(&self, key: &str) -> Result<Option<FencingToken>>;

    /// Removes the value if `token >= mark`, keeping (and raising) the mark.
    ///
    /// # Errors
    /// [`Error::StaleToken`] if `token < mark`; nothing is deleted.
    async fn delete(&self, key: &str, token: FencingToken) -> Result<()>;

    /// The store's floor (clause 8): every token at or below it is refused
    /// on every key. `None` if none was ever raised.
    ///
    /// # Errors
    /// [`Error::Unsupported`] from a store that keeps no floor (the
    /// default: the object stores, whose conditional writes name one
    /// object and so cannot check a store-wide floor in the same step).
    async fn floor(&self) -> Result<Option<FencingToken>> {
        Err(Error::Unsupported {
            backend: self.name(),
            operation: "floor",
        })
    }

    /// Raises the store's floor to `floor` (clause 8) and returns it. A
    /// floor is never lowered: asking for one below the current floor is
    /// refused, and asking for the same one again is answered with it.
    ///
    /// What it is for: a long-lived service writes under many keys (one
    /// per task, per job), and each key keeps its mark for ever, after a
    /// delete too. Once no holder can still carry a token at or below
    /// `floor` (every lease that old has expired: with tokens seeded at
    /// the backend's clock, the token of a grant made before the oldest
    /// lease that may still run), raising the floor lets
    /// [`remove_floored_marks`](Self::remove_floored_marks) drop the
    /// marks it covers. Raising it also cuts off every holder at or
    /// below it, on every key: pick it below every live holder's token.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a floor below the current one;
    /// [`Error::TokenOutOfRange`] for one at or above
    /// [`Limits::max_token`] (a token above it must stay possible);
    /// [`Error::Unsupported`] from a store that keeps no floor.
    async fn raise_floor(&self, floor: FencingToken) -> Result<FencingToken> {
        let _ = floor;
        Err(Error::Unsupported {
            backend: self.name(),
            operation: "raise_floor",
        })
    }

    /// Removes up to `most` marks that the floor covers: keys with no value
    /// (deleted, or only fenced) whose mark is at or below the floor.
    /// Returns how many went; call again until it answers 0. Keys holding
    /// a value keep their mark with it. A write racing the removal is
    /// judged by the floor, so nothing stale gets through.
    ///
    /// # Errors
    /// [`Error::Unsupported`] from a store that keeps no floor.
    async fn remove_floored_marks(&self, most: u32) -> Result<u64> {
        let _ = most;
        Err(Error::Unsupported {
            backend: self.name(),
            operation: "remove_floored_marks",
        })
    }

    /// Proves that the server enforces what this store relies on: the
    /// generic probe ([`safety::probe_store`] on [`safety::PROBE_KEY`]:
    /// a lower token is refused and the refusal changes nothing), plus, on
    /// object stores, that a write conditioned on a version that cannot
    /// match fails and a second create-only write fails. `fence doctor`
    /// prints the checks.
    ///
    /// Writes to [`safety::PROBE_KEY`], which keeps a mark afterwards.
    ///
    /// # Errors
    /// A failure that kept the probe from running. Findings, safe or not,
    /// are [`SafetyCheck`]s.
    async fn verify(&self) -> Result<Vec<SafetyCheck>> {
        safety::probe_store(self).await
    }
}
