//! Writes: read the frame, refuse a stale token, write conditionally on
//! the ETag read (or on absence), and read again when another writer got
//! in between. Deletes are writes of a tombstone; copies, a read and a
//! write.

use std::time::Instant;

use fencing_core::adapter::blob::{BlobMeta, frame, retry_pause_after};
use fencing_core::{Error, FencingToken};
use opendal::OperationContext;
use opendal::options::{ReadOptions, WriteOptions};
use opendal::raw::oio::ReadStream as _;
use opendal::raw::{OpRead, OpStat, OpWrite, Service as _, oio};
use opendal::{Buffer, BytesRange, ErrorKind, Metadata, Result};

use crate::error::{LAYER, condition_with, into_dal};
use crate::head::value_meta;
use crate::service::{Core, HEADER, Known};

mod cond;
mod writer;

use cond::condition_not_match;
pub(crate) use cond::{Attrs, Cond, etag_eq};
pub(crate) use writer::FencedWriter;

/// What one conditional write came to.
enum Attempt {
    Written(Metadata),
    /// The precondition failed: another writer got in between.
    Lost,
}

/// The object a write found.
struct Current {
    etag: Option<String>,
    mark: FencingToken,
    has_value: bool,
}

impl Core {
    /// `value` framed with `token` (a tombstone for the delete conditions),
    /// written at `path` under `cond` and the mark rule. Returns the stored
    /// object's metadata (its size counts the frame).
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
        let meta = BlobMeta {
            token,
            has_value: cond.has_value(),
        };
        let body: Buffer = std::iter::once(frame::encode(meta, &[]))
            .chain(value)
            .collect();
        match cond {
            Cond::Match(expected) | Cond::DeleteMatch(expected) => {
                self.update(ctx, path, token, &body, attrs, (expected, cond.has_value()))
                    .await
            }
            _ => self.replace(ctx, path, token, &body, attrs, cond).await,
        }
    }

    /// The loop of every condition but the caller's `if_match`.
    async fn replace(
        &self,
        ctx: &OperationContext,
        path: &str,
        token: FencingToken,
        body: &Buffer,
        attrs: &Attrs,
        cond: &Cond,
    ) -> Result<Metadata> {
        // Only a plain write may skip the read: a delete must see the
        // object, and the other conditions must know what is there.
        let mut cached = self
            .known(path)
            .filter(|k| *cond == Cond::Overwrite && token >= k.mark);
        for attempt in 1..=self.max_attempts {
            let current = match cached.take() {
                Some(known) => Some(Current {
                    etag: Some(known.etag),
                    mark: known.mark,
                    has_value: known.live,
                }),
                None => self
                    .read_head(ctx, path, OpRead::new(), HEADER)
                    .await?
                    .map(|head| Current {
                        etag: head.etag().map(str::to_owned),
                        mark: head.mark,
                        has_value: head.has_value,
                    }),
            };
            if let Some(current) = &current {
                if token < current.mark && *cond == Cond::Create && current.has_value {
                    // What the caller's protocol stops on (an object is
                    // there); our stale token stays reachable as its source.
                    self.remember(path, None);
                    return Err(condition_with(
                        "an object is there (if_not_exists), written by a newer holder; nothing \
                         was written",
                        path,
                        Error::StaleToken {
                            key: path.to_owned(),
                            presented: token,
                            current: current.mark,
                        },
                    ));
                }
                if token < current.mark {
                    self.remember(path, None);
                    return Err(into_dal(Error::StaleToken {
                        key: path.to_owned(),
                        presented: token,
                        current: current.mark,
                    }));
                }
                match cond {
                    Cond::Create if current.has_value => {
                        return Err(condition_not_match(
                            path,
                            "an object is there (if_not_exists); nothing was written",
                        ));
                    }
                    Cond::NoneMatch(etag)
                        if current.has_value
                            && current.etag.as_deref().is_some_and(|e| etag_eq(e, etag)) =>
                    {
                        return Err(condition_not_match(
                            path,
                            "the object is at the ETag of if_none_match; nothing was written",
                        ));
                    }
                    Cond::Delete if !current.has_value && current.mark == token => {
                        // Deleted at this token already.
                        return Ok(opendal::MetadataBuilder::file(HEADER).build());
                    }
                    _ => {}
                }
            }
            let at = match current {
                Some(current) => Some(current.etag.ok_or_else(no_etag)?),
                None => None,
            };
            let sent = Instant::now();
            match self.put_at(ctx, path, body, attrs, at.as_deref()).await? {
                Attempt::Written(meta) => {
                    let known = meta.etag().map(|etag| Known {
                        etag: etag.to_owned(),
                        mark: token,
                        live: cond.has_value(),
                    });
                    self.remember(path, known);
                    return Ok(meta);
                }
                Attempt::Lost => self.remember(path, None),
            }
            // At least about a round trip: the writes that raced ours land
            // before we read again (see `retry_pause_after`).
            tokio::time::sleep(retry_pause_after(attempt, sent.elapsed())).await;
        }
        Err(into_dal(Error::Contention {
            key: path.to_owned(),
            attempts: self.max_attempts,
        }))
    }

    /// The caller's `if_match(expected)`: its compare-and-swap, with the
    /// mark rule on top. One request when `expected` is this layer's own
    /// last write.
    async fn update(
        &self,
        ctx: &OperationContext,
        path: &str,
        token: FencingToken,
        body: &Buffer,
        attrs: &Attrs,
        (expected, live): (&str, bool),
    ) -> Result<Metadata> {
        let lost = || condition_not_match(path, "the object is not at the ETag of if_match");
        let known = self.known(path).filter(|k| etag_eq(&k.etag, expected));
        let mark = match known {
            Some(known) if known.live => known.mark,
            // Our own tombstone: absent to the caller, no version to match.
            Some(_) => return Err(lost()),
            None => match self.read_head(ctx, path, OpRead::new(), HEADER).await? {
                Some(head)
                    if head.has_value && head.etag().is_some_and(|e| etag_eq(e, expected)) =>
                {
                    head.mark
                }
                _ => return Err(lost()),
            },
        };
        if token < mark {
            self.remember(path, None);
            return Err(into_dal(Error::StaleToken {
                key: path.to_owned(),
                presented: token,
                current: mark,
            }));
        }
        match self.put_at(ctx, path, body, attrs, Some(expected)).await? {
            Attempt::Written(meta) => {
                let known = meta.etag().map(|etag| Known {
                    etag: etag.to_owned(),
                    mark: token,
                    live,
                });
                self.remember(path, known);
                Ok(meta)
            }
            Attempt::Lost => {
                self.remember(path, None);
                Err(lost())
            }
        }
    }

    /// One conditional write: on the object's ETag `at`, or on its absence.
    async fn put_at(
        &self,
        ctx: &OperationContext,
        path: &str,
        body: &Buffer,
        attrs: &Attrs,
        at: Option<&str>,
    ) -> Result<Attempt> {
        let cap = self.inner.capability();
        let absent = at.is_none();
        let options = WriteOptions {
            content_type: attrs.content_type.clone(),
            content_disposition: attrs.content_disposition.clone(),
            content_encoding: attrs.content_encoding.clone(),
            cache_control: attrs.cache_control.clone(),
            user_metadata: attrs.user_metadata.clone(),
            concurrent: attrs.concurrent,
            if_match: at.map(str::to_owned),
            if_not_exists: absent && cap.write_with_if_not_exists,
            if_none_match: (absent && !cap.write_with_if_not_exists).then(|| "*".to_owned()),
            ..WriteOptions::default()
        };
        let (args, _) = OpWrite::from_options(&cap, options)?;
        let mut w = self.inner.write(ctx, path, args)?;
        if let Err(e) = oio::Write::write(&mut w, body.clone()).await {
            let _ = oio::Write::abort(&mut w).await;
            return lost_or(e, path, false);
        }
        let sent = match oio::Write::close(&mut w).await {
            Ok(meta) => return Ok(Attempt::Written(meta)),
            Err(e) => {
                let _ = oio::Write::abort(&mut w).await;
                lost_or(e, path, true)?
            }
        };
        // A retry below the layer (a RetryLayer under it, a retrying
        // transport) can send the write again after its first try landed:
        // the repeat then fails its condition against our own write. The
        // object at the ETag of this very body (S3's single-PUT ETag is the
        // MD5 of the body) is ours: written.
        match self.inner.stat(ctx, path, OpStat::new()).await {
            Ok(rp) => {
                let meta = rp.into_metadata();
                Ok(if landed(meta.etag(), body) {
                    Attempt::Written(meta)
                } else {
                    sent
                })
            }
            Err(_) => Ok(sent),
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

/// Whether the object's ETag `etag` is S3's ETag of a single `PUT` of
/// `body` (its MD5, hex, quoted): the write of `body` landed.
fn landed(etag: Option<&str>, body: &Buffer) -> bool {
    let chunks: Vec<_> = body.clone().collect();
    let ours = crate::md5::etag_of(chunks.iter().map(|c| c.as_ref()));
    etag.is_some_and(|etag| etag_eq(etag, &ours))
}

/// A lost race, or the write's error: a transport failure after the write
/// was sent may have been applied, and is reported as such.
fn lost_or(err: opendal::Error, path: &str, sent: bool) -> Result<Attempt> {
    match err.kind() {
        ErrorKind::ConditionNotMatch | ErrorKind::AlreadyExists | ErrorKind::Conflict => {
            Ok(Attempt::Lost)
        }
        _ if sent && err.is_temporary() => Err(into_dal(Error::outcome_unknown(
            LAYER,
            format!("conditional write of {path}"),
            err,
        ))),
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
