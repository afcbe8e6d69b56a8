//! The conditional-write engine: the mark rule on a store that only
//! compares versions, written once.
//!
//! An object store has no "write if the stored token is lower" operation,
//! but it has compare-and-swap on a version (an ETag, a generation). Every
//! way onto one — [`BlobStore`](super::blob::BlobStore) over a
//! [`BlobBackend`](super::blob::BlobBackend), `FencedObjectStore` over an
//! `object_store::ObjectStore`, the OpenDAL `FencingLayer` — writes the
//! token into the object's [frame](super::blob::frame) and runs this one
//! loop:
//!
//! 1. read the version and frame, or skip the read when the version is
//!    known (the writer's own last write, or a contended key);
//! 2. refuse a token below the frame's mark (and the caller's own
//!    condition: create-only, a version to match or not to match);
//! 3. write the framed body conditionally on the version read (or on
//!    absence);
//! 4. on a failed precondition, pause about a round trip and start again;
//!    on a lost answer, start again too, and from then on report any end
//!    but a write of ours as [`End::Unknown`], never as "nothing written".
//!
//! [`Engine`] is that loop as a state machine that does no I/O: it is given
//! what the caller knows and an [`Intent`], answers with the next
//! [`Step`] (a read, a conditional write, a pause) and consumes each
//! [`Answer`] until it ends. [`run`] drives it over a [`Port`] (the one
//! read and the one conditional write a way in translates), which is all
//! a new way in writes. The model checker (`fencing-core`'s
//! `tests/model_engine.rs`) explores this same `Engine` against a modelled
//! record.

use std::fmt::Debug;
use std::future::Future;
use std::time::Instant;

mod known;
mod retry;

pub use self::known::KnownVersions;
pub use self::retry::{MAX_ROUND_TRIP_PAUSE, retry_pause, retry_pause_after};
use crate::FencingToken;

/// What a writer remembers of a key after a write (or a read) of it: the
/// version, its mark, and what that says about skipping the next read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Known<V> {
    /// The object's version.
    pub version: V,
    /// The mark in its frame.
    pub mark: FencingToken,
    /// Whether the object holds a value (else a tombstone or a marker,
    /// absent to readers).
    pub live: bool,
    /// Whether the next put writes at this version without reading first:
    /// not while other writers' writes came between ours (a conditional
    /// write that is likely to fail costs a request on top of the read).
    pub trusted: bool,
    /// Whether, the last time this writer read the key and then wrote, the
    /// version it had just read was overtaken before its write landed.
    /// Then the next put of a small value writes at this version without
    /// reading first even if not `trusted`: a read would be overtaken too,
    /// so it costs a request without making the write likelier to win. A
    /// read whose write then wins clears it (writers taking turns, not
    /// racing: there the read pays for itself).
    pub contended: bool,
}

/// An object as a read found it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Found<V> {
    /// Its version, which a conditional write names.
    pub version: V,
    /// The mark in its frame (0 for an unframed object adopted).
    pub mark: FencingToken,
    /// Whether it holds a value (else a tombstone or a marker).
    pub live: bool,
}

/// What a call asks of the object it replaces, beyond the mark rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Intent<V> {
    /// Write a value over any object, or none. `small` values may be sent
    /// without a read on a contended key (see [`CONTENDED_WRITE_MAX`]).
    Put {
        /// At most [`CONTENDED_WRITE_MAX`] bytes.
        small: bool,
    },
    /// Write a value only where none is live (absent, or a tombstone).
    Create,
    /// Write a value only on the live object at this version: the
    /// caller's own compare-and-swap.
    Update(V),
    /// Write a value over anything but a live object at this version.
    NoneMatch(V),
    /// Leave a tombstone at the token (the mark stays with the key), unless
    /// one at this token is there already.
    Delete,
    /// Leave a tombstone only on the live object at this version.
    DeleteMatch(V),
    /// Raise the mark to the token, keeping the value (or a marker where
    /// there is none); nothing is written at the token already.
    Fence,
}

/// How many writes of one call may go unanswered before it ends
/// [`End::Unknown`] (fewer than its attempts allow).
pub const MAX_UNANSWERED: u32 = 3;

/// The largest value a put under contention sends without reading first: a
/// lost conditional write uploads the whole body for nothing, which above
/// this costs more than the header read it saves.
pub const CONTENDED_WRITE_MAX: usize = 64 * 1024;

impl<V> Intent<V> {
    /// Whether the body written is the caller's value.
    fn writes_value(&self) -> bool {
        matches!(
            self,
            Self::Put { .. } | Self::Create | Self::Update(_) | Self::NoneMatch(_)
        )
    }
}

/// What the frame of a conditional write says: the token it carries, and
/// whether a value follows (else a tombstone or a marker).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The mark the write leaves.
    pub token: FencingToken,
    /// Whether the object holds a value after it.
    pub live: bool,
}

/// What the body of a conditional write holds after its frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Payload {
    /// The caller's value.
    Value,
    /// Nothing: a tombstone or a marker.
    Empty,
    /// The value of the object last read (a fence keeps it).
    AsRead,
}

/// The next thing to do.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step<V> {
    /// Read the object's version and frame (its whole body if `body`), and
    /// answer [`Answer::Read`].
    Read {
        /// Whether the value is needed too (a fence rewrites it).
        body: bool,
    },
    /// Write `frame` and `payload` if the object is at `on` (absent, for
    /// `None`), and answer [`Answer::Written`], [`Answer::Lost`] or
    /// [`Answer::Unknown`].
    Write {
        /// The version the write is conditioned on; `None`: absence.
        on: Option<V>,
        /// The frame to write.
        frame: Frame,
        /// What follows it.
        payload: Payload,
    },
    /// Pause before reading again, and answer [`Answer::Paused`]: about
    /// the lost write's round trip (`after_race`), else a short jitter.
    Pause {
        /// How many writes this call has lost so far.
        attempt: u32,
        /// Whether the write before was refused (its round trip says when
        /// the racing writes land) rather than unanswered.
        after_race: bool,
    },
    /// The call is over.
    Done(End<V>),
}

/// What the store said.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Answer<V> {
    /// The read found this object (`None`: absent).
    Read(Option<Found<V>>),
    /// The write was applied; the object's new version, if the store says.
    Written(Option<V>),
    /// The precondition failed: nothing was written.
    Lost,
    /// No answer says whether the write was applied (a timeout, a dropped
    /// connection after sending, a failed precondition after an SDK's own
    /// retry).
    Unknown,
    /// The pause is over.
    Paused,
}

/// How a call ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum End<V> {
    /// Our write was applied (once); the new version, if the store said.
    Written(Option<V>),
    /// Nothing needed writing: the object already is what was asked.
    Unchanged,
    /// The token is below the object's mark: nothing written.
    Stale {
        /// The object's mark.
        current: FencingToken,
    },
    /// [`Intent::Create`] found a live object: nothing written.
    Exists {
        /// Its mark (above the token: the caller is stale too).
        mark: FencingToken,
    },
    /// The caller's version condition does not hold: nothing written.
    NotMatched,
    /// Every attempt lost its race: nothing written.
    Contention {
        /// How many conditional writes were tried.
        attempts: u32,
    },
    /// A write of this call may have been applied, and nothing after it
    /// settled the question.
    Unknown,
}

/// The loop's state between steps.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum State<V> {
    Start,
    Reading,
    Writing {
        current: Option<Found<V>>,
        frame: Frame,
        /// The version was the remembered one, not read in this call.
        from_cache: bool,
        /// Written on absence without a read ([`Intent::Create`] first).
        presumed: bool,
    },
    Pausing,
    Ended(End<V>),
}

/// The mark rule on one key, for one call: see the [module](self).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Engine<V> {
    token: FencingToken,
    intent: Intent<V>,
    max_attempts: u32,
    /// What was remembered of the key when the call started.
    previous: Option<Known<V>>,
    /// Conditional writes sent and lost (refused or unanswered).
    attempts: u32,
    /// Of those, unanswered.
    unanswered: u32,
    /// Whether [`Intent::Create`] on a key nothing is remembered of is
    /// written without a read first.
    presume_absent: bool,
    /// Set once a write may have been applied without our seeing the
    /// answer: from then on, any end but our write is [`End::Unknown`].
    unknown: bool,
    contended: bool,
    state: State<V>,
    /// What to remember of the key now, if it changed.
    memo: Option<Option<Known<V>>>,
}

impl<V: Clone + PartialEq + Debug> Engine<V> {
    /// A call writing with `token` under `intent`, given what was
    /// remembered of the key, trying at most `max_attempts` conditional
    /// writes.
    pub fn new(
        token: FencingToken,
        intent: Intent<V>,
        previous: Option<Known<V>>,
        max_attempts: u32,
    ) -> Self {
        let contended = previous.as_ref().is_some_and(|k| k.contended);
        Self {
            token,
            intent,
            max_attempts: max_attempts.max(1),
            previous,
            attempts: 0,
            unanswered: 0,
            presume_absent: true,
            unknown: false,
            contended,
            state: State::Start,
            memo: None,
        }
    }

    /// Reads before a create, even on a key nothing is remembered of. For a
    /// port that takes a refused write whose object holds the very bytes it
    /// wrote as its own (an earlier try of it, landed below the port): a
    /// create written blind would read an object created earlier with the
    /// same bytes as written now.
    #[must_use]
    pub fn read_before_create(mut self) -> Self {
        self.presume_absent = false;
        self
    }

    /// The first step.
    ///
    /// # Panics
    /// If called twice.
    pub fn start(&mut self) -> Step<V> {
        assert!(self.state == State::Start, "started twice");
        let previous = self.previous.clone();
        match &self.intent {
            Intent::Fence | Intent::NoneMatch(_) => self.read(),
            // The caller's version is the one we remember: its mark is
            // known, and a write on it either lands or is refused.
            Intent::Update(expected) | Intent::DeleteMatch(expected) => {
                match previous.filter(|k| k.version == *expected) {
                    Some(known) => self.decide(Some(found(&known)), true, false),
                    None => self.read(),
                }
            }
            // Absent is the common case, and the store refuses the write
            // if not; a key we know of is read.
            Intent::Create if previous.is_none() && self.presume_absent => {
                self.decide(None, false, true)
            }
            Intent::Create => self.read(),
            // Writing at a remembered version is safe whatever has happened
            // since: if the object is still at it, its mark is the one
            // remembered, which the token is not below; if not, the
            // precondition fails and nothing is written.
            Intent::Put { small } => {
                let small = *small;
                self.skip_read_if_known(previous, small)
            }
            // A tombstone remembered is read (and settled as deleted)
            // rather than written again.
            Intent::Delete => self.skip_read_if_known(previous.filter(|k| k.live), true),
        }
    }

    /// The step after `answer`.
    ///
    /// # Panics
    /// On an answer to a step that was not asked (a write's answer to a
    /// read), or after the end.
    pub fn answer(&mut self, answer: Answer<V>) -> Step<V> {
        match (std::mem::replace(&mut self.state, State::Start), answer) {
            (State::Reading, Answer::Read(current)) => self.decide(current, false, false),
            (State::Pausing, Answer::Paused) => self.read(),
            (
                State::Writing {
                    current,
                    frame,
                    from_cache,
                    ..
                },
                Answer::Written(version),
            ) => {
                let read_now = current.as_ref().map(|c| &c.version);
                let trusted = from_cache
                    || match (&self.previous, read_now) {
                        (None, _) => true,
                        (Some(p), Some(v)) => p.version == *v,
                        (Some(_), None) => false,
                    };
                self.contended &= from_cache;
                self.memo = Some(version.clone().map(|version| Known {
                    version,
                    mark: frame.token,
                    live: frame.live,
                    trusted,
                    contended: self.contended,
                }));
                self.end_written(End::Written(version))
            }
            (
                State::Writing {
                    from_cache,
                    presumed,
                    ..
                },
                Answer::Lost,
            ) => {
                self.memo = Some(None);
                if matches!(self.intent, Intent::Update(_) | Intent::DeleteMatch(_)) {
                    // The caller's compare-and-swap lost: theirs to retry.
                    return self.end(End::NotMatched);
                }
                if presumed {
                    // Not a race: the object was there.
                    return self.read();
                }
                self.contended |= !from_cache;
                self.lost(true)
            }
            (State::Writing { .. }, Answer::Unknown) => {
                self.memo = Some(None);
                self.unknown = true;
                self.unanswered += 1;
                if self.unanswered >= MAX_UNANSWERED {
                    // A store that answers no write is not raced: reading
                    // and writing on would only add load to it.
                    self.attempts += 1;
                    return self.end(End::Unknown);
                }
                self.lost(false)
            }
            (state, answer) => panic!("the answer {answer:?} does not follow {state:?}"),
        }
    }

    /// The end after a failed read or write (an error of the store's, not
    /// an answer): [`End::Unknown`] if a write of this call may have been
    /// applied, else `None` (the caller reports its error: nothing was
    /// written).
    pub fn failed(&mut self) -> Option<End<V>> {
        // What was remembered stays: a refusal (a 503, a throttle) says
        // nothing of the object's version.
        let end = self.unknown.then_some(End::Unknown);
        self.state = State::Ended(end.clone().unwrap_or(End::Unchanged));
        end
    }

    /// What to remember of the key since the last call, if it changed:
    /// `Some(None)` to forget it.
    pub fn take_memo(&mut self) -> Option<Option<Known<V>>> {
        self.memo.take()
    }

    /// The fast path of a put or delete: straight to the conditional write
    /// on the remembered version when it is ours (trusted), or contended
    /// and the value small.
    fn skip_read_if_known(&mut self, previous: Option<Known<V>>, small: bool) -> Step<V> {
        let token = self.token;
        match previous.filter(|k| token >= k.mark && (k.trusted || (k.contended && small))) {
            Some(known) => self.decide(Some(found(&known)), true, false),
            None => self.read(),
        }
    }

    fn read(&mut self) -> Step<V> {
        self.state = State::Reading;
        Step::Read {
            body: self.intent == Intent::Fence,
        }
    }

    /// The mark rule and the caller's condition on the object found; the
    /// write, or the end.
    fn decide(&mut self, current: Option<Found<V>>, from_cache: bool, presumed: bool) -> Step<V> {
        let token = self.token;
        if let Some(c) = &current {
            if self.intent == Intent::Create && c.live {
                return self.end(End::Exists { mark: c.mark });
            }
            if let Intent::Update(v) | Intent::DeleteMatch(v) = &self.intent
                && !(c.live && c.version == *v)
            {
                return self.end(End::NotMatched);
            }
            if token < c.mark {
                // The version read and its mark, for the next put under
                // contention.
                self.memo = Some(Some(Known {
                    version: c.version.clone(),
                    mark: c.mark,
                    live: c.live,
                    trusted: false,
                    contended: self.contended,
                }));
                return self.end(End::Stale { current: c.mark });
            }
            match &self.intent {
                Intent::NoneMatch(v) if c.live && c.version == *v => {
                    return self.end(End::NotMatched);
                }
                // Only what was read settles "nothing to do": a remembered
                // tombstone may have been overwritten since.
                Intent::Delete if !from_cache && !c.live && c.mark == token => {
                    return self.end_written(End::Unchanged);
                }
                Intent::Fence if c.mark == token => return self.end_written(End::Unchanged),
                _ => {}
            }
        } else if matches!(self.intent, Intent::Update(_) | Intent::DeleteMatch(_)) {
            return self.end(End::NotMatched);
        }
        let (live, payload) = match &self.intent {
            intent if intent.writes_value() => (true, Payload::Value),
            Intent::Fence => match &current {
                Some(c) => (c.live, Payload::AsRead),
                None => (false, Payload::Empty),
            },
            _ => (false, Payload::Empty),
        };
        let frame = Frame { token, live };
        let on = current.as_ref().map(|c| c.version.clone());
        self.state = State::Writing {
            current,
            frame,
            from_cache,
            presumed,
        };
        Step::Write { on, frame, payload }
    }

    /// After a write lost (refused, or unanswered): try again after a
    /// pause, or end.
    fn lost(&mut self, after_race: bool) -> Step<V> {
        self.attempts += 1;
        if self.attempts >= self.max_attempts {
            return self.end(End::Contention {
                attempts: self.attempts,
            });
        }
        self.state = State::Pausing;
        Step::Pause {
            attempt: self.attempts,
            after_race,
        }
    }

    /// An end that writes nothing now: [`End::Unknown`] if an earlier
    /// write may have been applied (ours may have landed and then been
    /// overwritten: never "nothing written").
    fn end(&mut self, end: End<V>) -> Step<V> {
        let end = if self.unknown { End::Unknown } else { end };
        self.state = State::Ended(end.clone());
        Step::Done(end)
    }

    /// An end where the object is as asked (ours, or already so).
    fn end_written(&mut self, end: End<V>) -> Step<V> {
        self.state = State::Ended(end.clone());
        Step::Done(end)
    }
}

fn found<V: Clone>(known: &Known<V>) -> Found<V> {
    Found {
        version: known.version.clone(),
        mark: known.mark,
        live: known.live,
    }
}

/// What a [`Port`]'s conditional write came to.
#[derive(Debug)]
pub enum Wrote<V, E> {
    /// Applied; the new version, if the store said.
    Written(Option<V>),
    /// The precondition failed: nothing was written.
    Lost,
    /// It may have been applied: the error that left it unknown.
    Unknown(E),
}

/// The two requests a way onto a store translates: a read of the frame
/// and a conditional write of a framed body. Errors are the way's own.
pub trait Port: Send {
    /// The store's version of an object.
    type Version: Clone + PartialEq + Debug + Send + Sync + 'static;
    /// The way's error.
    type Error: Send;

    /// A short name of the store, for metrics and traces.
    fn name(&self) -> &'static str;

    /// The object's version and frame (and its value, if `body`, kept for
    /// a following [`Payload::AsRead`]); `None` if absent.
    fn read(
        &mut self,
        body: bool,
    ) -> impl Future<Output = Result<Option<Found<Self::Version>>, Self::Error>> + Send;

    /// `frame` and `payload` written if the object is at `on` (absent, for
    /// `None`), in one request that nothing below retries blindly.
    fn write(
        &mut self,
        on: Option<Self::Version>,
        frame: Frame,
        payload: Payload,
    ) -> impl Future<Output = Result<Wrote<Self::Version, Self::Error>, Self::Error>> + Send;
}

/// How a call driven by [`run`] ended, with the way's errors.
#[derive(Debug)]
pub enum Outcome<V, E> {
    /// The engine's end ([`End::Unknown`] never: see `Unknown`).
    Ended(End<V>),
    /// A write may have been applied: the error of the first write left
    /// unanswered, and the error that ended the call, if one did.
    Unknown {
        /// Why the first write's outcome is unknown.
        first: E,
        /// The failure that ended the call, if not the engine's own end.
        then: Option<E>,
    },
    /// A read or write failed before anything could have been applied.
    Failed(E),
}

/// Runs `engine` to its end over `port`, remembering what it learns of
/// `key` in `known`, pausing between races, and counting each write lost
/// or unanswered
/// ([`names::CAS_RETRIES`](crate::instrument::names::CAS_RETRIES)).
pub async fn run<P: Port>(
    port: &mut P,
    known: &KnownVersions<Known<P::Version>>,
    key: &str,
    mut engine: Engine<P::Version>,
) -> Outcome<P::Version, P::Error> {
    let mut first_unknown: Option<P::Error> = None;
    let mut step = engine.start();
    let mut sent = Instant::now();
    loop {
        if let Some(memo) = engine.take_memo() {
            known.remember(key, memo);
        }
        let answer = match step {
            Step::Done(end) => {
                return match (end, first_unknown) {
                    (End::Unknown, Some(first)) => Outcome::Unknown { first, then: None },
                    (end, _) => Outcome::Ended(end),
                };
            }
            Step::Read { body } => match port.read(body).await {
                Ok(found) => Answer::Read(found),
                Err(e) => return failed(&mut engine, known, key, first_unknown, e),
            },
            Step::Write { on, frame, payload } => {
                sent = Instant::now();
                match port.write(on, frame, payload).await {
                    Ok(Wrote::Written(version)) => Answer::Written(version),
                    Ok(Wrote::Lost) => {
                        lost(port.name(), key, true);
                        Answer::Lost
                    }
                    Ok(Wrote::Unknown(e)) => {
                        lost(port.name(), key, false);
                        first_unknown.get_or_insert(e);
                        Answer::Unknown
                    }
                    Err(e) => return failed(&mut engine, known, key, first_unknown, e),
                }
            }
            Step::Pause {
                attempt,
                after_race,
            } => {
                let pause = if after_race {
                    retry_pause_after(attempt, sent.elapsed())
                } else {
                    retry_pause(attempt)
                };
                tokio::time::sleep(pause).await;
                Answer::Paused
            }
        };
        step = engine.answer(answer);
    }
}

fn failed<V: Clone + PartialEq + Debug, E>(
    engine: &mut Engine<V>,
    known: &KnownVersions<Known<V>>,
    key: &str,
    first_unknown: Option<E>,
    error: E,
) -> Outcome<V, E> {
    let end = engine.failed();
    if let Some(memo) = engine.take_memo() {
        known.remember(key, memo);
    }
    match (end, first_unknown) {
        (Some(_), Some(first)) => Outcome::Unknown {
            first,
            then: Some(error),
        },
        _ => Outcome::Failed(error),
    }
}

/// Counts a conditional write that lost (`refused`) or went unanswered.
fn lost(store: &'static str, key: &str, refused: bool) {
    use crate::instrument::names;
    let cause = if refused {
        tracing::debug!(key, store, "lost a race");
        "precondition_failed"
    } else {
        tracing::warn!(key, store, "a conditional write may have been applied");
        "outcome_unknown"
    };
    metrics::counter!(names::CAS_RETRIES, names::STORE => store, names::CAUSE => cause)
        .increment(1);
}

#[cfg(test)]
mod tests;
