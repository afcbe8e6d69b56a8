//! Listings: tombstones hidden, sizes the caller's.

use futures_util::stream::{self, BoxStream};
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{GetOptions, ListResult, ObjectMeta, ObjectStore, Result};

use fencing_core::Error;
use fencing_core::adapter::blob::frame;

use super::{FencedObjectStore, HEADER, value_meta};
use crate::error::fencing_error;

/// How many objects' frames a listing reads at once.
const FRAME_READS: usize = 8;

impl<S: ObjectStore> FencedObjectStore<S> {
    /// `listed` as the caller sees it: live objects only, at their
    /// values' sizes.
    pub(super) fn visible(
        &self,
        listed: BoxStream<'static, Result<ObjectMeta>>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let this = self.clone();
        listed
            .map(move |meta| {
                let this = this.clone();
                async move { this.as_listed(meta?).await }
            })
            .buffered(FRAME_READS)
            .try_filter_map(|meta| std::future::ready(Ok(meta)))
            .boxed()
    }

    /// One listed object: by its size where that says enough (longer than
    /// the frame: a value; shorter: written without fencing, shown as it
    /// is), else by its frame (exactly the frame's length: a tombstone or
    /// an empty value). Adopting, every frame is read.
    async fn as_listed(&self, meta: ObjectMeta) -> Result<Option<ObjectMeta>> {
        if let Some(frame_len) = frame::frame_len_by_size(meta.size, self.adopt_unfenced) {
            return Ok(Some(value_meta(&meta, frame_len)));
        }
        match self
            .read_head(&meta.location, &GetOptions::new(), HEADER)
            .await
        {
            Ok(current) => {
                Ok(current
                    .filter(|current| current.has_value)
                    .map(|current| ObjectMeta {
                        size: current.value_size(),
                        ..meta
                    }))
            }
            // Written without fencing: listed as it is (reads refuse it).
            Err(e) if matches!(fencing_error(&e), Some(Error::Unfenced { .. })) => Ok(Some(meta)),
            Err(e) => Err(e),
        }
    }

    /// `list_with_delimiter`: the objects as [`visible`](Self::visible)
    /// shows them, and the common prefixes that hold a live object.
    pub(super) async fn list_dir(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let mut listed = self.store.list_with_delimiter(prefix).await?;
        let objects = std::mem::take(&mut listed.objects);
        listed.objects = self
            .visible(stream::iter(objects).map(Ok).boxed())
            .try_collect()
            .await?;
        let prefixes = std::mem::take(&mut listed.common_prefixes);
        listed.common_prefixes = stream::iter(prefixes)
            .map(|prefix| async move {
                let live = self
                    .visible(self.store.list(Some(&prefix)))
                    .try_next()
                    .await?;
                Ok::<_, object_store::Error>(live.map(|_| prefix))
            })
            .buffered(FRAME_READS)
            .try_filter_map(|prefix| std::future::ready(Ok(prefix)))
            .try_collect()
            .await?;
        Ok(listed)
    }
}
