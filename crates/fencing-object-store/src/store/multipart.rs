//! Multipart uploads, staged: no part reaches the store before the
//! fenced put at `complete`.

use async_trait::async_trait;
use fencing_core::Error;
use object_store::path::Path;
use object_store::{
    MultipartUpload, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
    UploadPart,
};

use super::FencedObjectStore;
use crate::error::into_store;

/// An upload whose parts are kept in memory, in the order they were
/// given, and written as one fenced put when it completes. Object stores
/// cannot condition a multipart completion, so a part uploaded to the
/// store would be beyond the token check.
pub(super) struct Staged<S> {
    store: FencedObjectStore<S>,
    path: Path,
    options: PutMultipartOptions,
    parts: Vec<PutPayload>,
    len: usize,
}

impl<S> std::fmt::Debug for Staged<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staged")
            .field("path", &self.path)
            .field("parts", &self.parts.len())
            .field("len", &self.len)
            .finish()
    }
}

impl<S> Staged<S> {
    pub(super) fn new(
        store: FencedObjectStore<S>,
        path: Path,
        options: PutMultipartOptions,
    ) -> Self {
        Self {
            store,
            path,
            options,
            parts: Vec::new(),
            len: 0,
        }
    }
}

#[async_trait]
impl<S: ObjectStore> MultipartUpload for Staged<S> {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let len = self.len.saturating_add(data.content_length());
        if len > self.store.max_staged_len {
            let limit = self.store.max_staged_len;
            let err = into_store(Error::invalid_input(format!(
                "a fenced multipart upload to {} would stage {len} bytes; the limit is {limit} \
                 (FencedObjectStore::with_max_staged_len); nothing was written",
                self.path
            )));
            return Box::pin(async move { Err(err) });
        }
        self.len = len;
        self.parts.push(data);
        Box::pin(async { Ok(()) })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let value: PutPayload = std::mem::take(&mut self.parts)
            .into_iter()
            .flat_map(|part| part.into_iter())
            .collect();
        self.len = 0;
        let token = self.store.token(&self.options.extensions)?;
        let options = PutOptions {
            tags: self.options.tags.clone(),
            attributes: self.options.attributes.clone(),
            extensions: self.options.extensions.clone(),
            ..PutOptions::default()
        };
        self.store
            .write(&self.path, value, token, options)
            .await
            .map_err(crate::error::redacted)
    }

    async fn abort(&mut self) -> Result<()> {
        self.parts.clear();
        self.len = 0;
        Ok(())
    }
}
