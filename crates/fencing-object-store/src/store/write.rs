//! Writes: object_store's put modes translated into the core's
//! [conditional-write engine](fencing_core::adapter::cas), and its ends
//! back into object_store's errors. The engine reads the frame, refuses a
//! stale token, writes conditionally on the version read, and reads again
//! when another writer got in between; this file is its one read and one
//! conditional write on an `ObjectStore`.

use fencing_core::adapter::blob::{BlobMeta, frame};
use fencing_core::adapter::cas::{
    self, CONTENDED_WRITE_MAX, End, Engine, Found, Frame, Intent, Outcome, Payload, Wrote,
};
use fencing_core::{Error, FencingToken};
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore, PutMode, PutOptions, PutPayload, PutResult, Result};

use super::{FencedObjectStore, HEADER};
use crate::error::{FENCED, into_store, refused_before_applying, was_retried};
use crate::version::{self, Ver};

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
        let intent = match &options.mode {
            PutMode::Overwrite => Intent::Put {
                small: value.content_length() <= CONTENDED_WRITE_MAX,
            },
            PutMode::Create => Intent::Create,
            PutMode::Update(expected) => Intent::Update(Ver(expected.clone())),
        };
        self.run(path, token, intent, value, options).await
    }

    /// `delete`: a tombstone at `token`, which keeps the mark.
    pub(super) async fn delete_fenced(&self, path: &Path, token: FencingToken) -> Result<()> {
        self.limits
            .check_write(path.as_ref(), token, 0)
            .map_err(into_store)?;
        let options = PutOptions::default();
        self.run(path, token, Intent::Delete, PutPayload::default(), options)
            .await
            .map(|_| ())
    }

    /// The engine run on `path`, its end told in object_store's terms.
    async fn run(
        &self,
        path: &Path,
        token: FencingToken,
        intent: Intent<Ver>,
        value: PutPayload,
        options: PutOptions,
    ) -> Result<PutResult> {
        let key = path.as_ref();
        let engine = Engine::new(token, intent, self.known.get(key), self.max_attempts);
        let mut port = Port {
            store: self,
            path,
            value,
            options,
            written: None,
        };
        match cas::run(&mut port, &self.known, key, engine).await {
            // The store's own answer, extensions and all.
            Outcome::Ended(End::Written(_)) => Ok(port.written.unwrap_or(PutResult {
                e_tag: None,
                version: None,
                extensions: Default::default(),
            })),
            // A delete at this token already.
            Outcome::Ended(End::Unchanged) => Ok(PutResult {
                e_tag: None,
                version: None,
                extensions: Default::default(),
            }),
            Outcome::Ended(End::Stale { current }) => Err(into_store(Error::StaleToken {
                key: key.to_owned(),
                presented: token,
                current,
            })),
            // What the caller's protocol expects (an engine reads it as
            // "another writer got there first" and stops); a stale token
            // rides along as its source.
            Outcome::Ended(End::Exists { mark }) => {
                let source: Box<dyn std::error::Error + Send + Sync> = if token < mark {
                    Box::new(Error::StaleToken {
                        key: key.to_owned(),
                        presented: token,
                        current: mark,
                    })
                } else {
                    "an object is there (PutMode::Create)".into()
                };
                Err(object_store::Error::AlreadyExists {
                    path: key.to_owned(),
                    source,
                })
            }
            Outcome::Ended(End::NotMatched) => Err(object_store::Error::Precondition {
                path: key.to_owned(),
                source: "the object is not at the expected version".into(),
            }),
            Outcome::Ended(End::Contention { attempts }) => Err(into_store(Error::Contention {
                key: key.to_owned(),
                attempts,
            })),
            Outcome::Ended(End::Unknown) => Err(into_store(Error::outcome_unknown(
                FENCED,
                "conditional put",
                "no answer says whether it was applied",
            ))),
            Outcome::Unknown { first, then } => {
                let then = then.map_or_else(
                    || "nothing after it settled whether it was applied".to_owned(),
                    |e| fencing_core::error_chain(&e),
                );
                Err(into_store(Error::outcome_unknown(
                    FENCED,
                    "conditional put",
                    fencing_core::redact::redact_text(&format!(
                        "{}; then: {then}",
                        fencing_core::error_chain(&first),
                    )),
                )))
            }
            Outcome::Failed(e) => Err(e),
        }
    }
}

/// One call's way onto the store: the read and the conditional put the
/// engine asks for.
struct Port<'a, S> {
    store: &'a FencedObjectStore<S>,
    path: &'a Path,
    /// The caller's value, unframed.
    value: PutPayload,
    /// The caller's options (attributes, tags, extensions); the mode is
    /// the engine's.
    options: PutOptions,
    /// The store's answer to the write that landed.
    written: Option<PutResult>,
}

impl<S: ObjectStore> cas::Port for Port<'_, S> {
    type Version = Ver;
    type Error = object_store::Error;

    fn name(&self) -> &'static str {
        FENCED
    }

    async fn read(&mut self, _body: bool) -> Result<Option<Found<Ver>>> {
        let current = self
            .store
            .read_head(self.path, &GetOptions::new(), HEADER)
            .await?;
        Ok(current.map(|c| Found {
            version: Ver(c.version),
            mark: c.mark,
            live: c.has_value,
        }))
    }

    async fn write(
        &mut self,
        on: Option<Ver>,
        frame: Frame,
        payload: Payload,
    ) -> Result<Wrote<Ver, object_store::Error>> {
        let frame = BlobMeta::from(frame);
        let head = std::iter::once(frame::encode(frame, &[]));
        let body: PutPayload = match payload {
            Payload::Value => head.chain(self.value.iter().cloned()).collect(),
            // No fence here: a marker is all a body without the value is.
            Payload::Empty | Payload::AsRead => head.collect(),
        };
        let options = PutOptions {
            mode: on.map_or(PutMode::Create, |v| PutMode::Update(v.0)),
            ..self.options.clone()
        };
        match self.store.store.put_opts(self.path, body, options).await {
            Ok(result) => {
                let version = Ver(version::of_put(&result));
                self.written = Some(result);
                Ok(Wrote::Written(Some(version)))
            }
            Err(
                e @ (object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. }),
            ) => Ok(if was_retried(&e) {
                // object_store sent it twice: the first may have landed.
                Wrote::Unknown(e)
            } else {
                Wrote::Lost
            }),
            // A transport failure after sending, or an answer that does
            // not say (object_store tells no more): the write may have
            // landed. A 4xx refusal was not applied.
            Err(e @ object_store::Error::Generic { .. }) if !refused_before_applying(&e) => {
                Ok(Wrote::Unknown(e))
            }
            Err(e) => Err(e),
        }
    }
}
