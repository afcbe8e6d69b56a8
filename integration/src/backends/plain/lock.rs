//! Lock services' plain side: the fewest raw calls the service needs for
//! a lock, through the same kind of client on the same server, each row
//! of the bench a fenced call against a raw one.

use std::sync::Arc;
use std::time::Duration;

use fencing_tokens::{LeaseRequest, TokenIssuer};

use super::{BoxFuture, BoxResult};

/// One call the bench times (or, with an argument, one grant of the scale
/// rows), on sides it owns.
pub type Call<T, A = ()> = Arc<dyn Fn(A) -> BoxFuture<'static, BoxResult<T>> + Send + Sync>;

/// How the bench opens a lock service's sides.
#[derive(Clone, Copy, Debug)]
pub struct LockPlain {
    /// Where the sides connect: the server's first endpoint (a URL, or
    /// `host:port`).
    pub endpoint: fn() -> String,
    /// The sides at an endpoint, their keys under a prefix.
    pub connect: fn(String, String) -> BoxFuture<'static, BoxResult<LockSides>>,
}

/// A lock service's sides on one connection.
pub struct LockSides {
    /// The rows: the first is held to the bench's lock target.
    pub rows: Vec<LockRow>,
    /// The raw calls on a named lock, for the scale rows: `false` if
    /// another holder had it.
    pub raw_on: Call<bool, String>,
    /// What the server says its version is, for the report.
    pub version: Call<Option<String>>,
    /// Deletes what the sides left on the server.
    pub clean_up: Call<()>,
}

/// One row: the issuer's acquire + release against raw calls.
pub struct LockRow {
    /// What the row compares.
    pub operation: &'static str,
    /// How, for the report's notes.
    pub note: &'static str,
    /// Whether the bench's lock target applies.
    pub target: bool,
    /// The fenced side.
    pub fenced: Call<()>,
    /// The raw side.
    pub raw: Call<()>,
}

/// `f` on `sides`, as a [`Call`] that owns them.
pub fn call<S, T>(sides: &Arc<S>, f: for<'a> fn(&'a S) -> BoxFuture<'a, BoxResult<T>>) -> Call<T>
where
    S: Send + Sync + 'static,
    T: 'static,
{
    let sides = sides.clone();
    Arc::new(move |()| -> BoxFuture<'static, BoxResult<T>> {
        let sides = sides.clone();
        Box::pin(async move { f(&sides).await })
    })
}

/// `f` on `sides` and its argument, as a [`Call`] that owns them.
pub fn call_with<S, A, T>(
    sides: &Arc<S>,
    f: for<'a> fn(&'a S, A) -> BoxFuture<'a, BoxResult<T>>,
) -> Call<T, A>
where
    S: Send + Sync + 'static,
    A: Send + 'static,
    T: 'static,
{
    let sides = sides.clone();
    Arc::new(move |arg| -> BoxFuture<'static, BoxResult<T>> {
        let sides = sides.clone();
        Box::pin(async move { f(&sides, arg).await })
    })
}

/// One acquire through `issuer`, then its release.
///
/// # Errors
/// If either fails, or the resource was held.
pub async fn fenced_lock(issuer: &dyn TokenIssuer, resource: &str, ttl: Duration) -> BoxResult<()> {
    let lease = issuer
        .try_acquire(&LeaseRequest::new(resource, ttl))
        .await?
        .ok_or("the fenced side's resource was held")?;
    Ok(issuer.release(&lease).await?)
}
