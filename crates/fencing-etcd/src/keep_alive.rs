//! A background keep-alive for one lease, for holders that ask for it.

use std::time::Duration;

use fencing_core::{Error, Lease, TokenIssuer};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::EtcdIssuer;

/// How soon to try again after a renewal failed for a reason other than a
/// lost lease.
const RETRY: Duration = Duration::from_millis(250);

/// Keeps one lease alive in the background; from [`EtcdIssuer::keep_alive`].
///
/// Renews at a third of the lease's TTL. The lease is reported lost when a
/// renewal finds it gone, or when renewals keep failing (etcd unreachable)
/// until its local [`deadline`](Lease::deadline) passes; the issuer then
/// refuses to renew it. Dropping the handle (or [`stop`](Self::stop)) stops
/// the renewals: the lease then expires after its TTL unless renewed by hand
/// or released.
#[derive(Debug)]
pub struct KeepAlive {
    state: watch::Receiver<Option<Lease>>,
    task: JoinHandle<()>,
}

impl KeepAlive {
    pub(crate) fn spawn(issuer: EtcdIssuer, lease: Lease) -> Self {
        let (tx, rx) = watch::channel(Some(lease.clone()));
        let task = tokio::spawn(async move {
            let mut current = lease;
            let mut pause = current.ttl() / 3;
            loop {
                tokio::time::sleep(pause).await;
                match issuer.renew(&current).await {
                    Ok(renewed) => {
                        current = renewed;
                        pause = current.ttl() / 3;
                        if tx.send(Some(current.clone())).is_err() {
                            return; // nobody holds the handle
                        }
                    }
                    Err(Error::LeaseLost { .. }) => break,
                    Err(e) if current.is_expired() => {
                        tracing::warn!(resource = current.resource(), token = %current.token(), error = %e,
                            "keep-alive failed until the lease's deadline passed: treating the lease as lost");
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "keep-alive failed; retrying");
                        pause = RETRY.min(current.remaining());
                    }
                }
            }
            issuer.abandon(&current);
            // Gone already, or unreachable: revoke if etcd still has it.
            let _ = issuer.release(&current).await;
            let _ = tx.send(None);
        });
        Self { state: rx, task }
    }

    /// The lease as last renewed (its deadline moves on), or `None` once it
    /// is lost.
    pub fn lease(&self) -> Option<Lease> {
        self.state.borrow().clone()
    }

    /// Whether the lease has been lost.
    pub fn is_lost(&self) -> bool {
        self.state.borrow().is_none()
    }

    /// Resolves when the lease is lost: stop the work it guards.
    pub async fn lost(&mut self) {
        let _ = self.state.wait_for(Option::is_none).await;
    }

    /// Stops renewing (the lease is not released; see
    /// [`TokenIssuer::release`]).
    pub fn stop(self) {}
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.task.abort();
    }
}
