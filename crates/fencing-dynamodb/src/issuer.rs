//! [`DynamoIssuer`]: the AWS DynamoDB lock client's lease, with a fencing
//! counter in the same item.

mod grant;
mod item;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, TimeToLiveStatus};
use fencing_core::adapter::blob::ServerClock;
use fencing_core::adapter::{Call, poll_acquire};
use fencing_core::safety::SafetyCheck;
use fencing_core::{
    Error, FencingToken, HolderId, Holding, Lease, LeaseRequest, Result, TokenIssuer,
};

use crate::error::{NAME, map_error};
use crate::sightings::{Seen, Sightings};
use item::{Item, fresh_rvn, n};

/// The last token granted (N): never reset; an item that does not exist
/// starts at DynamoDB's clock in microseconds.
pub const COUNTER: &str = "counter";
/// The holder's id (S), absent when free.
pub const HOLDER: &str = "holder";
/// The record version number (S): fresh on every grant and renew.
pub const RVN: &str = "rvn";
/// The lease's TTL in milliseconds (N), as its holder asked.
pub const TTL_MS: &str = "ttl_ms";

/// Every write that builds on the counter holds only if the counter is
/// **equal** to a `u64` this process parsed (`#c = :expected`, `#c =
/// :token`): a condition expression has comparisons but no arithmetic and
/// no integer test, so no bound can tell `5.5` or `-3` (an operator's edit)
/// from a token, and `#c < :max` once let a grant through on them (counter
/// `6.5`, holder set, an answer no client can parse). Equality with a
/// whole number in range can only hold for that number: an item whose
/// counter is none is refused by DynamoDB, its refusal hands the item
/// back, and parsing it names the item as foreign with nothing written.
/// The free grant's `:expected` is a guess (the counter this issuer last
/// knew, or the one a refusal handed back): a stale one costs a request,
/// and so does an item deleted since (its refusal hands back no item, and
/// the next try is [`FREE_NEW`]). Every grant writes the counter as a
/// value, never by arithmetic on the server (`#c = :next`): the condition
/// fixes the counter it replaces, so the token is `:expected + 1` (or
/// `:seed + 1` on [`FREE_NEW`]), known before the request is sent.
const FREE_AT: &str = "attribute_not_exists(#h) AND #c = :expected";
/// The free grant with no guess: only an item without a counter passes;
/// one with a counter is refused and hands it back.
const FREE_NEW: &str = "attribute_not_exists(#h) AND attribute_not_exists(#c)";
/// A dead holder's takeover: the version seen for its TTL, and the counter
/// read with it.
const TAKEOVER: &str = "#r = :seen AND #c = :expected";

/// A [`TokenIssuer`] on a DynamoDB table (hash key `pk`, S): one item per
/// resource, `pk` = prefix + resource, with `counter` (the last token),
/// `holder`, `rvn` (a random record version number) and `ttl_ms`.
///
/// A free resource is granted by **one** conditional `UpdateItem`
/// (`attribute_not_exists(holder)`, the counter equal to the one last
/// known, `counter = :next`, that counter plus one; on an item with no
/// counter, `:clock` plus one), with no read first: a held one, or a counter that moved on, refuses it and hands
/// back the item as it was. Equality, not a bound: a counter edited by
/// hand to `5.5` or `-3` passes every bound, but equals no `u64`, so
/// DynamoDB refuses the write. An item that does not exist (the first
/// grant, or one an operator deleted with `delete-item`) starts at
/// DynamoDB's clock in
/// microseconds, from the `Date` of its answers, never at 1: above every
/// token a deleted item gave unless it was made again within a second of
/// its first grant (`Date` counts whole seconds), granted more than one
/// token per microsecond, or a floor put it above the clock. An issuer that
/// has seen no answer yet reads the item first. A held one is taken over
/// only when the **same** `rvn` has been seen for its `ttl_ms` on this
/// process's monotonic clock, conditioned on `rvn` (and the counter) being
/// unchanged: expiry never compares wall clocks, so a client whose clock is
/// off can neither steal a live lease nor keep a dead one. Release keeps
/// the counter, so tokens never restart. Writes are never retried by the
/// SDK: a lost answer is [`Error::OutcomeUnknown`].
#[derive(Clone)]
pub struct DynamoIssuer {
    client: Client,
    table: String,
    prefix: String,
    /// For `verify`'s transport check: `None` is a caller's own client.
    endpoint: Option<String>,
    /// Per item key: the rvn last seen and when, bounded.
    seen: Arc<Mutex<Sightings>>,
    /// DynamoDB's time, from the `Date` of the client's answers.
    clock: Arc<ServerClock>,
    /// Per item key, the counter last known: the free grant's guess.
    counters: Arc<Mutex<Sightings<u64>>>,
}

impl std::fmt::Debug for DynamoIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoIssuer")
            .field("table", &self.table)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl DynamoIssuer {
    /// The default prefix of the issuer's items, apart from the store's keys.
    pub const DEFAULT_PREFIX: &'static str = "fencing-lease:";
    /// The highest floor: the next grant, one above it, must fit a `u64`.
    pub const MAX_FLOOR: FencingToken = FencingToken::new(u64::MAX - 1);

    /// An issuer on `table` through your configured `client`, with the
    /// default prefix. Nothing is sent until the first operation.
    /// The issuer's requests carry an interceptor of its own, which reads
    /// each answer's `Date`; your client is not changed.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        let clock = Arc::new(ServerClock::new());
        Self {
            client: crate::clock::observing(client, &clock),
            table: table.into(),
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            endpoint: None,
            seen: Arc::default(),
            clock,
            counters: Arc::default(),
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
        &self.table
    }

    /// The prefix of the items' `pk`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn key(&self, resource: &str) -> String {
        format!("{}{resource}", self.prefix)
    }

    #[cfg(test)]
    pub(crate) fn sightings(&self) -> &Mutex<Sightings> {
        &self.seen
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
        let key = self.key(&request.resource);
        // Before the issuer's first answer this reads the item, which also
        // gives the first guess of its counter.
        let seed = self.seed(&key).await?;
        // One request for a free resource whose counter this issuer knows:
        // the grant itself, which hands back the item as it was when it is
        // refused (held, or a counter moved on since the guess).
        let mut expected = self.guess(&key);
        let mut held = None;
        for _ in 0..3 {
            let condition = if expected.is_some() {
                FREE_AT
            } else {
                FREE_NEW
            };
            let item = match self
                .grant(request, &key, (condition, expected, None), seed)
                .await?
            {
                Ok(lease) => return Ok(Some(lease)),
                // No item to refuse on `#c = :expected`: deleted since
                // (by hand), so the next try starts it afresh.
                Err(None) if expected.is_some() => {
                    self.know(&key, None);
                    expected = None;
                    continue;
                }
                Err(old) => {
                    old.ok_or_else(|| self.foreign(&key, "a refused grant returned no item"))?
                }
            };
            if item.holder.is_some() {
                held = Some(item);
                break;
            }
            if item.counter == Some(u64::MAX) {
                return Err(Error::TokenOutOfRange {
                    token: FencingToken::new(u64::MAX),
                    max: Self::MAX_FLOOR,
                });
            }
            expected = item.counter;
        }
        // Free at every try but granted and released by others in
        // between: a poll tries again.
        let Some(item) = held else { return Ok(None) };
        let (Some(rvn), Some(ttl_ms), Some(counter)) = (item.rvn, item.ttl_ms, item.counter) else {
            return Err(self.foreign(&key, "it has a holder but no rvn, ttl_ms or counter"));
        };
        let now = Instant::now();
        let seen = self.seen.lock().expect("seen lock").get(&key);
        match seen {
            // The same version for its whole TTL on our clock: dead. A renew
            // in between changes the rvn and the takeover fails.
            Some(seen)
                if seen.rvn == rvn
                    && now.duration_since(seen.at) >= Duration::from_millis(ttl_ms) =>
            {
                // One past u64::MAX would leave a counter no client can
                // parse, and the item wedged.
                if counter == u64::MAX {
                    return Err(Error::TokenOutOfRange {
                        token: FencingToken::new(u64::MAX),
                        max: Self::MAX_FLOOR,
                    });
                }
                let takeover = (TAKEOVER, Some(counter), Some(rvn.as_str()));
                match self.grant(request, &key, takeover, seed).await? {
                    Ok(lease) => Ok(Some(lease)),
                    Err(_) => Ok(None),
                }
            }
            Some(seen) if seen.rvn == rvn => Ok(None),
            // A new version: its TTL counts from now (after the read).
            _ => {
                self.remember(&key, Some(Seen { rvn, at: now }));
                Ok(None)
            }
        }
    }

    /// Polls [`try_acquire`](TokenIssuer::try_acquire) (one conditional
    /// `UpdateItem` per try) with a backoff of 50 ms up to a quarter of the
    /// TTL and at most a second: DynamoDB cannot tell a waiter of a
    /// release (Streams could, at the cost of a stream reader per waiter).
    async fn acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Lease> {
        let cap = (request.ttl / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        poll_acquire(self, request, wait, Duration::from_millis(50), cap).await
    }

    /// # Errors
    /// [`Error::LeaseLost`] if the lease's local deadline has passed (a
    /// waiter may have judged it dead), or its holder and token are no
    /// longer in the item.
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        fencing_core::adapter::check_ttl(lease.ttl())?;
        if lease.is_expired() {
            return Err(Error::lease_lost(lease));
        }
        let key = self.key(lease.resource());
        let rvn = fresh_rvn();
        let sent_at = Instant::now();
        let answer = self
            .update("renew", &key, |r| {
                r.update_expression("SET #r = :rvn, #t = :ttl")
                    .condition_expression("#h = :h AND #c = :token")
                    .expression_attribute_values(
                        ":h",
                        AttributeValue::S(lease.holder().to_string()),
                    )
                    .expression_attribute_values(":token", n(lease.token().get()))
                    .expression_attribute_values(":rvn", AttributeValue::S(rvn.clone()))
                    .expression_attribute_values(
                        ":ttl",
                        n(fencing_core::adapter::ttl_millis_ceil(lease.ttl())),
                    )
            })
            .await?;
        match answer {
            Ok(_) => {
                self.remember(
                    &key,
                    Some(Seen {
                        rvn,
                        at: Instant::now(),
                    }),
                );
                Ok(lease.renewed(sent_at))
            }
            Err(_) => Err(Error::lease_lost(lease)),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let key = self.key(lease.resource());
        let answer = self
            .update("release", &key, |r| {
                // The counter stays: the next grant is above this token.
                r.update_expression("REMOVE #h, #r, #t")
                    .condition_expression("#h = :h AND #c = :token")
                    .expression_attribute_values(
                        ":h",
                        AttributeValue::S(lease.holder().to_string()),
                    )
                    .expression_attribute_values(":token", n(lease.token().get()))
            })
            .await?;
        match answer {
            Ok(_) => {
                self.remember(&key, None);
                // Release keeps the counter: the next grant's guess.
                self.know(&key, Some(lease.token().get()));
                Ok(())
            }
            Err(_) => Err(Error::lease_lost(lease)),
        }
    }

    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        let key = self.key(resource);
        let Some(item) = self.read("read holder of", &key).await? else {
            return Ok(None);
        };
        match (item.holder, item.counter) {
            (None, _) => Ok(None),
            (Some(holder), Some(counter)) => Ok(Some(Holding {
                holder: HolderId::new(holder)
                    .map_err(|_| self.foreign(&key, "its holder is no holder id"))?,
                token: FencingToken::new(counter),
            })),
            (Some(_), None) => Err(self.foreign(&key, "it has a holder but no counter")),
        }
    }

    /// Raises the counter of a **free** resource; a held one is
    /// [`Error::Busy`] (its holder's token is checked by renew and
    /// release). A floor above [`DynamoIssuer::MAX_FLOOR`] is
    /// [`Error::TokenOutOfRange`], before anything is sent.
    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        if floor > Self::MAX_FLOOR {
            return Err(Error::TokenOutOfRange {
                token: floor,
                max: Self::MAX_FLOOR,
            });
        }
        let key = self.key(resource);
        // Read first (a floor is rare; its read also sets the clock): a
        // counter that is no u64 fails to parse there, nothing written, and
        // the write is conditioned on the exact counter read (see FREE_AT).
        // An item that exists keeps its counter if higher; one that does
        // not starts at the clock at least, as a grant would start it, so
        // a floor after a delete-item cannot bring tokens back down.
        for _ in 0..3 {
            let (condition, read, start) = match self.read("raise the floor of", &key).await? {
                Some(Item {
                    holder: Some(_), ..
                }) => return Err(Error::busy(resource, "raise_floor")),
                Some(Item {
                    counter: Some(c), ..
                }) if c >= floor.get() => return Ok(()),
                Some(Item {
                    counter: Some(c), ..
                }) => (
                    "attribute_not_exists(#h) AND #c = :read",
                    Some(c),
                    floor.get(),
                ),
                _ => (
                    "attribute_not_exists(#h) AND attribute_not_exists(#c)",
                    None,
                    floor.get().max(self.seed(&key).await?),
                ),
            };
            let answer = self
                .update("raise the floor of", &key, |r| {
                    let r = r
                        .update_expression("SET #c = :f")
                        .condition_expression(condition)
                        .expression_attribute_values(":f", n(start));
                    match read {
                        Some(c) => r.expression_attribute_values(":read", n(c)),
                        None => r,
                    }
                })
                .await?;
            if answer.is_ok() {
                self.know(&key, Some(start));
                return Ok(());
            }
            // Changed meanwhile (a grant, another floor): judge it again.
        }
        Err(Error::busy(resource, "raise_floor"))
    }

    /// The table's checks (key schema, replication), the generic probe,
    /// DynamoDB's TTL deletion (on an attribute of ours it would delete a
    /// counter), how expiry is judged, and the transport.
    async fn verify(&self) -> Result<Vec<SafetyCheck>> {
        let mut checks = crate::table::checks(&self.client, &self.table).await?;
        if !checks.iter().all(SafetyCheck::is_safe) {
            return Ok(checks);
        }
        let ttl = self
            .client
            .describe_time_to_live()
            .table_name(&self.table)
            .send()
            .await
            .map_err(|e| map_error(e, Call::read(&format!("describe TTL of {}", self.table))))?;
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
        checks.push(match crate::clock::micros(&self.clock) {
            Some(_) => SafetyCheck::pass(
                "deleted counter",
                "a lease item deleted by hand is made again at DynamoDB's time in microseconds \
                 (the Date of its answers), above every token it gave",
            ),
            None => SafetyCheck::warn(
                "deleted counter",
                "DynamoDB's answers carry no Date: a lease item deleted by hand would restart \
                 its tokens at 1 (raise_floor after any such deletion)",
            ),
        });
        checks.extend(fencing_core::safety::probe_issuer(self).await?);
        if let Some(endpoint) = &self.endpoint {
            checks.push(fencing_core::tls::TlsOptions::endpoint_check(endpoint));
        }
        Ok(checks)
    }
}
