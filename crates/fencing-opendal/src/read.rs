//! Reads: the frame read and checked, then hidden from the caller (ranges
//! shifted by its length, sizes less it).

use std::sync::Arc;

use opendal::OperationContext;
use opendal::options::ReadOptions;
use opendal::raw::oio::{Read as _, ReadStream as _};
use opendal::raw::{OpRead, RpRead, Service as _, oio};
use opendal::{Buffer, BytesRange, ErrorKind, Result};

use fencing_core::adapter::blob::frame::{ONE_READ_LIMIT, READ_ATTEMPTS};

use crate::core::{Core, HEADER};
use crate::error::{LAYER, into_dal, scrub};
use crate::head::{not_found, open_prefix};

/// A caller's reader of one object.
pub(crate) struct FencedReader {
    core: Arc<Core>,
    ctx: OperationContext,
    path: String,
    args: OpRead,
    inner: oio::Reader,
}

impl FencedReader {
    pub(crate) fn new(
        core: Arc<Core>,
        ctx: &OperationContext,
        path: &str,
        args: OpRead,
    ) -> Result<Self> {
        let inner = core.inner.read(ctx, path, args.clone())?;
        Ok(Self {
            core,
            ctx: ctx.clone(),
            path: path.to_owned(),
            args,
            inner,
        })
    }
}

impl oio::Read for FencedReader {
    async fn open(&self, range: BytesRange) -> Result<(RpRead, Box<dyn oio::ReadStreamDyn>)> {
        self.core
            .open_value(&self.ctx, &self.path, &self.args, &self.inner, range)
            .await
            .map_err(scrub)
    }

    async fn read(&self, range: BytesRange) -> Result<(RpRead, Buffer)> {
        let (rp, mut stream) = self.open(range).await?;
        let buffer = stream.read_all().await.map_err(scrub)?;
        Ok((rp, buffer))
    }
}

/// `range` of a value of `value_size` bytes: its start, and its end if
/// bounded. A bounded range past the value's end is refused, as the service
/// refuses one past the object's.
fn value_span(path: &str, range: BytesRange, value_size: u64) -> Result<(u64, Option<u64>)> {
    match range {
        BytesRange::Range { offset, size: None } => Ok((offset.min(value_size), None)),
        BytesRange::Range {
            size: Some(0),
            offset,
        } => {
            let at = offset.min(value_size);
            Ok((at, Some(at)))
        }
        BytesRange::Range {
            offset,
            size: Some(size),
        } => match offset.checked_add(size) {
            Some(end) if end <= value_size => Ok((offset, Some(end))),
            _ => Err(opendal::Error::new(
                ErrorKind::RangeNotSatisfied,
                "range exceeds the length of the value",
            )
            .with_context("path", path)
            .with_context("offset", offset)
            .with_context("size", size)
            .with_context("content_length", value_size)),
        },
        BytesRange::Suffix { size } => Ok((value_size - size.min(value_size), Some(value_size))),
    }
}

/// `args` pinned on `etag`: the second request of a two-request read.
fn pinned(args: &OpRead, etag: &str) -> OpRead {
    let (_, read, _) = ReadOptions {
        version: args.version().map(str::to_owned),
        if_match: Some(etag.to_owned()),
        if_none_match: args.if_none_match().map(str::to_owned),
        if_version_match: args.if_version_match().map(str::to_owned),
        if_version_not_match: args.if_version_not_match().map(str::to_owned),
        if_modified_since: args.if_modified_since(),
        if_unmodified_since: args.if_unmodified_since(),
        override_content_type: args.override_content_type().map(str::to_owned),
        override_cache_control: args.override_cache_control().map(str::to_owned),
        override_content_disposition: args.override_content_disposition().map(str::to_owned),
        ..ReadOptions::default()
    }
    .into();
    read
}

impl Core {
    /// `range` of the value at `path`, through `reader` (the service's
    /// reader of `path` under `args`), with the answer's metadata as the
    /// caller counts it.
    pub(crate) async fn open_value(
        &self,
        ctx: &OperationContext,
        path: &str,
        args: &OpRead,
        reader: &oio::Reader,
        range: BytesRange,
    ) -> Result<(RpRead, Box<dyn oio::ReadStreamDyn>)> {
        let far = match range {
            BytesRange::Range {
                offset,
                size: Some(size),
            } => offset.saturating_add(size) > ONE_READ_LIMIT,
            BytesRange::Range { offset, size: None } => offset > ONE_READ_LIMIT,
            BytesRange::Suffix { .. } => true,
        };
        if far && self.inner.capability().read_with_if_match {
            self.open_pinned(ctx, path, args, reader, range).await
        } else {
            self.open_with_frame(path, reader, range).await
        }
    }

    /// One request from the object's first byte: the frame is cut from the
    /// stream.
    async fn open_with_frame(
        &self,
        path: &str,
        reader: &oio::Reader,
        range: BytesRange,
    ) -> Result<(RpRead, Box<dyn oio::ReadStreamDyn>)> {
        let whole = BytesRange::new(0, None);
        let wanted = match range {
            BytesRange::Range { offset, size } => BytesRange::new(
                0,
                size.map(|n| HEADER.saturating_add(offset).saturating_add(n)),
            ),
            BytesRange::Suffix { .. } => whole,
        };
        let opened = match reader.open(wanted).await {
            // An empty object has no first byte to range on.
            Err(e) if e.kind() == ErrorKind::RangeNotSatisfied => reader.open(whole).await,
            answer => answer,
        };
        let (rp, mut stream) = match opened {
            Ok(answer) => answer,
            Err(e) if e.kind() == ErrorKind::NotFound => return Err(not_found(path)),
            Err(e) => return Err(e),
        };
        let meta = rp.into_metadata().ok_or_else(|| {
            into_dal(fencing_core::Error::backend(
                LAYER,
                false,
                "the service answers reads without the object's metadata (its size), which \
                 fencing needs",
            ))
        })?;
        let object_size = meta.content_length();
        let mut first = Vec::new();
        let mut got = 0u64;
        let mut ended = false;
        while got < HEADER {
            match stream.read().await {
                Ok(chunk) if chunk.is_empty() => {
                    ended = true;
                    break;
                }
                Ok(chunk) => {
                    got += chunk.len() as u64;
                    first.push(chunk);
                }
                // A range past the end of a short object: the whole object
                // is in hand.
                Err(_) if got == object_size => {
                    ended = true;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        let head = self.unframe(path, meta, first.into_iter().flatten().collect())?;
        if !head.has_value {
            return Err(not_found(path));
        }
        let (start, end) = value_span(path, range, head.value_size())?;
        let cut = Cut {
            pending: Some(head.bytes.clone()),
            inner: (!ended).then_some(stream),
            skip: head.header_len + start,
            remaining: end.map(|end| end - start),
        };
        Ok((RpRead::new(head.caller_meta()), Box::new(cut)))
    }

    /// The frame first, then the bytes, conditioned on the ETag the frame
    /// was read at (read again if the object changed between).
    async fn open_pinned(
        &self,
        ctx: &OperationContext,
        path: &str,
        args: &OpRead,
        reader: &oio::Reader,
        range: BytesRange,
    ) -> Result<(RpRead, Box<dyn oio::ReadStreamDyn>)> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let head = match open_prefix(reader, HEADER).await? {
                Some((meta, bytes)) => self.unframe(path, meta, bytes)?,
                None => return Err(not_found(path)),
            };
            if !head.has_value {
                return Err(not_found(path));
            }
            let rp = RpRead::new(head.caller_meta());
            let (start, end) = value_span(path, range, head.value_size())?;
            if end == Some(start) || (end.is_none() && start >= head.value_size()) {
                return Ok((rp, Box::new(Buffer::new())));
            }
            let at = BytesRange::new(head.header_len + start, end.map(|end| end - start));
            let args = head
                .etag()
                .map_or_else(|| args.clone(), |e| pinned(args, e));
            let answer = self.inner.read(ctx, path, args)?.open(at).await;
            match answer {
                // Through `Cut` (nothing cut), whose reads scrub the
                // service's errors.
                Ok((_, stream)) => {
                    let stream = Cut {
                        pending: None,
                        inner: Some(stream),
                        skip: 0,
                        remaining: None,
                    };
                    return Ok((rp, Box::new(stream)));
                }
                Err(e)
                    if matches!(e.kind(), ErrorKind::ConditionNotMatch | ErrorKind::NotFound)
                        && attempt < READ_ATTEMPTS => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// A stream with its first `skip` bytes cut, and at most `remaining`
/// bytes after them: `pending` (read already) first, then `inner`.
struct Cut {
    pending: Option<Buffer>,
    inner: Option<Box<dyn oio::ReadStreamDyn>>,
    skip: u64,
    remaining: Option<u64>,
}

impl oio::ReadStream for Cut {
    async fn read(&mut self) -> Result<Buffer> {
        loop {
            if self.remaining == Some(0) {
                return Ok(Buffer::new());
            }
            let mut buf = match self.pending.take() {
                Some(buf) => buf,
                None => match self.inner.as_mut() {
                    Some(inner) => {
                        let buf = inner.read().await.map_err(scrub)?;
                        if buf.is_empty() {
                            self.inner = None;
                            return Ok(buf);
                        }
                        buf
                    }
                    None => return Ok(Buffer::new()),
                },
            };
            let len = buf.len() as u64;
            if self.skip >= len {
                self.skip -= len;
                continue;
            }
            if self.skip > 0 {
                buf = buf.slice(usize::try_from(self.skip).unwrap_or(usize::MAX)..);
                self.skip = 0;
            }
            if let Some(remaining) = self.remaining.as_mut() {
                if buf.len() as u64 > *remaining {
                    buf.truncate(usize::try_from(*remaining).unwrap_or(usize::MAX));
                }
                *remaining -= buf.len() as u64;
            }
            return Ok(buf);
        }
    }
}
