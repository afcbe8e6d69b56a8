//! Writes: OpenDAL's write conditions translated into the core's
//! [conditional-write engine](fencing_core::adapter::cas) (which reads the
//! frame, refuses a stale token, writes conditionally on the ETag read or
//! on absence, and reads again when another writer got in between), and its
//! ends back into OpenDAL's errors. Deletes are writes of a tombstone;
//! copies, a read and a write.

use fencing_core::adapter::blob::{BlobMeta, frame};
use fencing_core::adapter::cas::{
    self, CONTENDED_WRITE_MAX, End, Engine, Found, Frame, Intent, Outcome, Payload, Wrote,
};
use fencing_core::{Error, FencingToken};
use opendal::OperationContext;
use opendal::options::{ReadOptions, WriteOptions};
use opendal::raw::oio::ReadStream as _;
use opendal::raw::{OpRead, OpStat, OpWrite, Service as _, oio};
use opendal::{Buffer, BytesRange, ErrorKind, Metadata, Result};

use crate::core::{Core, ETag, HEADER, etag_eq};
use crate::error::{LAYER, condition_with, into_dal};
use crate::head::value_meta;

mod cond;
mod writer;

use cond::condition_not_match;
pub(crate) use cond::{Attrs, Cond};
pub(crate) use writer::FencedWriter;

impl Core {
    /// `value` framed with `token` (a tombstone for the delete conditions),
    /// written at `path` under `cond` and the mark rule by the core's
    /// [engine](fencing_core::adapter::cas). Returns the stored object's
    /// metadata (its size counts the frame).
    pub(crate) async fn put(
        &self,
        ctx: &OperationContext,
        path: &str,
        value: Buffer,
        token: FencingToken,
        cond: &Cond,
        attrs: &Attrs,
    ) -> Result<Metadata> {
        self.can_fence()?;
        self.check_write(path, token, value.len())?;
        let etag = |e: &String| ETag(e.clone());
        let intent = match cond {
            Cond::Overwrite => Intent::Put {
                small: value.len() <= CONTENDED_WRITE_MAX,
            },
            Cond::Create => Intent::Create,
            Cond::Match(expected) => Intent::Update(etag(expected)),
            Cond::NoneMatch(unwanted) => Intent::NoneMatch(etag(unwanted)),
            Cond::Delete => Intent::Delete,
            Cond::DeleteMatch(expected) => Intent::DeleteMatch(etag(expected)),
        };
        // A create reads first: a refused write whose object holds our very
        // bytes is taken as ours (`landed`), which a create written blind
        // would also take of an object created earlier with the same bytes.
        let engine = Engine::new(token, intent, self.known.get(path), self.max_attempts)
            .read_before_create();
        let mut port = Port {
            core: self,
            ctx,
            path,
            value,
            attrs,
            written: None,
        };
        match cas::run(&mut port, &self.known, path, engine).await {
            Outcome::Ended(End::Written(_)) => Ok(port
                .written
                .unwrap_or_else(|| opendal::MetadataBuilder::file(HEADER).build())),
            // Deleted at this token already.
            Outcome::Ended(End::Unchanged) => Ok(opendal::MetadataBuilder::file(HEADER).build()),
            Outcome::Ended(End::Stale { current }) => Err(into_dal(Error::StaleToken {
                key: path.to_owned(),
                presented: token,
                current,
            })),
            // What the caller's protocol stops on (an object is there); our
            // stale token stays reachable as its source.
            Outcome::Ended(End::Exists { mark }) if token < mark => Err(condition_with(
                "an object is there (if_not_exists), written by a newer holder; nothing was \
                 written",
                path,
                Error::StaleToken {
                    key: path.to_owned(),
                    presented: token,
                    current: mark,
                },
            )),
            Outcome::Ended(End::Exists { .. }) => Err(condition_not_match(
                path,
                "an object is there (if_not_exists); nothing was written",
            )),
            Outcome::Ended(End::NotMatched) => Err(condition_not_match(
                path,
                match cond {
                    Cond::NoneMatch(_) => {
                        "the object is at the ETag of if_none_match; nothing was written"
                    }
                    _ => "the object is not at the ETag of if_match",
                },
            )),
            Outcome::Ended(End::Contention { attempts }) => Err(into_dal(Error::Contention {
                key: path.to_owned(),
                attempts,
            })),
            Outcome::Ended(End::Unknown) => Err(into_dal(Error::outcome_unknown(
                LAYER,
                format!("conditional write of {path}"),
                "no answer says whether it was applied",
            ))),
            Outcome::Unknown { first, .. } => Err(into_dal(Error::outcome_unknown(
                LAYER,
                format!("conditional write of {path}"),
                first,
            ))),
            Outcome::Failed(e) => Err(e),
        }
    }

    /// `from`'s value and attributes written at `to` under `token`
    /// and `cond`: copy and rename.
    pub(crate) async fn copy_fenced(
        &self,
        ctx: &OperationContext,
        from: &str,
        to: &str,
        source_version: Option<String>,
        cond: Cond,
        token: FencingToken,
    ) -> Result<Metadata> {
        let (_, args, _) = ReadOptions {
            version: source_version,
            ..ReadOptions::default()
        }
        .into();
        let reader = self.inner.read(ctx, from, args.clone())?;
        let (rp, mut stream) = self
            .open_value(ctx, from, &args, &reader, BytesRange::new(0, None))
            .await?;
        let value = stream.read_all().await?;
        let source = rp
            .into_metadata()
            .unwrap_or_else(|| opendal::MetadataBuilder::file(value.len() as u64).build());
        let attrs = Attrs::of_source(&source, &self.inner.capability());
        let stored = self.put(ctx, to, value, token, &cond, &attrs).await?;
        Ok(value_meta(stored, HEADER))
    }

    /// A tombstone at `token` (on the live object at `if_match`, if given).
    pub(crate) async fn delete_fenced(
        &self,
        ctx: &OperationContext,
        path: &str,
        token: FencingToken,
        if_match: Option<&str>,
    ) -> Result<()> {
        let cond = match if_match {
            Some(etag) => Cond::DeleteMatch(etag.to_owned()),
            None => Cond::Delete,
        };
        self.put(ctx, path, Buffer::new(), token, &cond, &Attrs::default())
            .await
            .map(|_| ())
    }
}

/// One call's way through the stack: the read and the conditional write
/// the engine asks for.
struct Port<'a> {
    core: &'a Core,
    ctx: &'a OperationContext,
    path: &'a str,
    /// The caller's value, unframed.
    value: Buffer,
    attrs: &'a Attrs,
    /// What the service answered of the write that landed.
    written: Option<Metadata>,
}

impl cas::Port for Port<'_> {
    type Version = ETag;
    type Error = opendal::Error;

    fn name(&self) -> &'static str {
        LAYER
    }

    async fn read(&mut self, _body: bool) -> Result<Option<Found<ETag>>> {
        let head = self
            .core
            .read_head(self.ctx, self.path, OpRead::new(), HEADER)
            .await?;
        head.map(|head| {
            let etag = head.etag().ok_or_else(no_etag)?;
            Ok(Found {
                version: ETag(etag.to_owned()),
                mark: head.mark,
                live: head.has_value,
            })
        })
        .transpose()
    }

    /// One conditional write: on the object's ETag `on`, or on its absence.
    async fn write(
        &mut self,
        on: Option<ETag>,
        frame: Frame,
        payload: Payload,
    ) -> Result<Wrote<ETag, opendal::Error>> {
        let frame = BlobMeta::from(frame);
        let head = std::iter::once(frame::encode(frame, &[]));
        let body: Buffer = match payload {
            Payload::Value => head.chain(self.value.clone()).collect(),
            // No fence here: a marker is all a body without the value is.
            Payload::Empty | Payload::AsRead => head.collect(),
        };
        let (ctx, path, attrs) = (self.ctx, self.path, self.attrs);
        let inner = &self.core.inner;
        let cap = inner.capability();
        let absent = on.is_none();
        let options = WriteOptions {
            content_type: attrs.content_type.clone(),
            content_disposition: attrs.content_disposition.clone(),
            content_encoding: attrs.content_encoding.clone(),
            cache_control: attrs.cache_control.clone(),
            user_metadata: attrs.user_metadata.clone(),
            concurrent: attrs.concurrent,
            if_match: on.map(|e| e.0),
            if_not_exists: absent && cap.write_with_if_not_exists,
            if_none_match: (absent && !cap.write_with_if_not_exists).then(|| "*".to_owned()),
            ..WriteOptions::default()
        };
        let (args, _) = OpWrite::from_options(&cap, options)?;
        let mut w = inner.write(ctx, path, args)?;
        if let Err(e) = oio::Write::write(&mut w, body.clone()).await {
            let _ = oio::Write::abort(&mut w).await;
            return lost_or(e, false);
        }
        let sent = match oio::Write::close(&mut w).await {
            Ok(meta) => return Ok(self.landed(meta)),
            Err(e) => {
                let _ = oio::Write::abort(&mut w).await;
                lost_or(e, true)?
            }
        };
        // A retry below the layer (a RetryLayer under it, a retrying
        // transport) can send the write again after its first try landed:
        // the repeat then fails its condition against our own write. The
        // object at the ETag of this very body (S3's single-PUT ETag is the
        // MD5 of the body) is ours: written.
        match inner.stat(ctx, path, OpStat::new()).await {
            Ok(rp) => {
                let meta = rp.into_metadata();
                Ok(if landed(meta.etag(), &body) {
                    self.landed(meta)
                } else {
                    sent
                })
            }
            Err(_) => Ok(sent),
        }
    }
}

impl Port<'_> {
    fn landed(&mut self, meta: Metadata) -> Wrote<ETag, opendal::Error> {
        let etag = meta.etag().map(|e| ETag(e.to_owned()));
        self.written = Some(meta);
        Wrote::Written(etag)
    }
}

/// Whether the object's ETag `etag` is S3's ETag of a single `PUT` of
/// `body` (its MD5, hex, quoted): the write of `body` landed.
fn landed(etag: Option<&str>, body: &Buffer) -> bool {
    let chunks: Vec<_> = body.clone().collect();
    let ours = crate::md5::etag_of(chunks.iter().map(|c| c.as_ref()));
    etag.is_some_and(|etag| etag_eq(etag, &ours))
}

/// A lost race, or the write's error: a transport failure after the write
/// was sent may have been applied.
fn lost_or(err: opendal::Error, sent: bool) -> Result<Wrote<ETag, opendal::Error>> {
    match err.kind() {
        ErrorKind::ConditionNotMatch | ErrorKind::AlreadyExists | ErrorKind::Conflict => {
            Ok(Wrote::Lost)
        }
        _ if sent && err.is_temporary() => Ok(Wrote::Unknown(err)),
        _ => Err(err),
    }
}

fn no_etag() -> opendal::Error {
    into_dal(Error::backend(
        LAYER,
        false,
        "the service answered a read without the object's ETag, which a fenced write is \
         conditioned on; nothing was written",
    ))
}

#[cfg(test)]
mod tests {
    use fencing_core::FencingToken;
    use fencing_core::adapter::blob::{BlobMeta, frame};
    use opendal::Buffer;

    use super::landed;

    #[test]
    fn a_write_landed_when_the_object_is_at_the_md5_of_its_framed_body() {
        let meta = BlobMeta {
            token: FencingToken::new(9),
            has_value: true,
        };
        // The framed body as put sends it: the frame, then the value's chunks.
        let body: Buffer = [
            frame::encode(meta, &[]),
            "v2 of the ".into(),
            "manifest".into(),
        ]
        .into_iter()
        .collect();
        let whole = frame::encode(meta, b"v2 of the manifest");
        let etag = crate::md5::etag_of([whole.as_ref()]);
        assert!(landed(Some(&etag), &body));
        assert!(landed(Some(etag.trim_matches('"')), &body));
        // Another body (another token, another value): a lost race.
        let theirs = frame::encode(
            BlobMeta {
                token: FencingToken::new(10),
                ..meta
            },
            b"v2 of the manifest",
        );
        assert!(!landed(
            Some(&crate::md5::etag_of([theirs.as_ref()])),
            &body
        ));
        assert!(!landed(None, &body));
    }
}
