//! Renewals on etcd's own keep-alive: one stream per held lease, kept open
//! between renewals ([`TokenIssuer::renewal`]).

use std::fmt;
use std::time::Instant;

use async_trait::async_trait;
use fencing_core::keepalive::Renewal;
use fencing_core::{Lease, Result};

use crate::EtcdIssuer;
use crate::client::KeepAliveStream;
use crate::error::map_error;
use crate::issuer::renewal_call;

/// One lease's keep-alive stream, opened at the first renewal and again
/// after a failure; each keep-alive is followed by the check that the lock
/// key is still ours, as [`TokenIssuer::renew`](fencing_core::TokenIssuer::renew) does.
pub(crate) struct Stream {
    issuer: EtcdIssuer,
    open: Option<KeepAliveStream>,
}

impl Stream {
    pub(crate) fn new(issuer: EtcdIssuer) -> Self {
        Self { issuer, open: None }
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("etcd::keep_alive::Stream")
            .field("open", &self.open.as_ref().map(KeepAliveStream::lease_id))
            .finish()
    }
}

#[async_trait]
impl Renewal for Stream {
    async fn renew(&mut self, lease: &Lease) -> Result<Lease> {
        let lock = self.issuer.renewable(lease).await?;
        let rpc = self.issuer.rpc();
        let sent = Instant::now();
        let kept = match &mut self.open {
            Some(open) if open.lease_id() == lock.lease_id => rpc.keep_alive_on(open).await,
            _ => rpc
                .open_keep_alive(lock.lease_id)
                .await
                .map(|open| self.open = Some(open)),
        };
        if let Err(e) = kept {
            // A stream that failed once is not trusted again.
            self.open = None;
            return Err(map_error(e, renewal_call(lease, "keep the lease alive")));
        }
        self.issuer.still_ours(lease, &lock, sent).await
    }
}
