//! The record lease driven over a port: [`RecordPort`], [`run`], and
//! [`RecordLeases`], the [`TokenIssuer`](crate::TokenIssuer) half every
//! port shares.

use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::{
    Answer, Clocks, End, Known, LeaseExpiry, LeaseRecord, On, Op, RecordLease, Seen, Step,
};
use crate::adapter::Recent;
use crate::{Error, FencingToken, HolderId, Holding, Lease, LeaseRequest, Removal, Result};

/// What a conditional write of a record did.
#[derive(Debug)]
pub enum Wrote<V> {
    /// Applied; the record's new version.
    Written(V),
    /// The condition did not hold; the port cannot say what does.
    Refused,
    /// The condition did not hold, and the refusal carried the record
    /// (`None`: there is none), as DynamoDB's `ALL_OLD` does.
    RefusedShowing(Option<Seen<V>>),
}

/// One record's read and conditional write, on some store: all a new
/// record-lease backend writes (its layout, its conditions, its errors).
pub trait RecordPort: Send + Sync {
    /// The store's version of a record: what a conditional write names.
    type Version: Clone + PartialEq + Debug + Send + Sync + 'static;

    /// A short name of the backend, for errors.
    fn name(&self) -> &'static str;

    /// The record at `key`, strongly consistent; `None` if there is none.
    /// A value that is no lease record is an error naming `key`, with
    /// nothing written.
    fn read(&self, key: &str) -> impl Future<Output = Result<Option<Seen<Self::Version>>>> + Send;

    /// `record` written at `key` if `on` holds, in one request nothing
    /// below retries blindly. A lost answer is [`Error::OutcomeUnknown`].
    fn write(
        &self,
        key: &str,
        on: &On<Self::Version>,
        record: &LeaseRecord,
    ) -> impl Future<Output = Result<Wrote<Self::Version>>> + Send;

    /// Whether [`delete`](Self::delete) is implemented. Default: no.
    fn can_delete(&self) -> bool {
        false
    }

    /// Deletes the record at `key` if it is still at `version`: `true` if
    /// deleted, `false` if the condition did not hold (a record at another
    /// version, or none). A lost answer is [`Error::OutcomeUnknown`].
    /// Default: [`Error::Unsupported`], for a store with no conditional
    /// delete (an unconditional one could remove a lease granted after
    /// the record was judged idle).
    fn delete(
        &self,
        key: &str,
        version: &Self::Version,
    ) -> impl Future<Output = Result<bool>> + Send {
        let _ = (key, version);
        let backend = self.name();
        async move {
            Err(Error::Unsupported {
                backend,
                operation: "remove_idle",
            })
        }
    }

    /// The server's time, estimated from the `Date` of its answers (the
    /// answer that showed a record absent must have fed it); `None` where
    /// the port has none.
    fn server_now(&self) -> Option<SystemTime>;

    /// The most [`server_now`](Self::server_now) may trail the server's
    /// clock: a second (the grain of `Date`) by default.
    fn server_now_lag(&self) -> Duration {
        Duration::from_secs(1)
    }
}

/// The clocks after an answer that took `round_trip`: the port's estimate
/// trails the server's time by at most its lag (a `Date`'s second) plus
/// that round trip, since the answer's `Date` was stamped somewhere between
/// the request leaving and the answer arriving. A seed taken now is then
/// above the server's time when the record it follows was made.
fn clocks<P: RecordPort>(port: &P, round_trip: Duration) -> Clocks {
    Clocks {
        now: Instant::now(),
        server_now: port.server_now(),
        server_lag: port.server_now_lag() + round_trip,
    }
}

/// Drives `lease` over `port` on `key` to its end, keeping what it
/// remembers in `known`. A lost answer the machine could not settle is the
/// port's [`Error::OutcomeUnknown`]; a read or write that failed before
/// anything could have been applied is its error.
pub async fn run<P: RecordPort>(
    port: &P,
    key: &str,
    mut lease: RecordLease<P::Version>,
    known: &Mutex<Recent<Known<P::Version>>>,
) -> Result<End> {
    let mut first_unknown: Option<Error> = None;
    let mut failure: Option<Error> = None;
    let mut step = lease.start(&clocks(port, Duration::ZERO));
    loop {
        let sent = Instant::now();
        let answer = match step {
            Step::Done(end) => {
                known
                    .lock()
                    .expect("record memory lock")
                    .put(key, lease.memory().cloned());
                return match end {
                    End::Unknown => {
                        Err(first_unknown.expect("an unknown end follows a lost answer"))
                    }
                    End::ReadFailed => Err(failure.expect("a failed read ends so")),
                    end => Ok(end),
                };
            }
            Step::Read => match port.read(key).await {
                Ok(seen) => Answer::Read(seen),
                Err(e) => {
                    failure = Some(e);
                    Answer::ReadFailed
                }
            },
            Step::Write { on, record } => match port.write(key, &on, &record).await {
                Ok(Wrote::Written(version)) => Answer::Written(version),
                Ok(Wrote::Refused) => Answer::Refused,
                Ok(Wrote::RefusedShowing(seen)) => Answer::RefusedShowing(seen),
                Err(e @ Error::OutcomeUnknown { .. }) => {
                    first_unknown.get_or_insert(e);
                    Answer::Lost
                }
                Err(e) => {
                    known.lock().expect("record memory lock").put(key, None);
                    return Err(first_unknown.unwrap_or(e));
                }
            },
            Step::Wait { until } => {
                // The timer's grain is a millisecond: the last of the wait
                // (all of it on a clock read exactly, as the in-memory
                // one) is yielded away.
                if let Some(long) = until
                    .checked_duration_since(Instant::now())
                    .filter(|left| *left > Duration::from_millis(2))
                {
                    tokio::time::sleep(long - Duration::from_millis(1)).await;
                }
                while Instant::now() < until {
                    tokio::task::yield_now().await;
                }
                Answer::Waited
            }
        };
        step = lease.answer(answer, &clocks(port, sent.elapsed()));
    }
}

/// How many records a [`RecordLeases`] remembers.
const KNOWN_CAP: usize = 4096;

/// The [`TokenIssuer`](crate::TokenIssuer) operations of a record lease
/// over one port, with the memory of the records it saw (bounded, shared
/// by clones). An issuer on a record port names the key of each resource
/// and delegates to these.
pub struct RecordLeases<P: RecordPort> {
    port: P,
    expiry: LeaseExpiry,
    known: Arc<Mutex<Recent<Known<P::Version>>>>,
}

impl<P: RecordPort + Clone> Clone for RecordLeases<P> {
    fn clone(&self) -> Self {
        Self {
            port: self.port.clone(),
            expiry: self.expiry,
            known: Arc::clone(&self.known),
        }
    }
}

impl<P: RecordPort + Debug> Debug for RecordLeases<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordLeases")
            .field("port", &self.port)
            .field("expiry", &self.expiry)
            .finish_non_exhaustive()
    }
}

impl<P: RecordPort> RecordLeases<P> {
    /// The highest floor: the next grant, one above it, must fit a `u64`.
    pub const MAX_FLOOR: FencingToken = FencingToken::new(u64::MAX - 1);

    /// Leases on `port`'s records, expiry judged by `expiry`.
    pub fn new(port: P, expiry: LeaseExpiry) -> Self {
        Self {
            port,
            expiry,
            known: Arc::new(Mutex::new(Recent::with_cap(KNOWN_CAP))),
        }
    }

    /// The same leases with another expiry rule (the memory is shared).
    #[must_use]
    pub fn with_expiry(mut self, expiry: LeaseExpiry) -> Self {
        self.expiry = expiry;
        self
    }

    /// At most `cap` records remembered (a new, empty memory).
    #[must_use]
    pub fn with_memory_cap(mut self, cap: usize) -> Self {
        self.known = Arc::new(Mutex::new(Recent::with_cap(cap)));
        self
    }

    /// How many records are remembered.
    pub fn remembered(&self) -> usize {
        self.known.lock().expect("record memory lock").len()
    }

    /// How a waiter judges a held record dead.
    pub fn expiry(&self) -> LeaseExpiry {
        self.expiry
    }

    /// The port.
    pub fn port(&self) -> &P {
        &self.port
    }

    /// Forgets what was seen of `key` (after writing it some other way).
    pub fn forget(&self, key: &str) {
        self.known
            .lock()
            .expect("record memory lock")
            .put(key, None);
    }

    async fn call(&self, key: &str, op: Op) -> Result<End> {
        let memory = self.known.lock().expect("record memory lock").get(key);
        let lease = RecordLease::new(op, self.expiry, memory, rand::random());
        run(&self.port, key, lease, &self.known).await
    }

    fn out_of_range() -> Error {
        Error::TokenOutOfRange {
            token: FencingToken::new(u64::MAX),
            max: Self::MAX_FLOOR,
        }
    }

    fn no_server_clock(&self, key: &str) -> Error {
        Error::UnsafeConfiguration {
            backend: self.port.name(),
            reason: format!(
                "nothing written to {key:?}: this backend tells no server time (no `Date` on its \
                 answers, no `Last-Modified` on its reads), so a new lease record cannot start \
                 above the tokens of one deleted before it (tokens would restart at 1)"
            ),
        }
    }

    fn unexpected(&self, key: &str, end: End) -> Error {
        Error::backend(
            self.port.name(),
            false,
            format!("the lease record {key:?} ended a call as {end:?}"),
        )
    }

    /// Grants `request` on `key`'s record if it is free or dead; `None`
    /// while a live holder holds it (or another grant came first).
    pub async fn try_acquire(&self, key: &str, request: &LeaseRequest) -> Result<Option<Lease>> {
        let op = Op::Acquire {
            holder: request.holder.to_string(),
            // Rounded up: never shorter than the holder's deadline.
            ttl_ms: request.ttl_millis_ceil(),
        };
        match self.call(key, op).await? {
            End::Granted { token, sent_at } => {
                Ok(Some(Lease::new(request, FencingToken::new(token), sent_at)))
            }
            End::Held => Ok(None),
            End::OutOfRange => Err(Self::out_of_range()),
            End::NoServerClock => Err(self.no_server_clock(key)),
            end => Err(self.unexpected(key, end)),
        }
    }

    /// A fresh version of `lease`'s record, conditioned on the version
    /// last written (a read first if none is remembered).
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the lease's local deadline has passed (a
    /// waiter may have judged it dead) or the record is no longer its.
    pub async fn renew(&self, key: &str, lease: &Lease) -> Result<Lease> {
        crate::adapter::check_ttl(lease.ttl())?;
        if lease.is_expired() {
            return Err(Error::lease_lost(lease));
        }
        let op = Op::Renew {
            holder: lease.holder().to_string(),
            token: lease.token().get(),
            ttl_ms: crate::adapter::ttl_millis_ceil(lease.ttl()),
        };
        match self.call(key, op).await? {
            End::Renewed { sent_at } => Ok(lease.renewed(sent_at)),
            End::NotHeld => Err(Error::lease_lost(lease)),
            end => Err(self.unexpected(key, end)),
        }
    }

    /// Writes the holder away, keeping the counter.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the record is no longer the lease's.
    pub async fn release(&self, key: &str, lease: &Lease) -> Result<()> {
        let op = Op::Release {
            holder: lease.holder().to_string(),
            token: lease.token().get(),
        };
        match self.call(key, op).await? {
            End::Released => Ok(()),
            End::NotHeld => Err(Error::lease_lost(lease)),
            end => Err(self.unexpected(key, end)),
        }
    }

    /// The holder `key`'s record names, unless expiry judged it dead.
    /// `foreign` names a record whose holder is no holder id.
    pub async fn holder(
        &self,
        key: &str,
        foreign: impl FnOnce() -> Error,
    ) -> Result<Option<Holding>> {
        let Some(seen) = self.port.read(key).await? else {
            self.forget(key);
            return Ok(None);
        };
        // The same judgement a grant makes, on this read.
        let mut known = self.known.lock().expect("record memory lock");
        let mut lease = RecordLease::new(
            Op::Acquire {
                holder: String::new(),
                ttl_ms: 0,
            },
            self.expiry,
            known.get(key),
            0,
        );
        let now = Instant::now();
        let alive = lease.is_held_alive(seen.clone(), now);
        known.put(key, lease.memory().cloned());
        drop(known);
        match (seen.record.holder, alive) {
            (Some(holder), true) => Ok(Some(Holding {
                holder: HolderId::new(holder).map_err(|_| foreign())?,
                token: FencingToken::new(seen.record.counter),
            })),
            _ => Ok(None),
        }
    }

    /// Removes `key`'s record if it is idle ([`removal`](super::removal)):
    /// its version unchanged for `idle_for` (and a holder's TTL) as this
    /// process saw it, waiting out the rest of `idle_for` after a first
    /// read (a holder whose TTL is longer keeps it in use), then deleted
    /// on that version. A lost answer is settled by a
    /// read: a record gone was removed (by us or another sweep), one at
    /// the same version gets the delete again.
    ///
    /// # Errors
    /// [`Error::Unsupported`] before anything is read where the port has
    /// no conditional delete.
    pub async fn remove_idle(&self, key: &str, idle_for: Duration) -> Result<Removal> {
        if !self.port.can_delete() {
            return Err(Error::Unsupported {
                backend: self.port.name(),
                operation: "remove_idle",
            });
        }
        crate::adapter::check_idle(idle_for)?;
        let Some(first) = self.port.read(key).await? else {
            self.forget(key);
            return Ok(Removal::Absent);
        };
        let remembered = self
            .known
            .lock()
            .expect("record memory lock")
            .get(key)
            .filter(|k| k.seen.version == first.version)
            .map_or_else(Instant::now, |k| k.since);
        // Not the holder's TTL: a lease held with a TTL longer than the
        // idle time is in use, not worth the wait.
        let left = idle_for.saturating_sub(remembered.elapsed());
        // Seen unchanged for long enough already: the first read is the
        // last, not read again.
        let mut read = if left.is_zero() {
            Some(Some(first.clone()))
        } else {
            tokio::time::sleep(left).await;
            None
        };
        let mut unanswered = 0;
        loop {
            let seen = match read.take() {
                Some(seen) => seen,
                None => self.port.read(key).await?,
            };
            let Some(last) = seen else {
                self.forget(key);
                // After a lost answer: our delete, or another sweep's.
                return Ok(if unanswered > 0 {
                    Removal::Removed
                } else {
                    Removal::Absent
                });
            };
            if last.version != first.version {
                return Ok(Removal::InUse);
            }
            match super::removal(
                &last,
                remembered.elapsed(),
                idle_for,
                self.port.server_now(),
            ) {
                Removal::Removed => {}
                kept => return Ok(kept),
            }
            match self.port.delete(key, &last.version).await {
                Ok(true) => {
                    self.forget(key);
                    return Ok(Removal::Removed);
                }
                // Refused: changed since, or gone (another sweep's).
                Ok(false) => {
                    return Ok(match self.port.read(key).await? {
                        None => {
                            self.forget(key);
                            Removal::Absent
                        }
                        Some(_) => Removal::InUse,
                    });
                }
                Err(Error::OutcomeUnknown { .. }) if unanswered + 1 < super::MAX_UNANSWERED => {
                    unanswered += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Raises the counter of a free (or dead) record, making it if need
    /// be; a live holder's is [`Error::Busy`]. A floor above
    /// [`MAX_FLOOR`](Self::MAX_FLOOR) is [`Error::TokenOutOfRange`],
    /// before anything is sent.
    pub async fn raise_floor(&self, key: &str, resource: &str, floor: FencingToken) -> Result<()> {
        if floor > Self::MAX_FLOOR {
            return Err(Error::TokenOutOfRange {
                token: floor,
                max: Self::MAX_FLOOR,
            });
        }
        match self.call(key, Op::Floor(floor.get())).await? {
            End::Floored => Ok(()),
            End::Busy => Err(Error::busy(resource, "raise_floor")),
            End::Contention { attempts } => Err(Error::Contention {
                key: key.to_owned(),
                attempts,
            }),
            End::NoServerClock => Err(self.no_server_clock(key)),
            end => Err(self.unexpected(key, end)),
        }
    }
}
