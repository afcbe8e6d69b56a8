//! Where a write's token comes from: the lease the store is bound to, or
//! the call itself.

use std::fmt::Debug;

use fencing_core::keepalive::LeaseWatch;
use fencing_core::{Error, FencingToken, Result};
use object_store::Extensions;

/// What [`FencedObjectStore`](crate::FencedObjectStore) asks for the token
/// of a write that carries none of its own.
///
/// A [`LeaseWatch`] (from [`LeaseGuard::watch`](fencing_core::LeaseGuard::watch))
/// answers with the lease's token while it is held and with
/// [`Error::LeaseLost`] once it is lost, so a store bound to a lease stops
/// writing as soon as the holder knows it lost it (the store's mark refuses
/// it anyway once a newer holder wrote). A bare [`FencingToken`] always
/// answers with itself, for a token obtained elsewhere (`FENCING_TOKEN` of
/// `fence run`).
pub trait TokenSource: Send + Sync + Debug + 'static {
    /// The token to write with now.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the lease behind it is lost.
    fn current(&self) -> Result<FencingToken>;
}

impl TokenSource for FencingToken {
    fn current(&self) -> Result<FencingToken> {
        Ok(*self)
    }
}

impl TokenSource for LeaseWatch {
    fn current(&self) -> Result<FencingToken> {
        LeaseWatch::current(self)
    }
}

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
