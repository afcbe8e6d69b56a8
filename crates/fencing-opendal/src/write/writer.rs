//! The writer a caller's `write` gets: chunks in memory, one fenced put
//! at `close`.

use fencing_core::FencingToken;
use opendal::raw::{OpWrite, oio};
use opendal::{Buffer, Metadata, OperationContext, Result};

use super::{Attrs, Cond};
use crate::core::{Core, HEADER};
use crate::error::scrub;
use crate::head::value_meta;

/// A caller's write: its chunks kept in memory, written at `close` as one
/// fenced put (no byte reaches the store before the token check).
pub(crate) struct FencedWriter {
    core: std::sync::Arc<Core>,
    ctx: OperationContext,
    path: String,
    attrs: Attrs,
    cond: Cond,
    chunks: Vec<Buffer>,
    len: usize,
}

impl FencedWriter {
    pub(crate) fn new(
        core: std::sync::Arc<Core>,
        ctx: &OperationContext,
        path: &str,
        args: OpWrite,
        cond: Cond,
    ) -> Self {
        Self {
            core,
            ctx: ctx.clone(),
            path: path.to_owned(),
            attrs: Attrs::of_write(&args),
            cond,
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl oio::Write for FencedWriter {
    async fn write(&mut self, bs: Buffer) -> Result<()> {
        let len = self.len.saturating_add(bs.len());
        // Over the limit: refused now, nothing was or will be written.
        self.core
            .check_write(&self.path, FencingToken::ZERO, len)
            .map_err(scrub)?;
        self.len = len;
        self.chunks.push(bs);
        Ok(())
    }

    async fn close(&mut self) -> Result<Metadata> {
        let token = self.core.token()?;
        // Kept until written, so that a failed close can be tried again.
        let value: Buffer = self.chunks.iter().cloned().flatten().collect();
        let stored = self
            .core
            .put(&self.ctx, &self.path, value, token, &self.cond, &self.attrs)
            .await
            .map_err(scrub)?;
        self.chunks.clear();
        self.len = 0;
        Ok(value_meta(stored, HEADER))
    }

    async fn abort(&mut self) -> Result<()> {
        self.chunks.clear();
        self.len = 0;
        Ok(())
    }
}
