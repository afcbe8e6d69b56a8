//! Reads: the frame read and checked, then hidden from the caller.

use bytes::{Bytes, BytesMut};
use fencing_core::FencingToken;
use fencing_core::adapter::blob::FRAME_HEADER_LEN;
use fencing_core::adapter::blob::frame::{self, ONE_READ_LIMIT, READ_ATTEMPTS};
use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};
use object_store::path::Path;
use object_store::{
    Attributes, GetOptions, GetRange, GetResult, GetResultPayload, ObjectMeta, ObjectStore, Result,
    UpdateVersion,
};

use super::{FencedObjectStore, HEADER, not_found, shift, value_meta};
use crate::error::{FENCED, into_store, may_be_range};
use crate::version;

/// An object's frame as read, with what the answer said of it.
#[derive(Debug)]
pub(super) struct Current {
    pub(super) version: UpdateVersion,
    pub(super) mark: FencingToken,
    pub(super) has_value: bool,
    /// The frame's length: [`HEADER`], or 0 for an object adopted without one.
    pub(super) header_len: u64,
    /// The stored object's meta (its size includes the frame).
    pub(super) meta: ObjectMeta,
    pub(super) attributes: Attributes,
    /// The bytes read from the object's start.
    pub(super) bytes: Bytes,
}

impl Current {
    pub(super) fn value_size(&self) -> u64 {
        self.meta.size.saturating_sub(self.header_len)
    }
}

impl<S: ObjectStore> FencedObjectStore<S> {
    /// The object's frame (and its first `len` bytes) under the caller's
    /// `conditions`; `None` if absent.
    pub(super) async fn read_head(
        &self,
        path: &Path,
        conditions: &GetOptions,
        len: u64,
    ) -> Result<Option<Current>> {
        let whole = GetOptions {
            range: None,
            head: false,
            ..conditions.clone()
        };
        let ranged = GetOptions {
            range: Some(GetRange::Bounded(0..len)),
            ..whole.clone()
        };
        let mut answer = self.store.get_opts(path, ranged).await;
        if answer.as_ref().is_err_and(may_be_range) {
            // An object shorter than the range's first byte (an empty one)
            // refuses a ranged read: read it whole, if it is that short
            // (any other failure is reported, never answered by reading a
            // large object into memory).
            let head = GetOptions {
                head: true,
                ..whole.clone()
            };
            if let Ok(meta) = self.store.get_opts(path, head).await
                && meta.meta.size < len
            {
                answer = self.store.get_opts(path, whole).await;
            }
        }
        let result = match answer {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let meta = result.meta.clone();
        let attributes = result.attributes.clone();
        let bytes = result.bytes().await?;
        self.unframe(path, meta, attributes, bytes).map(Some)
    }

    /// Decodes the frame at the start of `bytes`, applying the policy for
    /// objects written without one.
    pub(super) fn unframe(
        &self,
        path: &Path,
        meta: ObjectMeta,
        attributes: Attributes,
        bytes: Bytes,
    ) -> Result<Current> {
        let first = frame::unframe(FENCED, path.as_ref(), &bytes, self.adopt_unfenced)
            .map_err(into_store)?;
        Ok(Current {
            version: version::of_meta(&meta),
            mark: first.meta.token,
            has_value: first.meta.has_value,
            header_len: first.header_len as u64,
            meta,
            attributes,
            bytes,
        })
    }

    /// `get_opts`: the caller's bytes, sizes and ranges.
    pub(super) async fn read(&self, path: &Path, options: GetOptions) -> Result<GetResult> {
        if options.head {
            let current = self.live(path, &options, HEADER).await?;
            let range = 0..current.value_size();
            return Ok(result(&current, range, stream::empty().boxed()));
        }
        match options.range.clone() {
            None => self.read_whole(path, options).await,
            Some(GetRange::Bounded(r)) if r.end <= ONE_READ_LIMIT => {
                let current = self.live(path, &options, HEADER + r.end).await?;
                let range = GetRange::Bounded(r)
                    .as_range(current.value_size())
                    .map_err(|e| range_error(path, e))?;
                let at = shift(&range, current.header_len);
                let end = usize::try_from(at.end).unwrap_or(usize::MAX);
                let start = usize::try_from(at.start).unwrap_or(usize::MAX);
                let bytes = current
                    .bytes
                    .slice(start.min(end)..end.min(current.bytes.len()));
                Ok(result(
                    &current,
                    range,
                    stream::once(async { Ok(bytes) }).boxed(),
                ))
            }
            Some(range) => self.read_range(path, options, range).await,
        }
    }

    /// The frame of a live object (not absent, not a tombstone).
    async fn live(&self, path: &Path, conditions: &GetOptions, len: u64) -> Result<Current> {
        match self.read_head(path, conditions, len).await? {
            Some(current) if current.has_value => Ok(current),
            _ => Err(not_found(path)),
        }
    }

    /// A whole object in one request: the frame is cut from the stream.
    async fn read_whole(&self, path: &Path, options: GetOptions) -> Result<GetResult> {
        let answer = match self.store.get_opts(path, options).await {
            Err(object_store::Error::NotFound { .. }) => return Err(not_found(path)),
            answer => answer?,
        };
        let meta = answer.meta.clone();
        let attributes = answer.attributes.clone();
        let mut body = answer.into_stream();
        let mut first = BytesMut::new();
        while first.len() < FRAME_HEADER_LEN {
            match body.next().await {
                Some(chunk) => first.extend_from_slice(&chunk?),
                None => break,
            }
        }
        let first = first.freeze();
        let current = self.unframe(path, meta, attributes, first.clone())?;
        if !current.has_value {
            return Err(not_found(path));
        }
        let start = usize::try_from(current.header_len).unwrap_or(usize::MAX);
        let rest = first.slice(start.min(first.len())..);
        let payload = stream::once(async { Ok(rest) })
            .filter(|chunk| std::future::ready(chunk.as_ref().map_or(true, |b| !b.is_empty())))
            .chain(body)
            .boxed();
        let range = 0..current.value_size();
        Ok(result(&current, range, payload))
    }

    /// Any other range: the frame first, then the bytes, conditioned on the
    /// version the frame was read at (read again if it moved between).
    async fn read_range(
        &self,
        path: &Path,
        options: GetOptions,
        range: GetRange,
    ) -> Result<GetResult> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let current = self.live(path, &options, HEADER).await?;
            let range = range
                .as_range(current.value_size())
                .map_err(|e| range_error(path, e))?;
            if range.is_empty() {
                return Ok(result(&current, range, stream::empty().boxed()));
            }
            let pinned = GetOptions {
                range: Some(GetRange::Bounded(shift(&range, current.header_len))),
                if_match: current.version.e_tag.clone(),
                version: options.version.clone(),
                extensions: options.extensions.clone(),
                ..GetOptions::default()
            };
            match self.store.get_opts(path, pinned).await {
                Ok(answer) => {
                    return Ok(result(&current, range, answer.into_stream()));
                }
                Err(
                    object_store::Error::Precondition { .. } | object_store::Error::NotFound { .. },
                ) if attempts < READ_ATTEMPTS => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// The answer to the caller: its range of its value, of its size.
fn result(
    current: &Current,
    range: std::ops::Range<u64>,
    payload: BoxStream<'static, Result<Bytes>>,
) -> GetResult {
    GetResult {
        payload: GetResultPayload::Stream(payload),
        meta: value_meta(&current.meta, current.header_len),
        range,
        attributes: current.attributes.clone(),
        extensions: Default::default(),
    }
}

fn range_error(
    path: &Path,
    err: impl std::error::Error + Send + Sync + 'static,
) -> object_store::Error {
    object_store::Error::Generic {
        store: FENCED,
        source: format!("{path}: {err}").into(),
    }
}
