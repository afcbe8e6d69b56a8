//! The service a [`FencingLayer`](crate::FencingLayer) puts over the
//! operator's stack: every operation, and what it does to the frame.

use std::fmt;
use std::sync::Arc;

use fencing_core::Error;
use opendal::OperationContext;
use opendal::options::ReadOptions;
use opendal::raw::{
    OpCopy, OpCreateDir, OpList, OpPresign, OpRead, OpRename, OpStat, OpWrite, RpCreateDir,
    RpPresign, RpRename, RpStat, Service, ServiceInfo, oio,
};
use opendal::{Capability, Result};

use crate::core::{Core, HEADER};
use crate::delete::FencedDeleter;
use crate::error::{into_dal, refused, scrub};
use crate::head::not_found;
use crate::list::FencedLister;
use crate::read::FencedReader;
use crate::write::{Cond, FencedWriter};

/// The fenced service over the operator's stack.
pub(crate) struct FencedService {
    core: Arc<Core>,
}

impl FencedService {
    pub(crate) fn new(core: Core) -> Self {
        Self {
            core: Arc::new(core),
        }
    }
}

impl fmt::Debug for FencedService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedService")
            .field("inner", &self.core.inner)
            .field("source", &self.core.source)
            .field("adopt_unfenced", &self.core.adopt_unfenced)
            .field("limits", &self.core.limits)
            .finish_non_exhaustive()
    }
}

/// The read conditions of a `stat`: it is served by a ranged read of the
/// frame, which answers with the same metadata.
fn stat_as_read(args: &OpStat) -> OpRead {
    let (_, read, _) = ReadOptions {
        version: args.version().map(str::to_owned),
        if_match: args.if_match().map(str::to_owned),
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

impl Service for FencedService {
    type Reader = FencedReader;
    type Writer = FencedWriter;
    type Lister = FencedLister;
    type Deleter = FencedDeleter;
    type Copier = oio::OneShotCopier;
    type Composer = ();

    fn info(&self) -> ServiceInfo {
        self.core.inner.info()
    }

    fn capability(&self) -> Capability {
        let inner = self.core.inner.capability();
        let mut cap = inner;
        // Writes: one fenced put at close, conditions of ours on top.
        cap.write_can_append = false;
        cap.write_can_copy_from = false;
        cap.write_can_multi = false;
        cap.write_multi_min_size = None;
        cap.write_multi_max_size = None;
        cap.write_total_max_size = Some(self.core.limits.max_value_len);
        cap.write_with_if_match = inner.write;
        cap.write_with_if_none_match = inner.write;
        cap.write_with_if_not_exists = inner.write;
        cap.write_with_if_version_match = false;
        cap.write_with_if_version_not_match = false;
        // Stat is a ranged read of the frame.
        cap.stat_with_if_match = inner.read_with_if_match;
        cap.stat_with_if_none_match = inner.read_with_if_none_match;
        cap.stat_with_if_version_match = inner.read_with_if_version_match;
        cap.stat_with_if_version_not_match = inner.read_with_if_version_not_match;
        cap.stat_with_if_modified_since = inner.read_with_if_modified_since;
        cap.stat_with_if_unmodified_since = inner.read_with_if_unmodified_since;
        cap.stat_with_override_cache_control = inner.read_with_override_cache_control;
        cap.stat_with_override_content_disposition = inner.read_with_override_content_disposition;
        cap.stat_with_override_content_type = inner.read_with_override_content_type;
        cap.stat_with_version = inner.read_with_version;
        cap.read_with_suffix = inner.read;
        // Deletes write tombstones.
        cap.delete = inner.write;
        cap.delete_with_version = false;
        cap.delete_with_recursive = inner.write && inner.list;
        cap.delete_with_if_match = inner.write;
        cap.delete_with_if_none_match = false;
        cap.delete_with_if_version_match = false;
        cap.delete_with_if_version_not_match = false;
        // Copy and rename: a read and a fenced write.
        cap.copy = inner.read && inner.write;
        cap.copy_can_multi = false;
        cap.copy_multi_min_size = None;
        cap.copy_multi_max_size = None;
        cap.copy_with_if_not_exists = cap.copy;
        cap.copy_with_if_match = cap.copy;
        cap.copy_with_if_none_match = cap.copy;
        cap.copy_with_if_version_match = false;
        cap.copy_with_if_version_not_match = false;
        cap.copy_with_source_version = cap.copy && inner.read_with_version;
        cap.rename = cap.copy;
        cap.rename_with_if_not_exists = cap.copy;
        // Listings hide tombstones; versions would show them.
        cap.list_with_versions = false;
        cap.list_with_deleted = false;
        // Refused: see the crate documentation.
        cap.compose = false;
        cap.restore = false;
        cap.restore_with_version = false;
        cap.restore_with_if_not_exists = false;
        cap.presign = false;
        cap.presign_read = false;
        cap.presign_stat = false;
        cap.presign_write = false;
        cap.presign_delete = false;
        cap
    }

    async fn create_dir(
        &self,
        ctx: &OperationContext,
        path: &str,
        args: OpCreateDir,
    ) -> Result<RpCreateDir> {
        // A directory holds no value: nothing to fence, unless the path is
        // an object another fenced writer (fencing-s3, BlobStore) wrote,
        // which the directory object would replace.
        async {
            self.core.refuse_framed_dir(ctx, path, "create_dir").await?;
            self.core.inner.create_dir(ctx, path, args).await
        }
        .await
        .map_err(scrub)
    }

    async fn stat(&self, ctx: &OperationContext, path: &str, args: OpStat) -> Result<RpStat> {
        self.stat_inner(ctx, path, args).await.map_err(scrub)
    }

    fn read(&self, ctx: &OperationContext, path: &str, args: OpRead) -> Result<Self::Reader> {
        FencedReader::new(self.core.clone(), ctx, path, args).map_err(scrub)
    }

    fn write(&self, ctx: &OperationContext, path: &str, args: OpWrite) -> Result<Self::Writer> {
        self.write_inner(ctx, path, args).map_err(scrub)
    }

    fn delete(&self, ctx: &OperationContext) -> Result<Self::Deleter> {
        Ok(FencedDeleter::new(self.core.clone(), ctx))
    }

    fn list(&self, ctx: &OperationContext, path: &str, args: OpList) -> Result<Self::Lister> {
        self.list_inner(ctx, path, args).map_err(scrub)
    }

    fn copy(
        &self,
        ctx: &OperationContext,
        from: &str,
        to: &str,
        args: OpCopy,
    ) -> Result<Self::Copier> {
        self.core.can_fence()?;
        let cond = Cond::of_copy(&args)?;
        let source_version = args.source_version().map(str::to_owned);
        let core = self.core.clone();
        let (ctx, from, to) = (ctx.clone(), from.to_owned(), to.to_owned());
        Ok(oio::OneShotCopier::new(async move {
            let token = core.token()?;
            core.copy_fenced(&ctx, &from, &to, source_version, cond, token)
                .await
                .map_err(scrub)
        }))
    }

    async fn rename(
        &self,
        ctx: &OperationContext,
        from: &str,
        to: &str,
        args: OpRename,
    ) -> Result<RpRename> {
        self.rename_inner(ctx, from, to, args).await.map_err(scrub)
    }

    async fn presign(
        &self,
        _ctx: &OperationContext,
        _path: &str,
        _args: OpPresign,
    ) -> Result<RpPresign> {
        Err(refused(
            "presigned requests (a presigned write is not fenced, a presigned read returns the \
             fencing frame)",
        ))
    }
}

/// The operations' bodies; the trait's methods scrub what they return.
impl FencedService {
    async fn stat_inner(&self, ctx: &OperationContext, path: &str, args: OpStat) -> Result<RpStat> {
        if path.ends_with('/') {
            return self.core.inner.stat(ctx, path, args).await;
        }
        match self
            .core
            .read_head(ctx, path, stat_as_read(&args), HEADER)
            .await?
        {
            Some(head) if head.has_value => Ok(RpStat::new(head.caller_meta())),
            _ => Err(not_found(path)),
        }
    }

    fn write_inner(
        &self,
        ctx: &OperationContext,
        path: &str,
        args: OpWrite,
    ) -> Result<FencedWriter> {
        if args.append() {
            return Err(refused(
                "append writes (an appended part is not conditioned on the object's version, \
                 so it would bypass the token check): write the whole object; nothing was written",
            ));
        }
        self.core.can_fence()?;
        let cond = Cond::of_write(&args)?;
        let token = self.core.token()?;
        self.core.check_write(path, token, 0)?;
        Ok(FencedWriter::new(self.core.clone(), ctx, path, args, cond))
    }

    fn list_inner(&self, ctx: &OperationContext, path: &str, args: OpList) -> Result<FencedLister> {
        if args.versions() || args.deleted() {
            return Err(refused(
                "listing versions or deleted objects (old versions and tombstones are not what \
                 the fenced store holds now)",
            ));
        }
        FencedLister::new(self.core.clone(), ctx, path, args)
    }

    async fn rename_inner(
        &self,
        ctx: &OperationContext,
        from: &str,
        to: &str,
        args: OpRename,
    ) -> Result<RpRename> {
        self.core.can_fence()?;
        let cond = if args.if_not_exists() {
            Cond::Create
        } else {
            Cond::Overwrite
        };
        let token = self.core.token()?;
        // The source's tombstone would be refused below its mark: refuse
        // before the destination is written, not after.
        if let Some(source) = self
            .core
            .read_head(ctx, from, OpRead::new(), HEADER)
            .await?
            && token < source.mark
        {
            return Err(into_dal(Error::StaleToken {
                key: from.to_owned(),
                presented: token,
                current: source.mark,
            }));
        }
        self.core
            .copy_fenced(ctx, from, to, None, cond, token)
            .await?;
        self.core.delete_fenced(ctx, from, token, None).await?;
        Ok(RpRename::new())
    }
}
