//! Object stores' plain side: one unconditional upload through the
//! store's own client.

use std::sync::Arc;

use bytes::Bytes;
use fencing_core::adapter::blob::BlobBackend;

use super::{BoxFuture, BoxResult};

/// An object store's client, for the plain side: one unconditional
/// single-request upload of the same shape as the fenced one (content
/// type, one request, no metadata, no precondition). The bench's fenced
/// side and its bare conditional writes use the same backend.
pub trait PlainBlob: BlobBackend {
    /// Uploads `body` to `key`, overwriting whatever is there.
    fn plain_put<'a>(&'a self, key: &'a str, body: Bytes) -> BoxFuture<'a, BoxResult<()>>;
}

/// An object store's backend being opened.
pub type Opening = BoxFuture<'static, fencing_tokens::Result<Arc<dyn PlainBlob>>>;

/// How the bench opens an object store.
#[derive(Clone, Copy, Debug)]
pub struct BlobPlain {
    /// The backend on a bucket (made if missing) at an endpoint, as the
    /// adapter's `emulator::store` opens it.
    pub open: fn(String, String) -> Opening,
}
