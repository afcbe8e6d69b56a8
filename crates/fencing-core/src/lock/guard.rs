//! [`LeaseGuard`]: what a [`Lock`](super::Lock) hands out.

use std::future::Future;
use std::task::Poll;

use crate::keepalive::{KeepAlive, Lost};
use crate::{Error, FencingToken, Lease, Result};

/// A held lease, renewed in the background: present
/// [`token`](Self::token) with every write, run the work under
/// [`run`](Self::run) (or select on [`lost`](Self::lost)), and
/// [`release`](Self::release) it when done.
///
/// **Dropping it releases the lease** in the background, on the Tokio
/// runtime it was taken on, so a holder that returns early or panics does
/// not keep the next one waiting for the TTL. `drop` never blocks; if that
/// runtime has shut down, nothing is sent and the lease runs out after its
/// TTL.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lease"]
pub struct LeaseGuard {
    pub(super) keep_alive: KeepAlive,
}

impl LeaseGuard {
    /// The lease's fencing token: present it with every write (run the
    /// write under [`run`](Self::run), or take the token from
    /// [`current`](Self::current), so that nothing is sent once the lease
    /// is known to be lost).
    pub fn token(&self) -> FencingToken {
        self.keep_alive.token()
    }

    /// The token to write with, while the lease is held.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] once the lease is lost, also past its local
    /// deadline before the keep-alive's timer fires (a process waking from
    /// a pause).
    pub fn current(&self) -> Result<FencingToken> {
        self.keep_alive.watch().current()
    }

    /// The lease as last renewed.
    pub fn lease(&self) -> Lease {
        self.keep_alive.lease()
    }

    /// Resolves when the lease is lost: a renewal was refused, or its local
    /// deadline passed before one succeeded (a paused process, an
    /// unreachable issuer). Does not borrow the guard; may be called any
    /// number of times.
    pub fn lost(&self) -> impl Future<Output = Lost> + Send + 'static {
        self.keep_alive.lost()
    }

    /// Whether the lease has been lost.
    pub fn is_lost(&self) -> bool {
        self.keep_alive.is_lost()
    }

    /// A cloneable view of the lease (its token, whether it is lost) for
    /// what writes under it without owning the guard: a store bound to the
    /// lease, another task.
    pub fn watch(&self) -> crate::keepalive::LeaseWatch {
        self.keep_alive.watch()
    }

    /// Runs `work` while the lease is held: its output, or
    /// [`Error::LeaseLost`] as soon as the lease is lost first (the work is
    /// dropped then, so it stops at its next `.await`; a write already sent
    /// is refused by the store if a newer holder fenced it).
    ///
    /// The lease is judged before every poll of the work: a lease already
    /// lost, or past its local deadline (a process waking from a pause,
    /// before the keep-alive's timer fires), never has its work polled, so
    /// nothing the work does before its first `.await`, or after the
    /// `.await` the pause happened in, runs.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] (converted into `E`), or the work's own error.
    pub async fn run<T, E: From<Error>>(
        &self,
        work: impl Future<Output = std::result::Result<T, E>>,
    ) -> std::result::Result<T, E> {
        let mut lost = std::pin::pin!(self.keep_alive.lost());
        let mut work = std::pin::pin!(work);
        std::future::poll_fn(|cx| {
            // Judged before every poll of the work, not only the first: a
            // pause while the work awaits ends with the work woken, maybe
            // before the keep-alive's timer or `lost`'s own has fired.
            if let Some(lost) = self.keep_alive.lost_now() {
                return Poll::Ready(Err(Error::from(lost).into()));
            }
            if let Poll::Ready(lost) = lost.as_mut().poll(cx) {
                return Poll::Ready(Err(Error::from(lost).into()));
            }
            work.as_mut().poll(cx)
        })
        .await
    }

    /// Stops renewing and gives the lease up so the next holder gets in at
    /// once.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if it was lost before; any error of
    /// [`TokenIssuer::release`](crate::TokenIssuer::release) (the lease then runs out after its TTL).
    pub async fn release(self) -> Result<()> {
        self.keep_alive.release().await
    }

    /// The keep-alive behind the guard, for what the guard does not say.
    pub fn keep_alive(&self) -> &KeepAlive {
        &self.keep_alive
    }
}
