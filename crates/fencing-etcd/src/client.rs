//! The etcd calls this crate makes, each with the operation timeout, on
//! one shared client.

use std::future::Future;
use std::time::Duration;

use etcd_client::{
    Client, GetOptions, GetResponse, LeaseKeepAliveStream, LeaseKeeper, Txn, TxnOpResponse,
    TxnResponse, WatchOptions, WatchStream,
};

use crate::error::{Failure, invalid_token, never_sent};

/// How many times a call that never left this process is tried again.
const NOT_SENT_RETRIES: u32 = 4;

/// The etcd client and how long one call may take.
///
/// Cheap to clone: clones share the connection.
#[derive(Clone)]
pub(crate) struct Rpc {
    client: Client,
    timeout: Duration,
}

impl Rpc {
    pub(crate) fn new(client: Client, timeout: Duration) -> Self {
        Self { client, timeout }
    }

    /// The client, for anything the calls below do not cover.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// How long one call may take before it counts as failed.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The same client with another operation timeout.
    pub(crate) fn with_timeout(&self, timeout: Duration) -> Self {
        Self {
            client: self.client.clone(),
            timeout,
        }
    }

    /// Runs one call with the operation timeout, on a clone of the client.
    /// A call that never left this process (no connection to the member
    /// the balancer picked, e.g. a killed leader) is tried again, up to
    /// four times: the balancer then picks another member. A call refused
    /// for an expired auth token that etcd-client did not renew by itself
    /// ([`invalid_token`]) logs in again and is tried once more (etcd
    /// refused it before doing anything).
    pub(crate) async fn call<T, F, Fut>(&self, mut call: F) -> Result<T, Failure>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut attempt = 0_u32;
        let mut logged_in_again = false;
        loop {
            let client = self.client.clone();
            match tokio::time::timeout(self.timeout, call(client)).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) if attempt < NOT_SENT_RETRIES && never_sent(&e) => {
                    attempt += 1;
                    tracing::debug!(attempt, error = %e, "etcd call not sent; trying again");
                    tokio::time::sleep(Duration::from_millis(25) * attempt).await;
                }
                Ok(Err(e)) if !logged_in_again && invalid_token(&e) => {
                    logged_in_again = true;
                    tracing::debug!(error = %e, "etcd refused the auth token; logging in again");
                    match tokio::time::timeout(self.timeout, self.client.refresh_token()).await {
                        Ok(Ok(())) => {}
                        Ok(Err(refused)) => return Err(Failure::Etcd(refused)),
                        Err(_) => return Err(Failure::Elapsed(self.timeout)),
                    }
                }
                Ok(Err(e)) => return Err(Failure::Etcd(e)),
                Err(_) => return Err(Failure::Elapsed(self.timeout)),
            }
        }
    }

    pub(crate) async fn get(
        &self,
        key: String,
        options: GetOptions,
    ) -> Result<GetResponse, Failure> {
        self.call(|mut c| {
            let (key, options) = (key.clone(), options.clone());
            async move { c.get(key, Some(options)).await }
        })
        .await
    }

    pub(crate) async fn txn(&self, txn: Txn) -> Result<TxnResponse, Failure> {
        self.call(|mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await
    }

    /// Grants an etcd lease of `ttl` seconds; its id.
    pub(crate) async fn grant(&self, ttl: i64) -> Result<i64, Failure> {
        self.call(|mut c| async move { c.lease_grant(ttl, None).await.map(|g| g.id()) })
            .await
    }

    pub(crate) async fn revoke(&self, lease_id: i64) -> Result<(), Failure> {
        self.call(|mut c| async move { c.lease_revoke(lease_id).await.map(drop) })
            .await
    }

    /// Revokes a lease, ignoring failures (it expires by itself).
    pub(crate) async fn revoke_quietly(&self, lease_id: i64) {
        if let Err(e) = self.revoke(lease_id).await {
            tracing::debug!(lease_id, error = ?e, "revoking a lease failed; it will expire by itself");
        }
    }

    /// One keep-alive: `Ok` if etcd extended the lease.
    pub(crate) async fn keep_alive_once(&self, lease_id: i64) -> Result<(), Failure> {
        self.open_keep_alive(lease_id).await.map(drop)
    }

    /// Opens a keep-alive stream for `lease_id`: etcd has extended the
    /// lease once it returns.
    pub(crate) async fn open_keep_alive(&self, lease_id: i64) -> Result<KeepAliveStream, Failure> {
        let (keeper, stream) = self
            .call(|mut c| async move { c.lease_keep_alive(lease_id).await })
            .await?;
        Ok(KeepAliveStream { keeper, stream })
    }

    /// One keep-alive on an open stream: `Ok` if etcd extended the lease.
    pub(crate) async fn keep_alive_on(&self, open: &mut KeepAliveStream) -> Result<(), Failure> {
        let once = async {
            open.keeper.keep_alive().await?;
            match open.stream.message().await? {
                Some(answer) if answer.ttl() > 0 => Ok(()),
                // What etcd-client says when it opens a stream for a lease
                // etcd no longer has (see `lease_not_found`).
                Some(_) => Err(etcd_client::Error::LeaseKeepAliveError(
                    "lease not found".to_owned(),
                )),
                None => Err(etcd_client::Error::LeaseKeepAliveError(
                    "the keep-alive stream ended".to_owned(),
                )),
            }
        };
        match tokio::time::timeout(self.timeout, once).await {
            Ok(kept) => kept.map_err(Failure::Etcd),
            Err(_) => Err(Failure::Elapsed(self.timeout)),
        }
    }

    pub(crate) async fn watch(
        &self,
        key: Vec<u8>,
        options: WatchOptions,
    ) -> Result<WatchStream, Failure> {
        self.call(|mut c| {
            let (key, options) = (key.clone(), options.clone());
            async move { c.watch(key, Some(options)).await }
        })
        .await
    }
}

/// A keep-alive stream of one etcd lease, open between renewals.
pub(crate) struct KeepAliveStream {
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
}

impl KeepAliveStream {
    /// The etcd lease it keeps alive.
    pub(crate) fn lease_id(&self) -> i64 {
        self.keeper.id()
    }
}

/// The answers to a transaction's reads, in order.
pub(crate) fn gets(response: &TxnResponse) -> impl Iterator<Item = GetResponse> {
    response.op_responses().into_iter().filter_map(|r| match r {
        TxnOpResponse::Get(get) => Some(get),
        _ => None,
    })
}
