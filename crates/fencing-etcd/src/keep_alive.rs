//! A background keep-alive for holders that ask for one: the core's
//! [`KeepAlive`], on an issuer that abandons what the keep-alive gives up.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencing_core::keepalive::KeepAlive;
use fencing_core::safety::SafetyCheck;
use fencing_core::{FencingToken, Holding, Lease, LeaseRequest, Result, TokenIssuer};

use crate::EtcdIssuer;

/// Starts the core keep-alive on `lease`, renewing through `issuer`.
pub(crate) fn spawn(issuer: &EtcdIssuer, lease: &Lease) -> KeepAlive {
    KeepAlive::spawn(Arc::new(GivesUp(issuer.clone())), lease.clone())
}

/// The issuer as a keep-alive sees it: a lease the keep-alive releases
/// (lost past its deadline, or released through the handle) is abandoned
/// first, so [`TokenIssuer::renew`] refuses it from then on, even while
/// etcd may still have it (the revoke failed, or did not finish in time).
/// Everything else is the issuer's own.
#[derive(Debug)]
struct GivesUp(EtcdIssuer);

#[async_trait]
impl TokenIssuer for GivesUp {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn min_ttl(&self) -> Duration {
        self.0.min_ttl()
    }

    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
        self.0.try_acquire(request).await
    }

    async fn acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Lease> {
        self.0.acquire(request, wait).await
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        self.0.renew(lease).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        self.0.abandon(lease);
        self.0.release(lease).await
    }

    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        self.0.holder(resource).await
    }

    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        self.0.raise_floor(resource, floor).await
    }

    async fn verify(&self) -> Result<Vec<SafetyCheck>> {
        self.0.verify().await
    }
}
