//! The issuer trait: lock services that grant leases with fencing tokens.

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;

use crate::safety::{self, SafetyCheck};
use crate::{Error, FencingToken, Holding, Lease, LeaseRequest, Result};

/// A lock service that grants leases, each carrying a fencing token.
///
/// Usable as `Arc<dyn TokenIssuer>`.
///
/// # Contract
/// Every implementation guarantees, and `fencing-testkit`'s issuer suite
/// checks:
/// 1. **Tokens strictly increase per resource** with every grant, across
///    issuer restarts and leader failovers.
/// 2. **At most one live holder** per resource: while a lease is live (not
///    expired, not released) no other holder is granted it.
/// 3. **Expiry frees the resource.** After a holder stops renewing and its
///    TTL passes, the next acquire succeeds, with a higher token.
/// 4. **Renew keeps the token** and extends the lease; renewing a lease that
///    is no longer held fails with [`Error::LeaseLost`].
/// 5. **Release frees the resource at once**; releasing a lease that is no
///    longer held fails with [`Error::LeaseLost`] and does not disturb the
///    current holder.
/// 6. A re-entrant acquire by the same [`HolderId`](crate::HolderId), where
///    an issuer offers it ([`TokenIssuer::reentrant`]), keeps the token.
/// 7. **Correctness never depends on clocks**: expiry is decided by one
///    clock, the lock service's own (a server's TTL, a database's `now()`,
///    the `Date` of the one answer that carried an object store's record
///    against that record's `Last-Modified`, never another answer's `Date`)
///    or a waiter's monotonic clock timing how long a record stayed
///    unchanged; a wall clock is never compared across machines. A [`Lease`]'s
///    deadline is local and conservative: it counts from before the
///    request was sent, so it ends before any judge of expiry can see the
///    lease dead (clocks that run at the same rate, as every TTL assumes).
/// 8. **Tokens never go backwards**: an issuer whose counter could be lost
///    refuses with [`Error::UnsafeConfiguration`] unless the caller opts in;
///    after [`raise_floor`](Self::raise_floor) every grant is above the floor,
///    and a floor never lowers a counter. A counter kept in a record that an
///    operator can delete (a bucket's lease record, a SQL lease row, a Redis
///    key, a DynamoDB item) starts again at the backend's clock in
///    microseconds, not at 1, so a deletion does not send tokens back
///    unless that clock went back too.
#[async_trait]
pub trait TokenIssuer: Send + Sync + Debug {
    /// A short name for messages, e.g. `"etcd"`.
    fn name(&self) -> &'static str;

    /// The shortest TTL this issuer accepts (etcd counts in seconds,
    /// ZooKeeper in session ticks).
    fn min_ttl(&self) -> Duration {
        Duration::from_millis(1)
    }

    /// Whether the same holder acquiring a held resource again gets the same
    /// lease back (same token) instead of waiting.
    fn reentrant(&self) -> bool {
        false
    }

    /// Whether this issuer tells that a holder stopped renewing only by
    /// watching its lease unchanged for a TTL of the waiter's own clock
    /// (the bucket lease by default, DynamoDB): no server clock says when a
    /// lease expired. A one-try [`try_acquire`](Self::try_acquire) then
    /// never takes over an abandoned lease; an [`acquire`](Self::acquire)
    /// that waits at least the lease's TTL does. Default: no, the issuer's
    /// server frees an expired lease itself.
    fn expiry_needs_watching(&self) -> bool {
        false
    }

    /// Tries once: `Ok(None)` if another holder has the resource.
    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>>;

    /// Acquires, waiting up to `wait` for the current holder to release or
    /// expire; [`Error::Timeout`] after that.
    ///
    /// The default polls [`try_acquire`](Self::try_acquire) with a capped
    /// backoff; issuers that can watch for release override it.
    async fn acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Lease> {
        poll_acquire(
            self,
            request,
            wait,
            Duration::from_millis(5),
            Duration::from_millis(100),
        )
        .await
    }

    /// Extends a held lease by its TTL, keeping its token.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the lease expired or was taken.
    async fn renew(&self, lease: &Lease) -> Result<Lease>;

    /// This issuer's own way of keeping `lease` alive, if its service has
    /// one better than a [`renew`](Self::renew) call per renewal (etcd's
    /// keep-alive stream): a [`KeepAlive`](crate::keepalive::KeepAlive)
    /// sends its renewals through it. A renewal through it obeys clause 4
    /// as `renew` does. Default: none, renewals call `renew`.
    fn renewal(&self, lease: &Lease) -> Option<Box<dyn crate::keepalive::Renewal>> {
        let _ = lease;
        None
    }

    /// Gives the lease up so the next holder gets in at once.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the lease was no longer held.
    async fn release(&self, lease: &Lease) -> Result<()>;

    /// Who holds the resource now, if anyone.
    async fn holder(&self, resource: &str) -> Result<Option<Holding>>;

    /// Makes every later grant on `resource` carry a token above `floor`,
    /// for taking a resource over from another issuer without a token ever
    /// going backwards. A floor only rises: a lower one changes nothing.
    ///
    /// # Errors
    /// [`Error::Unsupported`] from an issuer that cannot take a floor (the
    /// default).
    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        let _ = (resource, floor);
        Err(Error::Unsupported {
            backend: self.name(),
            operation: "raise_floor",
        })
    }

    /// Removes what `resource` keeps on the server (its counter, its lease
    /// record) if it is idle: no lease held, and none granted for
    /// `idle_for` (nor renewed or released, where the backend can tell:
    /// SQL and the watched records can, Redis and ZooKeeper see grants only), judged by
    /// the server's clock or, where the backend has none, by this caller
    /// watching the record unchanged for that long (the call then takes
    /// `idle_for`). Removal never sends a token back: a record is removed
    /// only where the one made again starts above every token it gave (at
    /// the backend's clock, clause 8), with `idle_for` to spare: its
    /// counter must be at least `idle_for` below that clock, so a clock
    /// that seeds the next record and trails the one that judged by less
    /// (another node, a step back) still starts above it. One whose counter
    /// a floor put higher is kept ([`Removal::Floored`]). Every process
    /// that grants on the backend must run a release that seeds counters
    /// at the clock (an older one would make a removed counter again at
    /// 1). A holder paused across the removal finds
    /// its lease lost on its next renewal, and its writes are refused by
    /// every store that has seen a later token.
    ///
    /// For long-lived services that lock one name per task or per job:
    /// every such name otherwise keeps a record for ever. See "Running it
    /// for months" (`docs/running-for-months.md`).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an idle time below
    /// [`MIN_IDLE`](crate::adapter::MIN_IDLE);
    /// [`Error::Unsupported`] from an issuer whose records cannot be
    /// removed without a token going back, or that has no conditional
    /// delete (the default); the issuer's reason in
    /// [`Error::UnsafeConfiguration`] where a setting forbids it (a
    /// counter shared with clients that restart it at 1).
    async fn remove_idle(&self, resource: &str, idle_for: Duration) -> Result<Removal> {
        let _ = (resource, idle_for);
        Err(Error::Unsupported {
            backend: self.name(),
            operation: "remove_idle",
        })
    }

    /// Checks that this deployment cannot re-issue a token: the generic
    /// probe ([`safety::probe_issuer`]: two grants on
    /// [`safety::PROBE_RESOURCE`], the second above the first) plus the
    /// backend's own checks (Redis persistence and replication, etcd and
    /// ZooKeeper membership, the SQL lease clock). `fence doctor` prints
    /// them.
    ///
    /// # Errors
    /// A failure that kept the checks from running. Findings, safe or not,
    /// are [`SafetyCheck`]s.
    async fn verify(&self) -> Result<Vec<SafetyCheck>> {
        safety::probe_issuer(self).await
    }
}

/// What [`TokenIssuer::remove_idle`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Removal {
    /// The resource's records were removed; its next grant makes them
    /// again, above every token they gave.
    Removed,
    /// The resource kept nothing to remove.
    Absent,
    /// A lease is held, or was granted (or, where the backend keeps its
    /// time, renewed or released) within the idle period: kept.
    InUse,
    /// The counter is not at least the idle time below the backend's clock
    /// (a floor raised it there, from another issuer's tokens; or the
    /// record was made within the idle time): a record made again could
    /// start below it, so it is kept.
    Floored,
}

impl Removal {
    /// A word for output: `removed`, `absent`, `in-use`, `floored`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Removed => "removed",
            Self::Absent => "absent",
            Self::InUse => "in-use",
            Self::Floored => "floored",
        }
    }
}

/// However little of the wait is left, one try of [`poll_acquire`] gets
/// this long to be answered.
pub const TRY_AT_LEAST: Duration = Duration::from_secs(5);

/// Polls `issuer`'s [`try_acquire`](TokenIssuer::try_acquire) until it
/// grants or `wait` has passed ([`Error::Timeout`]), sleeping `first`,
/// then twice as long each time up to `cap`: the default
/// [`TokenIssuer::acquire`], and an issuer's own with other bounds.
///
/// One try gets the request's TTL, at least [`TRY_AT_LEAST`], and no more
/// than what is left of `wait` unless that is less than `TRY_AT_LEAST`. A
/// try still unanswered then (a stalled connection, an SDK with no read
/// timeout, a server that took the request and went quiet) is given up and
/// the next one sent at once, on the wait that is left: a grant answered
/// after its TTL would arrive expired, and one stalled request must not
/// cost the caller the rest of a long wait.
///
/// # Errors
/// [`Error::Timeout`] after `wait`; [`Error::OutcomeUnknown`] instead if a
/// try was given up unanswered (its grant may have been applied:
/// unrenewed, it ends after its TTL), and so is any failure of a later
/// try; otherwise what `try_acquire` returns.
pub async fn poll_acquire<I: TokenIssuer + ?Sized>(
    issuer: &I,
    request: &LeaseRequest,
    wait: Duration,
    first: Duration,
    cap: Duration,
) -> Result<Lease> {
    // Tokio's clock, so that a test with paused time can run the waits.
    let started = tokio::time::Instant::now();
    let mut backoff = first;
    let mut unanswered = None;
    loop {
        let limit = wait
            .saturating_sub(started.elapsed())
            .min(request.ttl)
            .max(TRY_AT_LEAST);
        let answered = match tokio::time::timeout(limit, issuer.try_acquire(request)).await {
            Ok(Ok(Some(lease))) => return Ok(lease),
            Ok(Ok(None)) => true,
            // A try given up earlier may have been granted: a failure now
            // does not say that nothing was written.
            Ok(Err(e)) => {
                return Err(match unanswered {
                    // The later failure stays the source, whole (its kind
                    // can be read back by downcasting).
                    Some(limit) if !matches!(e, Error::OutcomeUnknown { .. }) => {
                        Error::outcome_unknown(
                            issuer.name(),
                            format!(
                                "acquire {:?} (a try got no answer within {limit:?}, and a later \
                                 one failed)",
                                request.resource
                            ),
                            e,
                        )
                    }
                    _ => e,
                });
            }
            Err(_) => {
                tracing::debug!(
                    issuer = issuer.name(),
                    ?limit,
                    "a try went unanswered; trying again"
                );
                unanswered = Some(limit);
                false
            }
        };
        let waited = started.elapsed();
        if waited >= wait {
            let operation = format!("acquire {:?}", request.resource);
            return Err(match unanswered {
                Some(limit) => Error::outcome_unknown(
                    issuer.name(),
                    operation,
                    format!("a try got no answer within {limit:?}"),
                ),
                None => Error::Timeout {
                    operation,
                    after: waited,
                },
            });
        }
        // A try given up has waited long enough already.
        if answered {
            tokio::time::sleep(backoff.min(wait - waited)).await;
            backoff = (backoff * 2).min(cap);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// Takes every request and never answers, except the try numbered
    /// `grants_on` (from 1), which grants at once.
    #[derive(Debug, Default)]
    struct Stalled {
        grants_on: Option<u32>,
        fails_on: Option<u32>,
        tries: AtomicU32,
    }

    #[async_trait]
    impl TokenIssuer for Stalled {
        fn name(&self) -> &'static str {
            "stalled"
        }
        async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
            let this = self.tries.fetch_add(1, Ordering::SeqCst) + 1;
            if self.grants_on == Some(this) {
                let token = FencingToken::new(this.into());
                return Ok(Some(Lease::new(request, token, std::time::Instant::now())));
            }
            if self.fails_on == Some(this) {
                return Err(Error::backend("stalled", true, "throttled"));
            }
            std::future::pending().await
        }
        async fn renew(&self, lease: &Lease) -> Result<Lease> {
            Err(Error::lease_lost(lease))
        }
        async fn release(&self, lease: &Lease) -> Result<()> {
            Err(Error::lease_lost(lease))
        }
        async fn holder(&self, _: &str) -> Result<Option<Holding>> {
            Ok(None)
        }
    }

    /// A server that never answers ends an acquire at its wait (or the
    /// least one try gets), as an unknown outcome, instead of holding the
    /// caller for ever.
    #[tokio::test(start_paused = true)]
    async fn a_try_that_is_never_answered_ends_the_wait() {
        let request = LeaseRequest::new("r", Duration::from_secs(10));
        let started = tokio::time::Instant::now();
        let outcome = tokio::time::timeout(
            Duration::from_secs(3600),
            Stalled::default().acquire(&request, Duration::from_secs(30)),
        )
        .await
        .expect("acquire(wait = 30 s) still waiting after an hour");
        assert!(
            matches!(outcome, Err(Error::OutcomeUnknown { .. })),
            "{outcome:?}"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(30));
    }

    /// One stalled request costs a try, not the wait: after the TTL (at
    /// least `TRY_AT_LEAST`) the next try goes out at once and is granted.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_try_is_given_up_after_the_ttl() {
        for (ttl, given_up_after) in [
            (Duration::from_secs(10), Duration::from_secs(10)),
            (Duration::from_secs(1), TRY_AT_LEAST),
        ] {
            let issuer = Stalled {
                grants_on: Some(2),
                ..Stalled::default()
            };
            let started = tokio::time::Instant::now();
            let lease = issuer
                .acquire(&LeaseRequest::new("r", ttl), Duration::from_secs(60))
                .await
                .expect("the second try grants");
            assert_eq!(lease.token().get(), 2);
            assert_eq!(started.elapsed(), given_up_after, "ttl {ttl:?}");
        }
    }

    /// A try given up unanswered, then a try that fails (a throttled read):
    /// the first may have been granted, so the failure is an unknown
    /// outcome, never the read's "nothing written".
    #[tokio::test(start_paused = true)]
    async fn a_failure_after_a_try_given_up_is_an_unknown_outcome() {
        let issuer = Stalled {
            fails_on: Some(2),
            ..Stalled::default()
        };
        let outcome = issuer
            .acquire(
                &LeaseRequest::new("r", Duration::from_secs(1)),
                Duration::from_secs(60),
            )
            .await;
        match outcome {
            Err(e @ Error::OutcomeUnknown { .. }) => {
                assert!(e.chain().contains("throttled"), "{e:?}");
                let source = std::error::Error::source(&e).expect("the later failure");
                assert!(
                    matches!(source.downcast_ref::<Error>(), Some(Error::Backend { .. })),
                    "{source:?}"
                );
            }
            other => panic!("expected OutcomeUnknown, got {other:?}"),
        }
    }
}
