//! Writes: read the frame, refuse a stale token, write conditionally on
//! the version read, and read again when another writer got in between.

use std::time::Instant;

use fencing_core::adapter::blob::{BlobMeta, CONTENDED_WRITE_MAX, frame, retry_pause_after};
use fencing_core::{Error, FencingToken};
use object_store::path::Path;
use object_store::{
    GetOptions, ObjectStore, PutMode, PutOptions, PutPayload, PutResult, Result, UpdateVersion,
};

use super::read::Current;
use super::{FencedObjectStore, HEADER, Known};
use crate::error::{FENCED, into_store, refused_before_applying, was_retried};
use crate::version;

/// What one conditional write came to.
enum Attempt {
    Written(PutResult),
    /// The precondition failed: another writer got in between.
    Lost,
}

/// How a loop treats the object it finds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Intent {
    /// `PutMode::Overwrite`: any object, or none.
    Overwrite,
    /// `PutMode::Create`: none, or a tombstone (absent to the caller).
    Create,
    /// A delete: a tombstone, unless one at this token is there already.
    Delete,
}

impl<S: ObjectStore> FencedObjectStore<S> {
    /// `put_opts`: `value` framed with `token`, under the caller's mode.
    pub(super) async fn write(
        &self,
        path: &Path,
        value: PutPayload,
        token: FencingToken,
        options: PutOptions,
    ) -> Result<PutResult> {
        self.limits
            .check_write(path.as_ref(), token, value.content_length())
            .map_err(into_store)?;
        let meta = BlobMeta {
            token,
            has_value: true,
        };
        let body: PutPayload = std::iter::once(frame::encode(meta, &[]))
            .chain(value.iter().cloned())
            .collect();
        match options.mode.clone() {
            PutMode::Overwrite => {
                self.replace(path, token, body, options, Intent::Overwrite)
                    .await
            }
            PutMode::Create => {
                self.replace(path, token, body, options, Intent::Create)
                    .await
            }
            PutMode::Update(expected) => self.update(path, token, body, options, expected).await,
        }
    }

    /// `delete`: a tombstone at `token`, which keeps the mark.
    pub(super) async fn delete_fenced(&self, path: &Path, token: FencingToken) -> Result<()> {
        self.limits
            .check_write(path.as_ref(), token, 0)
            .map_err(into_store)?;
        let meta = BlobMeta {
            token,
            has_value: false,
        };
        let body = PutPayload::from_bytes(frame::encode(meta, &[]));
        self.replace(path, token, body, PutOptions::default(), Intent::Delete)
            .await
            .map(|_| ())
    }

    /// One conditional put; a failed precondition is [`Attempt::Lost`].
    async fn put_at(
        &self,
        path: &Path,
        body: &PutPayload,
        options: &PutOptions,
        at: Option<UpdateVersion>,
        unknown: &mut Option<object_store::Error>,
    ) -> Result<Attempt> {
        let mode = at.map_or(PutMode::Create, PutMode::Update);
        let options = PutOptions {
            mode,
            ..options.clone()
        };
        match self.store.put_opts(path, body.clone(), options).await {
            Ok(result) => Ok(Attempt::Written(result)),
            Err(
                e @ (object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. }),
            ) => {
                if was_retried(&e) {
                    // object_store sent it twice: the first may have landed.
                    *unknown = Some(e);
                }
                Ok(Attempt::Lost)
            }
            // A transport failure after sending, or an answer that does
            // not say (object_store tells no more): the write may have
            // landed. Reported, not retried: object_store has retried what
            // it could. A 4xx refusal was not applied.
            Err(e @ object_store::Error::Generic { .. }) if !refused_before_applying(&e) => {
                self.remember(path, None);
                Err(outcome(Some(e), not_applied()))
            }
            Err(e) => Err(e),
        }
    }

    /// The loop of `Overwrite`, `Create` and delete.
    async fn replace(
        &self,
        path: &Path,
        token: FencingToken,
        body: PutPayload,
        options: PutOptions,
        intent: Intent,
    ) -> Result<PutResult> {
        let previous = self.known(path);
        // Only a put of a value may skip the read: a delete must see the
        // object, and Create must know there is none.
        let small = body.content_length() <= CONTENDED_WRITE_MAX + frame::FRAME_HEADER_LEN;
        let mut cached = previous.clone().filter(|k| {
            intent == Intent::Overwrite && token >= k.mark && (k.trusted || (k.contended && small))
        });
        // Kept with the version for the next call's choice of fast path;
        // only a write on a version read in this call says anything new.
        let mut contended = previous.as_ref().is_some_and(|k| k.contended);
        // Create tries first without reading: absent is the common case,
        // and the store refuses it if not.
        let mut presume_absent = intent == Intent::Create;
        let mut unknown = None;
        for attempt in 1..=self.max_attempts {
            let from_cache = cached.is_some();
            let presumed = std::mem::take(&mut presume_absent);
            let current = match cached.take() {
                Some(known) => Some((known.version, known.mark, true)),
                None if presumed => None,
                None => match self.read_head(path, &GetOptions::new(), HEADER).await {
                    Ok(current) => current.map(|c| (c.version, c.mark, c.has_value)),
                    Err(e) => return Err(outcome(unknown, e)),
                },
            };
            if let Some((version, mark, has_value)) = &current {
                if intent == Intent::Create && *has_value {
                    // What the caller's protocol expects (an engine reads it
                    // as "another writer got there first" and stops); a
                    // stale token rides along as its source.
                    let source: Box<dyn std::error::Error + Send + Sync> = if token < *mark {
                        Box::new(Error::StaleToken {
                            key: path.to_string(),
                            presented: token,
                            current: *mark,
                        })
                    } else {
                        "an object is there (PutMode::Create)".into()
                    };
                    let exists = object_store::Error::AlreadyExists {
                        path: path.to_string(),
                        source,
                    };
                    return Err(outcome(unknown, exists));
                }
                if token < *mark {
                    // The version read and its mark, for the next put
                    // under contention (a tombstone's is no one's to write
                    // on without reading).
                    let known = has_value.then(|| Known {
                        version: version.clone(),
                        mark: *mark,
                        trusted: false,
                        contended,
                    });
                    self.remember(path, known);
                    let stale = Error::StaleToken {
                        key: path.to_string(),
                        presented: token,
                        current: *mark,
                    };
                    return Err(outcome(unknown, into_store(stale)));
                }
                if intent == Intent::Delete && !*has_value && *mark == token {
                    return Ok(PutResult {
                        e_tag: version.e_tag.clone(),
                        version: version.version.clone(),
                        extensions: Default::default(),
                    });
                }
            }
            let at = current.as_ref().map(|(version, ..)| version.clone());
            let sent = Instant::now();
            match self.put_at(path, &body, &options, at, &mut unknown).await? {
                Attempt::Written(result) => {
                    contended &= from_cache;
                    let trusted = from_cache
                        || match (&previous, &current) {
                            (None, _) => true,
                            (Some(p), Some((version, ..))) => p.version == *version,
                            (Some(_), None) => false,
                        };
                    // A tombstone's version is no one's to update or to
                    // write on without reading.
                    let known = (intent != Intent::Delete).then(|| Known {
                        version: version::of_put(&result),
                        mark: token,
                        trusted,
                        contended,
                    });
                    self.remember(path, known);
                    return Ok(result);
                }
                Attempt::Lost => {
                    contended |= !from_cache && !presumed;
                    self.remember(path, None);
                    tracing::debug!(%path, attempt, "lost a race; reading again");
                }
            }
            if !presumed {
                // At least about a round trip: the writes that raced ours
                // land before we read again (see `retry_pause_after`).
                tokio::time::sleep(retry_pause_after(attempt, sent.elapsed())).await;
            }
        }
        let contention = Error::Contention {
            key: path.to_string(),
            attempts: self.max_attempts,
        };
        Err(outcome(unknown, into_store(contention)))
    }

    /// `PutMode::Update(expected)`: the caller's compare-and-swap, and the
    /// mark rule on top. One request when the version is this store's own
    /// last write.
    async fn update(
        &self,
        path: &Path,
        token: FencingToken,
        body: PutPayload,
        options: PutOptions,
        expected: UpdateVersion,
    ) -> Result<PutResult> {
        let precondition = |why: &str| object_store::Error::Precondition {
            path: path.to_string(),
            source: why.to_owned().into(),
        };
        let known = self
            .known(path)
            .filter(|k| version::matches(&expected, &k.version));
        let mark = match known {
            Some(known) => known.mark,
            None => match self.read_head(path, &GetOptions::new(), HEADER).await? {
                Some(Current {
                    version: current,
                    mark,
                    has_value: true,
                    ..
                }) if version::matches(&expected, &current) => mark,
                _ => return Err(precondition("the object is not at the expected version")),
            },
        };
        if token < mark {
            self.remember(path, None);
            return Err(into_store(Error::StaleToken {
                key: path.to_string(),
                presented: token,
                current: mark,
            }));
        }
        let mut unknown = None;
        match self
            .put_at(path, &body, &options, Some(expected), &mut unknown)
            .await?
        {
            Attempt::Written(result) => {
                self.remember(
                    path,
                    Some(Known {
                        version: version::of_put(&result),
                        mark: token,
                        trusted: true,
                        contended: false,
                    }),
                );
                Ok(result)
            }
            Attempt::Lost => {
                self.remember(path, None);
                Err(outcome(
                    unknown,
                    precondition("the object is not at the expected version"),
                ))
            }
        }
    }
}

/// The error to report: `err`, or, when an earlier attempt may have been
/// applied, that the outcome is unknown (never "nothing was written").
fn outcome(unknown: Option<object_store::Error>, err: object_store::Error) -> object_store::Error {
    match unknown {
        None => err,
        Some(first) => into_store(Error::outcome_unknown(
            FENCED,
            "conditional put",
            fencing_core::redact::redact_text(&format!(
                "{}; then: {}",
                fencing_core::error_chain(&first),
                fencing_core::error_chain(&err)
            )),
        )),
    }
}

/// The second half of an unknown outcome's message.
fn not_applied() -> object_store::Error {
    object_store::Error::Generic {
        store: FENCED,
        source: "no answer says whether it was applied".into(),
    }
}
