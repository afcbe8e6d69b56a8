//! [`DynamoIssuer`]: the AWS DynamoDB lock client's lease, with a fencing
//! counter in the same item: the record lease of
//! [`fencing_core::adapter::record`] over DynamoDB items.

mod item;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::TimeToLiveStatus;
use fencing_core::adapter::blob::ServerClock;
use fencing_core::adapter::record::{LeaseExpiry, RecordLeases};
use fencing_core::adapter::{Call, poll_acquire};
use fencing_core::safety::SafetyCheck;
use fencing_core::{FencingToken, Holding, Lease, LeaseRequest, Removal, Result, TokenIssuer};

use crate::error::{NAME, map_error};
use item::Items;

/// The last token granted (N): never reset; an item that does not exist
/// starts at DynamoDB's clock in microseconds.
pub const COUNTER: &str = "counter";
/// The holder's id (S), absent when free.
pub const HOLDER: &str = "holder";
/// The record version number (S): fresh on every write.
pub const RVN: &str = "rvn";
/// The lease's TTL in milliseconds (N), as its holder asked; absent when
/// free.
pub const TTL_MS: &str = "ttl_ms";

/// A [`TokenIssuer`] on a DynamoDB table (hash key `pk`, S): one item per
/// resource, `pk` = prefix + resource, with `counter` (the last token),
/// `holder`, `rvn` (a random record version number, new on every write)
/// and `ttl_ms`: the record lease of [`fencing_core::adapter::record`],
/// whose rules it shares with the bucket lease.
///
/// Every write is one conditional `UpdateItem` on the version read (`rvn`
/// and `counter` both equal to what was read: equality, so a counter
/// edited by hand to `5.5` or `-3` equals no `u64` and DynamoDB refuses the
/// write), never retried by the SDK, and setting the counter as a value:
/// the token is known before the request is sent. A refusal hands back the
/// item as it is (`ALL_OLD`), judged without another read. A grant on an
/// item this issuer released is that one request; otherwise a strongly
/// consistent `GetItem` comes first.
///
/// An item that does not exist (the first grant, or one an operator
/// deleted with `delete-item`) starts at DynamoDB's clock in
/// microseconds, from the `Date` of its answers plus the second that
/// `Date` is truncated to, and is granted only once that second has passed:
/// above every token a deleted item gave, made again in the same second
/// too. A server whose answers carry no `Date` gets no new items
/// ([`Error::UnsafeConfiguration`](fencing_core::Error::UnsafeConfiguration)).
/// A held item is taken over only when the **same** version has been seen
/// for its `ttl_ms` on this process's monotonic clock, conditioned on that
/// version: expiry never compares wall clocks. Release keeps the counter,
/// so tokens never restart. A lost answer is settled by reading the item
/// back (its `rvn` is the write's own); [`Error::OutcomeUnknown`](fencing_core::Error::OutcomeUnknown)
/// only when no read can tell.
#[derive(Clone)]
pub struct DynamoIssuer {
    prefix: String,
    /// For `verify`'s transport check: `None` is a caller's own client.
    endpoint: Option<String>,
    leases: RecordLeases<Items>,
}

impl std::fmt::Debug for DynamoIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoIssuer")
            .field("table", &self.table())
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl DynamoIssuer {
    /// The default prefix of the issuer's items, apart from the store's keys.
    pub const DEFAULT_PREFIX: &'static str = "fencing-lease:";
    /// The highest floor: the next grant, one above it, must fit a `u64`.
    pub const MAX_FLOOR: FencingToken = RecordLeases::<Items>::MAX_FLOOR;

    /// An issuer on `table` through your configured `client`, with the
    /// default prefix. Nothing is sent until the first operation.
    /// The issuer's requests carry an interceptor of its own, which reads
    /// each answer's `Date`; your client is not changed.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        let clock = Arc::new(ServerClock::new());
        let items = Items {
            client: crate::clock::observing(client, &clock),
            table: table.into(),
            clock,
        };
        Self {
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            endpoint: None,
            leases: RecordLeases::new(items, LeaseExpiry::WaiterClock),
        }
    }

    /// Another prefix for the items' `pk`.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Names the endpoint `client` talks to (`None`: AWS itself), for
    /// `verify`'s transport check; [`crate::DynamoConfig`] does it.
    #[must_use]
    pub fn with_endpoint(mut self, endpoint: Option<&str>) -> Self {
        self.endpoint = Some(crate::table::shown_endpoint(endpoint));
        self
    }

    /// The table.
    pub fn table(&self) -> &str {
        &self.leases.port().table
    }

    /// The prefix of the items' `pk`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.leases.port().client
    }

    fn key(&self, resource: &str) -> String {
        format!("{}{resource}", self.prefix)
    }

    #[cfg(test)]
    fn with_memory_cap(mut self, cap: usize) -> Self {
        self.leases = self.leases.with_memory_cap(cap);
        self
    }
}

#[async_trait]
impl TokenIssuer for DynamoIssuer {
    fn name(&self) -> &'static str {
        NAME
    }

    fn expiry_needs_watching(&self) -> bool {
        true
    }

    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
        request.validate(self.min_ttl())?;
        self.leases
            .try_acquire(&self.key(&request.resource), request)
            .await
    }

    /// Polls [`try_acquire`](TokenIssuer::try_acquire) (one `GetItem` per
    /// try) with a backoff of 50 ms up to a quarter of the TTL and at most
    /// a second: DynamoDB cannot tell a waiter of a release (Streams could,
    /// at the cost of a stream reader per waiter).
    async fn acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Lease> {
        let cap = (request.ttl / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        poll_acquire(self, request, wait, Duration::from_millis(50), cap).await
    }

    /// # Errors
    /// [`Error::LeaseLost`](fencing_core::Error::LeaseLost) if the lease's
    /// local deadline has passed (a waiter may have judged it dead), or
    /// the item no longer names its holder and token.
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        self.leases.renew(&self.key(lease.resource()), lease).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        self.leases
            .release(&self.key(lease.resource()), lease)
            .await
    }

    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        let key = self.key(resource);
        let items = self.leases.port();
        self.leases
            .holder(&key, || items.foreign(&key, "its holder is no holder id"))
            .await
    }

    /// Raises the counter of a free (or dead) resource, making its item if
    /// need be; a live holder's is [`Error::Busy`](fencing_core::Error::Busy).
    /// A floor above [`DynamoIssuer::MAX_FLOOR`] is
    /// [`Error::TokenOutOfRange`](fencing_core::Error::TokenOutOfRange),
    /// before anything is sent.
    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        self.leases
            .raise_floor(&self.key(resource), resource, floor)
            .await
    }

    /// One `DeleteItem` on the version this issuer has seen unchanged for
    /// `idle_for` (waiting out what it has not seen), if the counter is
    /// below DynamoDB's clock.
    async fn remove_idle(&self, resource: &str, idle_for: Duration) -> Result<Removal> {
        self.leases.remove_idle(&self.key(resource), idle_for).await
    }

    /// The table's checks (key schema, replication), the generic probe,
    /// DynamoDB's TTL deletion (on an attribute of ours it would delete a
    /// counter), how expiry is judged, and the transport.
    async fn verify(&self) -> Result<Vec<SafetyCheck>> {
        let mut checks = crate::table::checks(self.client(), self.table()).await?;
        if !checks.iter().all(SafetyCheck::is_safe) {
            return Ok(checks);
        }
        let ttl = self
            .client()
            .describe_time_to_live()
            .table_name(self.table())
            .send()
            .await
            .map_err(|e| map_error(e, Call::read(&format!("describe TTL of {}", self.table()))))?;
        let deleting = ttl.time_to_live_description().and_then(|d| {
            let on = matches!(
                d.time_to_live_status(),
                Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
            );
            d.attribute_name().filter(|_| on)
        });
        checks.push(match deleting {
            Some(a) if [COUNTER, HOLDER, RVN, TTL_MS].contains(&a) => SafetyCheck::unsafe_(
                "item expiry",
                format!(
                    "DynamoDB TTL deletes items by attribute {a:?}, one of the lease item's: \
                     held leases would vanish and a counter restart from the clock; disable it \
                     or use another attribute"
                ),
            ),
            Some(a) => SafetyCheck::pass(
                "item expiry",
                format!("DynamoDB TTL is on attribute {a:?}, which lease items never carry"),
            ),
            None => SafetyCheck::pass("item expiry", "DynamoDB TTL deletion is off"),
        });
        checks.push(SafetyCheck::pass(
            "lease clock",
            "expiry is judged on the waiter's monotonic clock (the same rvn for ttl_ms), \
             never by comparing wall clocks",
        ));
        checks.push(match self.leases.port().clock.now() {
            Some(_) => SafetyCheck::pass(
                "deleted counter",
                "a lease item deleted by hand is made again at DynamoDB's time in microseconds \
                 (the Date of its answers), granted once that time has passed, so above every \
                 token it gave",
            ),
            None => SafetyCheck::unsafe_(
                "deleted counter",
                "DynamoDB's answers carry no Date: a lease item deleted by hand could not be \
                 made again above the tokens it gave, so grants on new items are refused",
            ),
        });
        checks.extend(fencing_core::safety::probe_issuer(self).await?);
        if let Some(endpoint) = &self.endpoint {
            checks.push(fencing_core::tls::TlsOptions::endpoint_check(endpoint));
        }
        Ok(checks)
    }
}

#[cfg(test)]
mod tests;
