//! An object's first bytes: its frame (mark, state), and what the answer
//! said of the object (its whole size, its ETag) in the same request.

use fencing_core::adapter::blob::frame::{self, Header};
use fencing_core::{Error, FencingToken};
use opendal::OperationContext;
use opendal::raw::oio::{Read as _, ReadStream as _};
use opendal::raw::{OpRead, Service as _, oio};
use opendal::{Buffer, BytesRange, ErrorKind, Metadata, Result};

use crate::core::{Core, HEADER};
use crate::error::{LAYER, into_dal};

/// An object's frame as read.
#[derive(Debug)]
pub(crate) struct Head {
    /// The stored object's metadata (its size counts the frame).
    pub(crate) meta: Metadata,
    pub(crate) mark: FencingToken,
    pub(crate) has_value: bool,
    /// The frame's length: [`HEADER`], or 0 for an object adopted without one.
    pub(crate) header_len: u64,
    /// The bytes read from the object's start.
    pub(crate) bytes: Buffer,
}

impl Head {
    /// The size of the value, as the caller counts it.
    pub(crate) fn value_size(&self) -> u64 {
        self.meta.content_length().saturating_sub(self.header_len)
    }

    /// The version a conditional write on this object must match.
    pub(crate) fn etag(&self) -> Option<&str> {
        self.meta.etag()
    }

    /// The object's metadata as the caller sees it: its value's size.
    pub(crate) fn caller_meta(&self) -> Metadata {
        value_meta(self.meta.clone(), self.header_len)
    }
}

/// `meta` with the frame's bytes taken off its size.
pub(crate) fn value_meta(meta: Metadata, header_len: u64) -> Metadata {
    if !meta.is_file() {
        return meta;
    }
    let size = meta.content_length().saturating_sub(header_len);
    let mut builder = meta.into_builder();
    builder.set_file(size);
    builder.build()
}

/// The NotFound of an object that is absent to the caller.
pub(crate) fn not_found(path: &str) -> opendal::Error {
    opendal::Error::new(
        ErrorKind::NotFound,
        "no object (or a tombstone that keeps its fencing mark)",
    )
    .with_context("path", path)
}

/// The first `len` bytes of the object `reader` reads (all of it if it is
/// shorter) and the answer's metadata, in one request; `None` if absent.
/// An object shorter than its first byte (an empty one) answers a ranged
/// read with an error, and is then read whole.
pub(crate) async fn open_prefix(
    reader: &oio::Reader,
    len: u64,
) -> Result<Option<(Metadata, Buffer)>> {
    let (rp, mut stream) = match reader.open(BytesRange::new(0, Some(len))).await {
        Ok(answer) => answer,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) if e.kind() == ErrorKind::RangeNotSatisfied => {
            match reader.open(BytesRange::new(0, None)).await {
                Ok(answer) => answer,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    let meta = rp.into_metadata().ok_or_else(|| {
        into_dal(Error::backend(
            LAYER,
            false,
            "the service answers reads without the object's metadata (its size, its ETag), \
             which fencing needs",
        ))
    })?;
    let whole = meta.content_length();
    let mut chunks = Vec::new();
    let mut got = 0u64;
    loop {
        match stream.read().await {
            Ok(chunk) if chunk.is_empty() => break,
            Ok(chunk) => {
                got += chunk.len() as u64;
                chunks.push(chunk);
            }
            // A range past the end of a short object: the bytes are all
            // there, only the requested length was not.
            Err(_) if got == whole && whole < len => break,
            Err(e) => return Err(e),
        }
    }
    Ok(Some((meta, chunks.into_iter().flatten().collect())))
}

impl Core {
    /// The frame of the object at `path` (read under `args`' conditions),
    /// and its first `len` bytes; `None` if absent.
    pub(crate) async fn read_head(
        &self,
        ctx: &OperationContext,
        path: &str,
        args: OpRead,
        len: u64,
    ) -> Result<Option<Head>> {
        let reader = self.inner.read(ctx, path, args)?;
        match open_prefix(&reader, len).await? {
            Some((meta, bytes)) => self.unframe(path, meta, bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Decodes the frame at the start of `bytes`, applying the policy for
    /// objects written without one.
    pub(crate) fn unframe(&self, path: &str, meta: Metadata, bytes: Buffer) -> Result<Head> {
        let first = bytes.slice(..bytes.len().min(frame::FRAME_HEADER_LEN));
        let first = frame::unframe(LAYER, path, &first.to_bytes(), self.adopt_unfenced)
            .map_err(into_dal)?;
        Ok(Head {
            meta,
            mark: first.meta.token,
            has_value: first.meta.has_value,
            header_len: first.header_len as u64,
            bytes,
        })
    }
}

impl Core {
    /// Whether `path` (a directory path, ending in `/`) is an object that
    /// carries a fencing frame: a value or tombstone that fencing-s3,
    /// `BlobStore` or `FencedObjectStore` wrote under that key.
    pub(crate) async fn is_framed_dir(&self, ctx: &OperationContext, path: &str) -> Result<bool> {
        if !path.ends_with('/') {
            return Ok(false);
        }
        let reader = self.inner.read(ctx, path, OpRead::new())?;
        match open_prefix(&reader, HEADER).await {
            Ok(Some((_, bytes))) => Ok(matches!(
                frame::decode_header(&bytes.to_bytes()),
                Ok(Header::Framed(_)) | Err(_)
            )),
            Ok(None) => Ok(false),
            // A service whose directories are not objects.
            Err(e) if matches!(e.kind(), ErrorKind::IsADirectory | ErrorKind::NotADirectory) => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Refuses `operation` (a raw delete, `create_dir`) on a directory path
    /// whose object carries a fencing frame: it would remove or replace a
    /// fenced value, mark and all.
    pub(crate) async fn refuse_framed_dir(
        &self,
        ctx: &OperationContext,
        path: &str,
        operation: &'static str,
    ) -> Result<()> {
        if self.is_framed_dir(ctx, path).await? {
            let why = match operation {
                "create_dir" => {
                    "create_dir of a path ending in '/' whose object carries a fencing frame \
                     (a fenced value written under that key: the directory object would \
                     replace it and its mark); nothing was written"
                }
                _ => {
                    "deleting a path ending in '/' whose object carries a fencing frame (a \
                     fenced value written under that key: deleting it would lower its mark); \
                     delete it recursively (a tombstone) or through fencing-s3; nothing was \
                     deleted"
                }
            };
            return Err(into_dal(Error::Unsupported {
                backend: LAYER,
                operation: why,
            }));
        }
        Ok(())
    }
}
