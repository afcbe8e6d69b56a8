//! The record lease: a fenced lease held by conditional writes on one
//! record, written once.
//!
//! A store with compare-and-swap on a record (an object's ETag or
//! generation, a DynamoDB item's condition) but no lease of its own can
//! still grant fenced leases: one record per resource keeps the **counter**
//! (the last token granted), the holder and its TTL, and every change is a
//! conditional write on the version last read. A grant writes `counter +
//! 1` and the holder; a renew writes a fresh version; a release writes the
//! holder away and keeps the counter. Tokens therefore strictly increase
//! across holders, restarts and crashes. The rules, decided here for every
//! port:
//!
//! - **Expiry is judged by a waiter timing an unchanged version on its own
//!   monotonic clock; no two clocks are compared.** A held record is taken
//!   over, conditioned on its version, once this waiter has seen that same
//!   version for a whole TTL. The holder's deadline counts from before it
//!   sent its write and the waiter's from after the answer that showed it,
//!   so the holder's always ends first. A released record is free at once.
//!   [`LeaseExpiry::ServerClocksAgree`] (opt-in) also trusts the `Date` of
//!   the answer against the record's `Last-Modified`.
//! - **A record deleted by hand** takes its counter with it, so a record is
//!   made *unseeded* first (free, counter 0, nothing granted from it), then
//!   seeded, on its own version, at the server's time in microseconds after
//!   it was made, and granted only once the server's clock has passed that
//!   (see `seed.rs`): a record made again starts above every token the
//!   deleted one gave. A port that tells no server time is refused
//!   ([`End::NoServerClock`]).
//! - **Floors** only raise: a record made by a floor starts at the floor
//!   or where a grant would start it, whichever is higher.
//! - **A lost answer** is settled by reading the record back: the write's
//!   own nonce there means it was applied; the record still at the version
//!   the write named means it was not, and the same write is sent again on
//!   it (a record still absent gets a write with a new nonce instead: see
//!   `answer`); anything else means it was not applied (or was
//!   overwritten, which only a takeover after its deadline does). After
//!   [`MAX_UNANSWERED`] lost answers, or a failed read, the end is
//!   [`End::Unknown`].
//!
//! [`RecordLease`] is that protocol as a state machine that does no I/O,
//! one per call: given what the caller remembers of the record and an
//! [`Op`], it answers with the next [`Step`] (a read, a conditional write,
//! a wait for the server's clock) and consumes each [`Answer`] until it
//! ends. [`run`] drives it over a [`RecordPort`] (one read and one
//! conditional write of a record), and [`RecordLeases`] is the
//! [`TokenIssuer`](crate::TokenIssuer) half every port shares. The bucket
//! lease ([`BlobIssuer`](super::blob::BlobIssuer)) and the DynamoDB issuer
//! are its two ports; the model checker (`tests/model_lease.rs`) explores
//! this same machine against a modelled record.

use std::fmt::Debug;
use std::time::{Duration, Instant, SystemTime};

mod expiry;
mod run;
mod seed;

pub use self::expiry::LeaseExpiry;
pub use self::run::{RecordLeases, RecordPort, Wrote, run};
use self::seed::Seed;

/// How many answers one call may lose before its end is
/// [`End::Unknown`]: each is settled by a read, and a write still not
/// applied is sent again.
pub const MAX_UNANSWERED: u32 = 3;

/// How many conditional writes a grant, renew or release decides before
/// it gives up on a record others keep changing (a grant then reports
/// "held", and a poll tries again).
const MAX_WRITES: u32 = 3;

/// How many a floor decides before [`End::Contention`].
pub const FLOOR_WRITES: u32 = 8;

/// The lease record's content, whatever the port's layout.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseRecord {
    /// The last token granted.
    pub counter: u64,
    /// `None` when free.
    pub holder: Option<String>,
    /// The holder's TTL, as it asked, rounded up to the millisecond (0
    /// when free).
    pub ttl_ms: u64,
    /// Fresh on every write: it tells a write of this call apart when an
    /// answer was lost, and gives every write a version of its own.
    pub nonce: u128,
}

impl LeaseRecord {
    /// A record made before its counter is known: free, at counter 0, and
    /// nobody grants from its counter (see `seed.rs`).
    pub fn unseeded(nonce: u128) -> Self {
        Self {
            counter: 0,
            holder: None,
            ttl_ms: 0,
            nonce,
        }
    }

    /// Whether this is a record made before its counter was known.
    pub fn is_unseeded(&self) -> bool {
        self.counter == 0 && self.holder.is_none()
    }

    /// Whether the lease of `holder` at `token` is the one this record
    /// grants.
    pub fn is_held_by(&self, holder: &str, token: u64) -> bool {
        self.holder.as_deref() == Some(holder) && self.counter == token
    }
}

/// A record as a read (or a refusal that carried it) found it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Seen<V> {
    /// Its version, which a conditional write names.
    pub version: V,
    /// What it holds.
    pub record: LeaseRecord,
    /// Its last write on the server's clock (`Last-Modified`), where the
    /// port tells it.
    pub modified: Option<SystemTime>,
    /// The `Date` of the answer that carried it, where the port tells it.
    pub answered: Option<SystemTime>,
}

/// What a caller remembers of a record between calls: for its own next
/// write (no read) and for judging expiry on its own monotonic clock.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Known<V> {
    /// The record as last read or written.
    pub seen: Seen<V>,
    /// When the answer that showed it arrived.
    pub received: Instant,
    /// When this version was first seen.
    pub since: Instant,
}

/// What a conditional write of a record is conditioned on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum On<V> {
    /// No record.
    Absent,
    /// The record still at this version.
    At(V),
}

impl<V: PartialEq> On<V> {
    /// Whether a record at `version` (`None`: absent) meets the condition.
    pub fn holds_for(&self, version: Option<&V>) -> bool {
        match (self, version) {
            (Self::Absent, None) => true,
            (Self::At(expected), Some(version)) => expected == version,
            _ => false,
        }
    }
}

/// What one call does to a record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Grant the lease to `holder` if the record is free or dead.
    Acquire {
        /// The holder's id.
        holder: String,
        /// Its TTL, rounded up to the millisecond.
        ttl_ms: u64,
    },
    /// Write a fresh version of the lease `holder` holds at `token`.
    Renew {
        /// The holder's id.
        holder: String,
        /// The lease's token.
        token: u64,
        /// The TTL from now, rounded up to the millisecond.
        ttl_ms: u64,
    },
    /// Write the holder away, keeping the counter.
    Release {
        /// The holder's id.
        holder: String,
        /// The lease's token.
        token: u64,
    },
    /// Raise the counter of a free (or dead) record to at least this.
    Floor(u64),
}

/// What the caller's clocks say at a step: its monotonic clock, and its
/// estimate of the server's (for seeding a new record).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Clocks {
    /// This process's monotonic clock.
    pub now: Instant,
    /// The server's time, estimated from its answers (`None`: no estimate).
    pub server_now: Option<SystemTime>,
    /// The most `server_now` may trail the server's real time.
    pub server_lag: Duration,
}

/// The next thing a [`RecordLease`] needs done.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step<V> {
    /// Read the record: answer [`Answer::Read`] or [`Answer::ReadFailed`].
    Read,
    /// Write `record` if `on` holds: answer [`Answer::Written`],
    /// [`Answer::Refused`], [`Answer::RefusedShowing`] or [`Answer::Lost`].
    Write {
        /// The condition.
        on: On<V>,
        /// The record to write.
        record: LeaseRecord,
    },
    /// Wait until the monotonic clock reaches `until` (the server's clock
    /// has then passed a new record's first token): answer
    /// [`Answer::Waited`].
    Wait {
        /// When.
        until: Instant,
    },
    /// The call is over.
    Done(End),
}

/// What happened to the last [`Step`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Answer<V> {
    /// The record, or `None` when there is none.
    Read(Option<Seen<V>>),
    /// The read failed.
    ReadFailed,
    /// The write was applied; the record's new version.
    Written(V),
    /// The condition did not hold, and the port does not say what does.
    Refused,
    /// The condition did not hold, and the refusal carried the record as
    /// it is (`None`: there is none).
    RefusedShowing(Option<Seen<V>>),
    /// The write's answer was lost: it may or may not have been applied.
    Lost,
    /// The wait is over (or the caller woke early: it is asked again).
    Waited,
}

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum End {
    /// Granted at `token`; the lease's deadline counts from `sent_at`.
    Granted {
        /// The token.
        token: u64,
        /// When the write that granted it was first sent.
        sent_at: Instant,
    },
    /// Held by a live holder, or lost to another grant: not granted now.
    Held,
    /// Renewed; the deadline counts from `sent_at`.
    Renewed {
        /// When the write that renewed it was first sent.
        sent_at: Instant,
    },
    /// Released.
    Released,
    /// The record no longer grants the lease.
    NotHeld,
    /// The counter is at or above the floor.
    Floored,
    /// A live holder holds it: no floor raised.
    Busy,
    /// Others kept changing the record for this many writes.
    Contention {
        /// How many conditional writes were sent.
        attempts: u32,
    },
    /// A write's answer was lost and no read could tell what it did.
    Unknown,
    /// A read failed before any write of the call could have been applied:
    /// the caller reports the read's error.
    ReadFailed,
    /// The counter is at `u64::MAX`: no next token.
    OutOfRange,
    /// The port tells no server time, so a new record cannot be seeded.
    NoServerClock,
}

/// The write in flight.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Sending<V> {
    on: On<V>,
    record: LeaseRecord,
    sent_at: Instant,
    /// Decided on what the caller remembered, not on a read: a refusal
    /// only means the memory was old.
    guessed: bool,
    /// Some copy's answer was lost: a refusal of a later copy is settled
    /// by a read too (the first may have been applied).
    lost: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Phase<V> {
    Reading,
    Writing(Sending<V>),
    Settling(Sending<V>),
    Waiting {
        on: On<V>,
        record: LeaseRecord,
        until: Instant,
    },
    Done,
}

/// One call on one record, as a state machine that does no I/O (see the
/// [module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RecordLease<V> {
    op: Op,
    expiry: LeaseExpiry,
    memory: Option<Known<V>>,
    phase: Phase<V>,
    /// Conditional writes decided (a copy sent again is not one).
    writes: u32,
    unanswered: u32,
    /// The next write's nonce.
    nonce: u128,
}

impl<V: Clone + PartialEq + Debug> RecordLease<V> {
    /// A call doing `op`, with what the caller remembers of the record and
    /// a random `nonce` (each write of the call uses the next one).
    pub fn new(op: Op, expiry: LeaseExpiry, memory: Option<Known<V>>, nonce: u128) -> Self {
        Self {
            op,
            expiry,
            memory,
            phase: Phase::Reading,
            writes: 0,
            unanswered: 0,
            nonce,
        }
    }

    /// What the caller should remember of the record now (`None`: forget
    /// it).
    pub fn memory(&self) -> Option<&Known<V>> {
        self.memory.as_ref()
    }

    /// Whether a write's answer was lost in this call: an error now must
    /// be reported as an unknown outcome.
    pub fn lost_an_answer(&self) -> bool {
        self.unanswered > 0
    }

    /// Whether `seen`, just read at `now`, names a holder that is alive by
    /// the judgement a grant makes (remembered, so that a later call times
    /// the same version from here).
    pub fn is_held_alive(&mut self, seen: Seen<V>, now: Instant) -> bool {
        self.remember(Some(seen.clone()), now);
        seen.record.holder.is_some() && !self.expired(&seen, now)
    }

    /// The first step: a write straight from memory where the memory is
    /// the caller's own (a record it released, a lease it holds), else a
    /// read.
    pub fn start(&mut self, clocks: &Clocks) -> Step<V> {
        let remembered = self.memory.as_ref().map(|k| k.seen.clone());
        let trusted = remembered.filter(|seen| match &self.op {
            Op::Acquire { .. } => seen.record.holder.is_none() && !seen.record.is_unseeded(),
            Op::Renew { holder, token, .. } | Op::Release { holder, token } => {
                seen.record.is_held_by(holder, *token)
            }
            Op::Floor(_) => false,
        });
        match trusted {
            Some(seen) => self.decide(Some(seen), true, clocks),
            None => self.read(),
        }
    }

    /// Consumes the answer to the last step and gives the next.
    pub fn answer(&mut self, answer: Answer<V>, clocks: &Clocks) -> Step<V> {
        let phase = std::mem::replace(&mut self.phase, Phase::Done);
        match (phase, answer) {
            (Phase::Reading, Answer::Read(seen)) => {
                self.remember(seen.clone(), clocks.now);
                self.decide(seen, false, clocks)
            }
            (Phase::Writing(sending), Answer::Written(version)) => {
                self.landed(sending, version, clocks)
            }
            (Phase::Writing(sending), Answer::Lost) => self.settle(sending),
            (Phase::Writing(sending), Answer::Refused) if sending.lost => self.settle(sending),
            (Phase::Writing(sending), Answer::RefusedShowing(_)) if sending.lost => {
                self.settle(sending)
            }
            (Phase::Writing(sending), Answer::Refused) => {
                self.memory = None;
                if sending.guessed || matches!(self.op, Op::Floor(_)) {
                    self.read()
                } else {
                    self.finish(self.lost_race())
                }
            }
            (Phase::Writing(_), Answer::RefusedShowing(seen)) => {
                self.remember(seen.clone(), clocks.now);
                self.decide(seen, false, clocks)
            }
            (Phase::Settling(sending), Answer::Read(seen)) => {
                self.remember(seen.clone(), clocks.now);
                match seen {
                    // Our very record: applied. (Our nonce on another record
                    // is our write changed since, by a writer that keeps the
                    // nonce, as an older release's floor did: judged as read.)
                    Some(now) if now.record == sending.record => {
                        self.landed(sending, now.version, clocks)
                    }
                    now if sending.on.holds_for(now.as_ref().map(|s| &s.version)) => {
                        if self.unanswered >= MAX_UNANSWERED {
                            self.finish(End::Unknown)
                        } else if sending.on == On::Absent {
                            // Never the same bytes on absence again, but a
                            // new decision (a new nonce, within the call's
                            // writes): where a version is the bytes' own (an
                            // S3 ETag is their MD5), a first copy landing
                            // after the record was made and deleted would
                            // bring its version back, and with it a seed
                            // taken before the deletion.
                            self.decide(None, false, clocks)
                        } else {
                            self.send(sending)
                        }
                    }
                    // Not applied, or applied and overwritten since, which
                    // only a takeover after its deadline (or an operator)
                    // does.
                    now => self.decide(now, false, clocks),
                }
            }
            (Phase::Reading | Phase::Settling(_), Answer::ReadFailed) => {
                self.memory = None;
                let end = if self.lost_an_answer() {
                    End::Unknown
                } else {
                    End::ReadFailed
                };
                self.finish(end)
            }
            (Phase::Waiting { on, record, until }, Answer::Waited) => {
                if clocks.now < until {
                    self.phase = Phase::Waiting { on, record, until };
                    Step::Wait { until }
                } else {
                    self.write(on, record, false, clocks)
                }
            }
            (phase, answer) => panic!("record lease: answer {answer:?} in phase {phase:?}"),
        }
    }

    fn read(&mut self) -> Step<V> {
        self.phase = Phase::Reading;
        Step::Read
    }

    fn finish(&mut self, end: End) -> Step<V> {
        self.phase = Phase::Done;
        Step::Done(end)
    }

    /// A write decided on a read was refused: someone wrote first.
    fn lost_race(&self) -> End {
        match self.op {
            Op::Acquire { .. } => End::Held,
            Op::Renew { .. } | Op::Release { .. } => End::NotHeld,
            Op::Floor(_) => End::Contention {
                attempts: self.writes,
            },
        }
    }

    fn remember(&mut self, seen: Option<Seen<V>>, now: Instant) {
        self.memory = seen.map(|seen| {
            let since = self
                .memory
                .as_ref()
                .filter(|k| k.seen.version == seen.version)
                .map_or(now, |k| k.since);
            Known {
                seen,
                received: now,
                since,
            }
        });
    }

    /// Whether a held record is dead: the same version seen by this
    /// caller for a TTL of its monotonic clock; or, with
    /// [`LeaseExpiry::ServerClocksAgree`], a TTL old by the `Date` of the
    /// answer that carried it.
    fn expired(&self, seen: &Seen<V>, now: Instant) -> bool {
        let ttl = Duration::from_millis(seen.record.ttl_ms);
        let known = self
            .memory
            .as_ref()
            .filter(|k| k.seen.version == seen.version);
        let by_waiter = known.is_some_and(|k| now.duration_since(k.since) >= ttl);
        let by_dates = self.expiry == LeaseExpiry::ServerClocksAgree
            && known.is_some_and(|k| expiry::by_dates(seen, now.duration_since(k.received), ttl));
        by_waiter || by_dates
    }

    /// The judgement: what to write on `seen` (`None`: no record), or how
    /// the call ends.
    fn decide(&mut self, seen: Option<Seen<V>>, guessed: bool, clocks: &Clocks) -> Step<V> {
        let limit = match self.op {
            Op::Floor(_) => FLOOR_WRITES,
            _ => MAX_WRITES,
        };
        if self.writes >= limit {
            let end = match self.op {
                Op::Floor(_) => End::Contention {
                    attempts: self.writes,
                },
                _ => self.lost_race(),
            };
            return self.finish(end);
        }
        let nonce = self.next_nonce();
        match (self.op.clone(), seen) {
            (Op::Acquire { holder, ttl_ms }, seen) => match seen {
                None => self.make_unseeded(clocks),
                Some(s) if s.record.is_unseeded() => self.seed(s, clocks, |token| LeaseRecord {
                    counter: token,
                    holder: Some(holder),
                    ttl_ms,
                    nonce,
                }),
                Some(s) if s.record.holder.is_none() || self.expired(&s, clocks.now) => {
                    let Some(token) = s.record.counter.checked_add(1) else {
                        return self.finish(End::OutOfRange);
                    };
                    let record = LeaseRecord {
                        counter: token,
                        holder: Some(holder),
                        ttl_ms,
                        nonce,
                    };
                    self.write(On::At(s.version), record, guessed, clocks)
                }
                Some(_) => self.finish(End::Held),
            },
            (
                Op::Renew {
                    holder,
                    token,
                    ttl_ms,
                },
                Some(s),
            ) if s.record.is_held_by(&holder, token) => {
                let record = LeaseRecord {
                    ttl_ms,
                    nonce,
                    ..s.record
                };
                self.write(On::At(s.version), record, guessed, clocks)
            }
            (Op::Release { holder, token }, Some(s)) if s.record.is_held_by(&holder, token) => {
                let record = LeaseRecord {
                    holder: None,
                    ttl_ms: 0,
                    nonce,
                    ..s.record
                };
                self.write(On::At(s.version), record, guessed, clocks)
            }
            (Op::Renew { .. } | Op::Release { .. }, _) => self.finish(End::NotHeld),
            (Op::Floor(floor), seen) => match seen {
                Some(s) if !s.record.is_unseeded() && s.record.counter >= floor => {
                    self.finish(End::Floored)
                }
                Some(s) if s.record.holder.is_some() && !self.expired(&s, clocks.now) => {
                    self.finish(End::Busy)
                }
                Some(s) if !s.record.is_unseeded() => {
                    let record = LeaseRecord {
                        counter: floor,
                        holder: None,
                        ttl_ms: 0,
                        nonce,
                    };
                    self.write(On::At(s.version), record, guessed, clocks)
                }
                None => self.make_unseeded(clocks),
                // A floor only raises: a record made (again) starts where a
                // grant would start it, if that is higher.
                Some(s) => self.seed(s, clocks, |first| LeaseRecord {
                    counter: floor.max(first - 1),
                    holder: None,
                    ttl_ms: 0,
                    nonce,
                }),
            },
        }
    }

    /// A record where there is none is made unseeded first, and seeded on
    /// its own version after: a seed taken before a write on absence could
    /// land after a record made and deleted in between, whose tokens it
    /// may not pass.
    fn make_unseeded(&mut self, clocks: &Clocks) -> Step<V> {
        let record = LeaseRecord::unseeded(self.next_nonce());
        self.write(On::Absent, record, false, clocks)
    }

    /// The first grant (or floor) of the unseeded record `seen`: `build`
    /// makes it from its first token, written once the server's clock has
    /// passed that token (see `seed.rs`).
    fn seed(
        &mut self,
        seen: Seen<V>,
        clocks: &Clocks,
        build: impl FnOnce(u64) -> LeaseRecord,
    ) -> Step<V> {
        let received = self
            .memory
            .as_ref()
            .filter(|k| k.seen.version == seen.version)
            .map(|k| k.received);
        let seed = received
            .and_then(|received| Seed::by_record(seen.modified, received))
            .or_else(|| Seed::by_estimate(clocks));
        let Some(seed) = seed else {
            return self.finish(End::NoServerClock);
        };
        let (on, record) = (On::At(seen.version), build(seed.token));
        if clocks.now < seed.ready {
            self.phase = Phase::Waiting {
                on,
                record,
                until: seed.ready,
            };
            Step::Wait { until: seed.ready }
        } else {
            self.write(on, record, false, clocks)
        }
    }

    /// The nonce of the next write this call decides.
    fn next_nonce(&self) -> u128 {
        self.nonce.wrapping_add(u128::from(self.writes))
    }

    fn write(&mut self, on: On<V>, record: LeaseRecord, guessed: bool, clocks: &Clocks) -> Step<V> {
        self.writes += 1;
        self.send(Sending {
            on,
            record,
            sent_at: clocks.now,
            guessed,
            lost: false,
        })
    }

    fn send(&mut self, sending: Sending<V>) -> Step<V> {
        let step = Step::Write {
            on: sending.on.clone(),
            record: sending.record.clone(),
        };
        self.phase = Phase::Writing(sending);
        step
    }

    /// A lost answer: read what the write did.
    fn settle(&mut self, mut sending: Sending<V>) -> Step<V> {
        self.unanswered += 1;
        sending.lost = true;
        self.memory = None;
        self.phase = Phase::Settling(sending);
        Step::Read
    }

    fn landed(&mut self, sending: Sending<V>, version: V, clocks: &Clocks) -> Step<V> {
        let unseeded = sending.record.is_unseeded();
        self.memory = Some(Known {
            seen: Seen {
                version,
                record: sending.record,
                modified: None,
                answered: None,
            },
            received: clocks.now,
            since: clocks.now,
        });
        if unseeded {
            // Made unseeded: seeded from the server's time now, after the
            // answer (so after it was made), or where the port has no
            // estimate, read back for its own `Last-Modified`.
            return match clocks.server_now {
                Some(_) => {
                    let made = self.memory.as_ref().map(|k| k.seen.clone());
                    self.decide(made, false, clocks)
                }
                None => self.read(),
            };
        }
        let end = match self.op {
            Op::Acquire { .. } => End::Granted {
                token: self.memory.as_ref().map_or(0, |k| k.seen.record.counter),
                sent_at: sending.sent_at,
            },
            Op::Renew { .. } => End::Renewed {
                sent_at: sending.sent_at,
            },
            Op::Release { .. } => End::Released,
            Op::Floor(_) => End::Floored,
        };
        self.finish(end)
    }
}

/// Whether a record may be removed ([`TokenIssuer::remove_idle`](crate::TokenIssuer::remove_idle)),
/// judged on `last`, read after this caller has seen its version unchanged
/// for `unchanged` on its monotonic clock:
///
/// - idle only if unchanged for `idle_for` (no grant, renewal or release
///   in that time: each writes a new version) and, if a holder is named,
///   for its TTL too (its lease is dead by the judgement a grant makes);
/// - removable only if its counter is at least `idle_for` below
///   `server_now` (in microseconds, an estimate that may trail the
///   server's clock, which only makes this stricter): the record made
///   again is seeded above the server's time then (see `seed.rs`), so
///   above every token this one gave, even if the clock that seeds it
///   trails the one that judged by less than `idle_for` (another node, a
///   step back). A record idle that long has a counter that far below:
///   every token is at most the server's time when it was granted. A
///   counter a floor put above that is kept ([`Removal::Floored`](crate::Removal::Floored)); so
///   is every record where the port tells no server time. An unseeded
///   record gave no token.
pub fn removal<V>(
    last: &Seen<V>,
    unchanged: Duration,
    idle_for: Duration,
    server_now: Option<SystemTime>,
) -> crate::Removal {
    let ttl = Duration::from_millis(last.record.ttl_ms);
    if unchanged < idle_for || (last.record.holder.is_some() && unchanged < ttl) {
        return crate::Removal::InUse;
    }
    if last.record.is_unseeded() {
        return crate::Removal::Removed;
    }
    let below = server_now
        .and_then(|now| now.checked_sub(idle_for))
        .and_then(|then| then.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |since| since.as_micros());
    if u128::from(last.record.counter) < below {
        crate::Removal::Removed
    } else {
        crate::Removal::Floored
    }
}

#[cfg(test)]
mod tests;
