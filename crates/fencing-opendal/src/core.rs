//! What the layer's operations share: the stack underneath, the token
//! source, the options, and what it remembers of its own writes. Every
//! operation's file builds on this one; nothing here imports them.

use std::sync::Arc;

use fencing_core::adapter::blob::{FRAME_HEADER_LEN, KnownVersions};
use fencing_core::adapter::cas::Known;
use fencing_core::keepalive::TokenSource;
use fencing_core::{Error, FencingToken, Limits};
use opendal::Result;
use opendal::raw::{Service as _, Servicer, build_abs_path};

use crate::error::into_dal;

/// The frame's length as object sizes count.
pub(crate) const HEADER: u64 = FRAME_HEADER_LEN as u64;

/// What the layer's operations share: the stack underneath, the token
/// source, the options, and the ETags of its own last writes.
pub(crate) struct Core {
    pub(crate) inner: Servicer,
    pub(crate) source: Arc<dyn TokenSource>,
    pub(crate) adopt_unfenced: bool,
    pub(crate) limits: Limits,
    pub(crate) max_attempts: u32,
    pub(crate) known: KnownVersions<Known<ETag>>,
}

impl Core {
    /// The token to write with now.
    pub(crate) fn token(&self) -> Result<FencingToken> {
        self.source.current().map_err(into_dal)
    }

    /// The object's key in the bucket (the service's root and `path`), as
    /// the key limit counts it.
    fn key(&self, path: &str) -> String {
        let root = self.inner.info().root();
        if root.starts_with('/') && root.ends_with('/') && !path.starts_with('/') {
            build_abs_path(&root, path)
        } else {
            path.to_owned()
        }
    }

    /// Checks a write of `len` value bytes at `path` with `token` against
    /// the limits, before anything is sent.
    pub(crate) fn check_write(&self, path: &str, token: FencingToken, len: usize) -> Result<()> {
        self.limits
            .check_write(&self.key(path), token, len)
            .map_err(into_dal)
    }

    /// Refuses a service that cannot condition a write on an object's ETag
    /// and on its absence: on it, nothing could stop a stale writer.
    pub(crate) fn can_fence(&self) -> Result<()> {
        let cap = self.inner.capability();
        if cap.write_with_if_match && (cap.write_with_if_not_exists || cap.write_with_if_none_match)
        {
            return Ok(());
        }
        Err(into_dal(Error::Unsupported {
            backend: self.inner.info().scheme(),
            operation: "conditional writes on an object's ETag and on its absence \
                        (write_with_if_match, and write_with_if_not_exists or \
                        write_with_if_none_match), which fencing needs: nothing was written",
        }))
    }
}

/// An ETag as the write engine compares it: [`etag_eq`].
#[derive(Clone, Debug)]
pub(crate) struct ETag(pub(crate) String);

impl PartialEq for ETag {
    fn eq(&self, other: &Self) -> bool {
        etag_eq(&self.0, &other.0)
    }
}

/// Whether two ETags name the same version (quotes and a weak marker
/// aside).
pub(crate) fn etag_eq(a: &str, b: &str) -> bool {
    fn bare(e: &str) -> &str {
        e.trim_start_matches("W/").trim_matches('"')
    }
    bare(a) == bare(b)
}
