//! Deletes: a tombstone at the token, which keeps the mark.

use std::sync::Arc;

use opendal::OperationContext;
use opendal::options::ListOptions;
use opendal::raw::oio::{Delete as _, List as _};
use opendal::raw::{OpDelete, OpList, OpRead, Service as _, oio};
use opendal::{EntryMode, Result};

use crate::core::{Core, HEADER};
use crate::error::{refused, scrub};

/// A caller's deleter: each delete is a fenced write of a tombstone, sent
/// when it is asked for; directory objects (which hold no value) go to the
/// service's own deleter.
pub(crate) struct FencedDeleter {
    core: Arc<Core>,
    ctx: OperationContext,
    dirs: Option<oio::Deleter>,
}

impl FencedDeleter {
    pub(crate) fn new(core: Arc<Core>, ctx: &OperationContext) -> Self {
        Self {
            core,
            ctx: ctx.clone(),
            dirs: None,
        }
    }

    /// Deletes the directory object `path` through the service.
    async fn delete_dir(&mut self, path: &str) -> Result<()> {
        let dirs = match &mut self.dirs {
            Some(dirs) => dirs,
            none => none.insert(self.core.inner.delete(&self.ctx)?),
        };
        dirs.delete(path, OpDelete::new()).await
    }
}

impl oio::Delete for FencedDeleter {
    async fn delete(&mut self, path: &str, args: OpDelete) -> Result<()> {
        self.delete_inner(path, args).await.map_err(scrub)
    }

    async fn close(&mut self) -> Result<()> {
        match &mut self.dirs {
            Some(dirs) => dirs.close().await.map_err(scrub),
            None => Ok(()),
        }
    }
}

impl FencedDeleter {
    async fn delete_inner(&mut self, path: &str, args: OpDelete) -> Result<()> {
        if args.version().is_some() {
            return Err(refused(
                "deleting a version (removing the current version would bring back an older one, \
                 and lower the mark); nothing was deleted",
            ));
        }
        if args.if_none_match().is_some()
            || args.if_version_match().is_some()
            || args.if_version_not_match().is_some()
        {
            return Err(refused(
                "deletes conditioned on if_none_match or a version (if_match is supported); \
                 nothing was deleted",
            ));
        }
        if args.recursive() {
            if args.if_match().is_some() {
                return Err(refused(
                    "recursive deletes with if_match; nothing was deleted",
                ));
            }
            return self.delete_all(path).await;
        }
        if path.ends_with('/') {
            self.core
                .refuse_framed_dir(&self.ctx, path, "delete")
                .await?;
            return self.delete_dir(path).await;
        }
        let token = self.core.token()?;
        self.core
            .delete_fenced(&self.ctx, path, token, args.if_match())
            .await
    }

    /// A recursive delete: every live object the service lists under
    /// `path` gets a tombstone; directory objects are deleted.
    async fn delete_all(&mut self, path: &str) -> Result<()> {
        let token = self.core.token()?;
        let args = OpList::from(ListOptions {
            recursive: true,
            ..ListOptions::default()
        });
        let mut listed = self.core.inner.list(&self.ctx, path, args)?;
        let mut dirs = Vec::new();
        while let Some(entry) = listed.next().await? {
            if entry.mode() == EntryMode::DIR {
                dirs.push(entry.path().to_owned());
                continue;
            }
            if let Some(live) = self.core.as_listed(&self.ctx, entry).await? {
                self.core
                    .delete_fenced(&self.ctx, live.path(), token, None)
                    .await?;
            }
        }
        for dir in dirs {
            // A fenced value under a directory path (written by fencing-s3
            // or BlobStore): a tombstone like any other, never a raw delete.
            if self.core.is_framed_dir(&self.ctx, &dir).await? {
                if let Some(head) = self
                    .core
                    .read_head(&self.ctx, &dir, OpRead::new(), HEADER)
                    .await?
                    && head.has_value
                {
                    self.core
                        .delete_fenced(&self.ctx, &dir, token, None)
                        .await?;
                }
                continue;
            }
            self.delete_dir(&dir).await?;
        }
        Ok(())
    }
}
