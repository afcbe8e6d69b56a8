//! Listings: tombstones hidden, sizes the caller's.

use std::sync::Arc;

use fencing_core::adapter::blob::frame::{self, Header};
use opendal::OperationContext;
use opendal::options::ListOptions;
use opendal::raw::oio::List as _;
use opendal::raw::{OpList, OpRead, Service as _, oio};
use opendal::{EntryMode, Result};

use crate::core::{Core, HEADER};
use crate::error::scrub;
use crate::head::{open_prefix, value_meta};

/// A caller's listing: the service's, each object shown as the caller sees
/// it, and directories only if they hold something live.
pub(crate) struct FencedLister {
    core: Arc<Core>,
    ctx: OperationContext,
    path: String,
    recursive: bool,
    inner: oio::Lister,
}

impl FencedLister {
    pub(crate) fn new(
        core: Arc<Core>,
        ctx: &OperationContext,
        path: &str,
        args: OpList,
    ) -> Result<Self> {
        let recursive = args.recursive();
        let inner = core.inner.list(ctx, path, args)?;
        Ok(Self {
            core,
            ctx: ctx.clone(),
            path: path.to_owned(),
            recursive,
            inner,
        })
    }
}

impl oio::List for FencedLister {
    async fn next(&mut self) -> Result<Option<oio::Entry>> {
        self.next_inner().await.map_err(scrub)
    }
}

impl FencedLister {
    async fn next_inner(&mut self) -> Result<Option<oio::Entry>> {
        while let Some(entry) = self.inner.next().await? {
            if entry.mode() == EntryMode::DIR {
                // The listed directory itself, and directory objects of a
                // recursive listing, as they are; a common prefix only if
                // something under it is live.
                if self.recursive
                    || entry.path() == self.path
                    || self.core.holds_live(&self.ctx, entry.path()).await?
                {
                    return Ok(Some(entry));
                }
                continue;
            }
            if let Some(entry) = self.core.as_listed(&self.ctx, entry).await? {
                return Ok(Some(entry));
            }
        }
        Ok(None)
    }
}

impl Core {
    /// One listed object as the caller sees it, `None` for a tombstone: by
    /// its size where that says enough (longer than the frame: a value;
    /// shorter: written without fencing, shown as it is), else by its
    /// frame (exactly the frame's length: a tombstone or an empty value).
    /// Adopting, every frame is read (an object without one is shown as it
    /// is).
    pub(crate) async fn as_listed(
        &self,
        ctx: &OperationContext,
        entry: oio::Entry,
    ) -> Result<Option<oio::Entry>> {
        if entry.mode() != EntryMode::FILE {
            return Ok(Some(entry));
        }
        let size = entry.metadata().content_length();
        if let Some(frame_len) = frame::frame_len_by_size(size, self.adopt_unfenced) {
            let (path, meta) = entry.into_parts();
            return Ok(Some(oio::Entry::with(path, value_meta(meta, frame_len))));
        }
        let reader = self.inner.read(ctx, entry.path(), OpRead::new())?;
        let Some((stored, bytes)) = open_prefix(&reader, HEADER).await? else {
            return Ok(None); // deleted since it was listed
        };
        let first = bytes.slice(..bytes.len().min(frame::FRAME_HEADER_LEN));
        let header_len = match frame::decode_header(&first.to_bytes()) {
            Ok(Header::Framed(m)) if !m.has_value => return Ok(None),
            Ok(Header::Framed(_)) => HEADER,
            // Not ours: shown as it is (a read refuses it unless adopted).
            Ok(Header::Foreign) | Err(_) => 0,
        };
        let (path, meta) = entry.into_parts();
        let mut builder = meta.into_builder();
        builder.set_file(stored.content_length().saturating_sub(header_len));
        Ok(Some(oio::Entry::with(path, builder.build())))
    }

    /// Whether anything under the directory `dir` is live: an object that
    /// is not a tombstone, or a directory object.
    pub(crate) async fn holds_live(&self, ctx: &OperationContext, dir: &str) -> Result<bool> {
        let args = OpList::from(ListOptions {
            recursive: true,
            ..ListOptions::default()
        });
        let mut under = self.inner.list(ctx, dir, args)?;
        while let Some(entry) = under.next().await? {
            if self.as_listed(ctx, entry).await?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
