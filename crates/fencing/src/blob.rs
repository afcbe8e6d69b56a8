//! Fencing on object stores: one read → check → conditional-write loop,
//! shared by every blob backend (S3, GCS, Azure, in-memory).
//!
//! Object stores have no "write if the stored token is lower" operation, but
//! they do have compare-and-swap on an object version (an ETag or a
//! generation). [`BlobStore`] keeps the token in the object's metadata,
//! reads the version and token, refuses a stale token itself, and writes
//! *conditionally on the version it read*. If another writer got in between,
//! the precondition fails and the loop reads again and decides again. A
//! backend implements only [`BlobBackend`].
//!
//! A backend's version must change whenever the token changes. S3's ETag is
//! the MD5 of the body, so a backend whose version covers only the body must
//! make the token part of what it stores (see `fencing-s3`).

use std::collections::HashMap;
use std::fmt::{self, Debug};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::{Error, FencedStore, FencingToken, Limits, Result, Versioned};

/// The metadata key holding the token.
pub const TOKEN_METADATA_KEY: &str = "fencing-token";
/// The metadata key saying whether the object holds a value or only a mark.
pub const STATE_METADATA_KEY: &str = "fencing-state";

/// An object's version as its backend names it: an ETag, a generation.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct BlobVersion(String);

impl BlobVersion {
    /// Wraps a backend's version string.
    pub fn new(version: impl Into<String>) -> Self {
        Self(version.into())
    }

    /// The version string, as the backend's precondition expects it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for BlobVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlobVersion({})", self.0)
    }
}

/// What fencing stores beside an object's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobMeta {
    /// The object's mark.
    pub token: FencingToken,
    /// `false` for a marker left by `fence` on an absent key or by `delete`.
    pub has_value: bool,
}

impl BlobMeta {
    /// Metadata for an object that carries none (written by someone else):
    /// mark zero, so any token may overwrite it.
    pub const UNFENCED: Self = Self {
        token: FencingToken::ZERO,
        has_value: true,
    };

    /// The metadata as `(key, value)` pairs, for backends with string
    /// metadata.
    pub fn to_pairs(self) -> [(&'static str, String); 2] {
        let state = if self.has_value { "value" } else { "marker" };
        [
            (TOKEN_METADATA_KEY, self.token.to_string()),
            (STATE_METADATA_KEY, state.to_owned()),
        ]
    }

    /// Reads the metadata back from string pairs; keys are matched
    /// case-insensitively (HTTP headers). An object without our keys is
    /// [`BlobMeta::UNFENCED`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the token is present but unreadable:
    /// treating it as zero would let a stale writer in.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self> {
        let mut meta = Self::UNFENCED;
        for (key, value) in pairs {
            if key.eq_ignore_ascii_case(TOKEN_METADATA_KEY) {
                meta.token = value.parse().map_err(|_| {
                    Error::invalid_input(format!(
                        "unreadable {TOKEN_METADATA_KEY} metadata {value:?}"
                    ))
                })?;
            } else if key.eq_ignore_ascii_case(STATE_METADATA_KEY) {
                meta.has_value = value != "marker";
            }
        }
        Ok(meta)
    }
}

/// An object's version and fencing metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobHead {
    /// The version a conditional write must match.
    pub version: BlobVersion,
    /// The stored mark.
    pub meta: BlobMeta,
}

/// An object read whole.
#[derive(Clone, Debug)]
pub struct Blob {
    /// Version and metadata.
    pub head: BlobHead,
    /// The body.
    pub body: Bytes,
}

/// The condition a write is made under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// The object must not exist (`If-None-Match: *`, `ifGenerationMatch=0`).
    Absent,
    /// The object must still be at this version (`If-Match`,
    /// `ifGenerationMatch`).
    Matches(BlobVersion),
}

/// The result of a conditional write that reached the backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Written; the object's new version.
    Written(BlobVersion),
    /// The precondition did not hold (HTTP 412, Azure's 409 on create, S3's
    /// 409 on a concurrent conditional write). Nothing was written.
    PreconditionFailed,
}

/// The small trait an object store implements to be fenced by [`BlobStore`].
#[async_trait]
pub trait BlobBackend: Send + Sync + Debug {
    /// A short name for messages, e.g. `"gcs"`.
    fn name(&self) -> &'static str;

    /// The backend's key, value and token limits.
    fn limits(&self) -> Limits;

    /// The object's version and metadata, or `None` if absent.
    async fn head(&self, key: &str) -> Result<Option<BlobHead>>;

    /// The whole object, or `None` if absent.
    async fn read(&self, key: &str) -> Result<Option<Blob>>;

    /// Writes `body` with `meta` if `precondition` holds, in one request.
    /// A failed precondition is [`WriteOutcome::PreconditionFailed`], not an
    /// error.
    async fn write(
        &self,
        key: &str,
        body: Bytes,
        meta: BlobMeta,
        precondition: &Precondition,
    ) -> Result<WriteOutcome>;
}

/// A [`FencedStore`] on any [`BlobBackend`]: the shared compare-and-swap
/// loop.
///
/// A write reads the object's version and token, refuses a stale token, and
/// writes conditionally on the version it read (create-only if absent). On a
/// failed precondition it reads again and decides again, up to
/// [`max_attempts`](Self::with_max_attempts), then returns
/// [`Error::Contention`].
///
/// **Fast path**: after a write, the store remembers the object's new
/// version, so the same holder's next write skips the read and goes straight
/// to the conditional write (one request). If someone else wrote meanwhile,
/// the precondition fails and the loop falls back to reading.
///
/// `fence` and `delete` rewrite the object (a marker with an empty body
/// when there is no value), so the mark stays with the key.
pub struct BlobStore<B> {
    backend: B,
    max_attempts: u32,
    known: Mutex<HashMap<String, (BlobVersion, FencingToken)>>,
}

/// How many versions a store remembers for the fast path.
const KNOWN_VERSIONS_CAP: usize = 4096;

impl<B: BlobBackend> BlobStore<B> {
    /// A fenced store on `backend`, retrying a lost race up to 32 times.
    pub fn new(backend: B) -> Self {
        Self {
            backend,
            max_attempts: 32,
            known: Mutex::new(HashMap::new()),
        }
    }

    /// Sets how many conditional writes one call may try.
    #[must_use]
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    fn known(&self, key: &str) -> Option<(BlobVersion, FencingToken)> {
        self.known.lock().expect("poisoned").get(key).cloned()
    }

    fn remember(&self, key: &str, entry: Option<(BlobVersion, FencingToken)>) {
        let mut known = self.known.lock().expect("poisoned");
        match entry {
            Some(entry) => {
                if known.len() >= KNOWN_VERSIONS_CAP && !known.contains_key(key) {
                    known.clear();
                }
                known.insert(key.to_owned(), entry);
            }
            None => {
                known.remove(key);
            }
        }
    }

    /// The loop shared by `put`, `fence` and `delete`. `next` sees the
    /// current object (or `None`) and returns what to write, or `None` when
    /// nothing needs writing.
    async fn update<F>(
        &self,
        key: &str,
        token: FencingToken,
        need_body: bool,
        next: F,
    ) -> Result<()>
    where
        F: Fn(Option<&Blob>) -> Option<(Bytes, BlobMeta)> + Send + Sync,
    {
        // The fast path needs no body, so it only serves puts.
        let mut cached = if need_body {
            None
        } else {
            self.known(key).filter(|(_, mark)| token >= *mark)
        };
        for attempt in 1..=self.max_attempts {
            let (current, precondition) = match cached.take() {
                Some((version, mark)) => {
                    let head = BlobHead {
                        version: version.clone(),
                        meta: BlobMeta {
                            token: mark,
                            has_value: true,
                        },
                    };
                    (
                        Some(Blob {
                            head,
                            body: Bytes::new(),
                        }),
                        Precondition::Matches(version),
                    )
                }
                None => {
                    let current = if need_body {
                        self.backend.read(key).await?
                    } else {
                        self.backend.head(key).await?.map(|head| Blob {
                            head,
                            body: Bytes::new(),
                        })
                    };
                    let precondition = current.as_ref().map_or(Precondition::Absent, |b| {
                        Precondition::Matches(b.head.version.clone())
                    });
                    (current, precondition)
                }
            };
            if let Some(blob) = &current {
                let mark = blob.head.meta.token;
                if token < mark {
                    self.remember(key, Some((blob.head.version.clone(), mark)));
                    return Err(Error::StaleToken {
                        key: key.to_owned(),
                        presented: token,
                        current: mark,
                    });
                }
            }
            let Some((body, meta)) = next(current.as_ref()) else {
                return Ok(());
            };
            match self.backend.write(key, body, meta, &precondition).await? {
                WriteOutcome::Written(version) => {
                    self.remember(key, Some((version, meta.token)));
                    return Ok(());
                }
                WriteOutcome::PreconditionFailed => {
                    self.remember(key, None);
                    tracing::debug!(
                        key,
                        attempt,
                        backend = self.backend.name(),
                        "lost a race; reading again"
                    );
                    tokio::time::sleep(retry_pause(attempt)).await;
                }
            }
        }
        Err(Error::Contention {
            key: key.to_owned(),
            attempts: self.max_attempts,
        })
    }
}

/// A short, jittered pause so racing writers do not collide in lockstep.
fn retry_pause(attempt: u32) -> Duration {
    let jitter = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() % 1000);
    Duration::from_micros(u64::from(attempt.min(10)) * 500 + u64::from(jitter))
}

impl<B: BlobBackend> Debug for BlobStore<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobStore")
            .field("backend", &self.backend)
            .field("max_attempts", &self.max_attempts)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<B: BlobBackend> FencedStore for BlobStore<B> {
    fn name(&self) -> &'static str {
        self.backend.name()
    }

    fn limits(&self) -> Limits {
        self.backend.limits()
    }

    async fn put(&self, key: &str, value: Bytes, token: FencingToken) -> Result<()> {
        self.limits().check_write(key, token, value.len())?;
        let meta = BlobMeta {
            token,
            has_value: true,
        };
        self.update(key, token, false, |_| Some((value.clone(), meta)))
            .await
    }

    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        self.limits().check_key(key)?;
        Ok(self.backend.read(key).await?.and_then(|blob| {
            blob.head.meta.has_value.then_some(Versioned {
                value: blob.body,
                token: blob.head.meta.token,
            })
        }))
    }

    async fn fence(&self, key: &str, token: FencingToken) -> Result<FencingToken> {
        self.limits().check_write(key, token, 0)?;
        self.update(key, token, true, |current| match current {
            Some(blob) if blob.head.meta.token == token => None,
            Some(blob) => Some((
                blob.body.clone(),
                BlobMeta {
                    token,
                    has_value: blob.head.meta.has_value,
                },
            )),
            None => Some((
                Bytes::new(),
                BlobMeta {
                    token,
                    has_value: false,
                },
            )),
        })
        .await?;
        Ok(token)
    }

    async fn mark(&self, key: &str) -> Result<Option<FencingToken>> {
        self.limits().check_key(key)?;
        Ok(self.backend.head(key).await?.map(|head| head.meta.token))
    }

    async fn delete(&self, key: &str, token: FencingToken) -> Result<()> {
        self.limits().check_write(key, token, 0)?;
        self.update(key, token, false, |current| match current {
            Some(blob) if !blob.head.meta.has_value && blob.head.meta.token == token => None,
            _ => Some((
                Bytes::new(),
                BlobMeta {
                    token,
                    has_value: false,
                },
            )),
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_round_trips_and_refuses_garbage() {
        let meta = BlobMeta {
            token: FencingToken::new(34),
            has_value: false,
        };
        let pairs = meta.to_pairs();
        let back = BlobMeta::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str()))).unwrap();
        assert_eq!(back, meta);
        assert_eq!(
            BlobMeta::from_pairs([("Content-Type", "x")]).unwrap(),
            BlobMeta::UNFENCED
        );
        assert_eq!(
            BlobMeta::from_pairs([("FENCING-TOKEN", "7")])
                .unwrap()
                .token,
            FencingToken::new(7)
        );
        assert!(BlobMeta::from_pairs([("fencing-token", "seven")]).is_err());
    }
}
