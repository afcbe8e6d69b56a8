//! Where a write's token comes from: the lease the store is bound to, or
//! the call itself.

use fencing_core::keepalive::TokenSource;
use fencing_core::{Error, FencingToken, Result};
use object_store::Extensions;

/// The token of one call: a [`FencingToken`] in the options' extensions
/// (`PutOptions`, `PutMultipartOptions`, `CopyOptions`, `RenameOptions`)
/// wins over the bound source.
pub(crate) fn of_call(
    extensions: &Extensions,
    bound: Option<&dyn TokenSource>,
) -> Result<FencingToken> {
    if let Some(token) = extensions.get::<FencingToken>() {
        return Ok(*token);
    }
    match bound {
        Some(source) => source.current(),
        None => Err(Error::invalid_input(
            "this write carries no fencing token: bind the FencedObjectStore to a lease \
             (FencedObjectStore::new(store, guard.watch())) or put a FencingToken in the \
             options' extensions; nothing was written",
        )),
    }
}
