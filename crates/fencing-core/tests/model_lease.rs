//! The record lease, model-checked: the core's own [`RecordLease`] (not a
//! second description of it) run by three clients against a modelled
//! record, in every interleaving, with time passing between any two steps
//! (a client paused past its TTL), answers lost, writes delayed past their
//! answer, reads failing, and the record deleted by hand.
//!
//! The record is what the bucket and DynamoDB ports offer: a version that
//! changes on every write, and a write applied only if the record is at
//! the version named (or absent). Time is whole seconds of one clock that
//! every client's monotonic clock runs at; the server's clock is that time
//! plus an epoch, and each client's estimate of it trails by its own
//! amount, less than the lag the port declares (a `Date` truncated to the
//! second). At each state the checker checks:
//!
//! - **one holder at a time**: no two clients hold a lease whose deadline
//!   (its own clock, from before the write that granted or renewed it) has
//!   not passed;
//! - **tokens strictly increase**: every grant a client is told of is
//!   above every grant told before, across a record deleted and made
//!   again, and above every floor reported raised (floors are not run with
//!   deletions: a floor above the server's clock goes with a deleted
//!   record, as the contract says);
//! - **"granted" is true**: a client told it holds (or renewed) had that
//!   write applied;
//! - **"not granted" is true**: no record names a holder through a write
//!   whose call ended saying it did not grant.
//!
//! Each known-bad variant (a parameter of the model, never of the
//! machine) must yield a counterexample, printed as a trace: seeding a new
//! record from a trailing estimate without the lag (how the DynamoDB issuer
//! seeded before the record lease), and judging expiry by a `Date` that a
//! front end sent ahead.

use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime};

use fencing_core::adapter::record::{
    Answer, Clocks, End, Known, LeaseExpiry, LeaseRecord, On, Op, RecordLease, Seen, Step,
};
use stateright::{Checker, HasDiscoveries, Model, Property};

/// Every client's monotonic clock at model time 0.
static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);
/// The server's clock at model time 0.
const SERVER_EPOCH: Duration = Duration::from_secs(1_800_000_000);
const TTL_SECS: u8 = 1;
/// The most a client's estimate of the server's clock trails it.
const LAG: Duration = Duration::from_secs(1);

/// What the model gets wrong on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    None,
    /// The port's estimate of the server's clock reads zero: every record
    /// made starts at the lag (a deleted record restarting near 1).
    ClockAtZero,
    /// A floor's read misses the counter (reads it as 1, free): the floor
    /// is written over a higher counter, lowering it.
    FloorLowers,
    /// A write whose answer was lost is answered as refused.
    LostAsRefused,
    /// A new record is seeded from the estimate alone (no lag, no wait).
    SeedWithoutLag,
    /// Expiry by dates, and one front end's `Date` runs this far ahead.
    DateAhead,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Call {
    Acquire,
    /// Renew the lease held, if one is.
    Renew,
    /// Release the lease held, if one is.
    Release,
    /// Raise the floor this far above the server's epoch, in seconds.
    Floor(u64),
}

/// A record's version is its content's (the write's nonce): two copies of
/// one write make the same version, as S3's ETag (the MD5 of the bytes)
/// and the DynamoDB port's `rvn` do. GCS generations and Azure ETags are
/// new on every write, which only makes versions rarer to meet again.
type Version = u128;

/// Model time is in microseconds: a wait ends at its instant exactly.
fn at(micros: u64) -> Instant {
    *BASE + Duration::from_micros(micros)
}

fn server_at(micros: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + SERVER_EPOCH + Duration::from_micros(micros)
}

fn micros_since_base(instant: Instant) -> u64 {
    u64::try_from(instant.duration_since(*BASE).as_micros()).unwrap()
}

const SECOND: u64 = 1_000_000;

fn micros(time: SystemTime) -> u64 {
    let since = time.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    u64::try_from(since.as_micros()).unwrap()
}

struct LeaseModel {
    scripts: Vec<Vec<Call>>,
    /// How far each client's estimate of the server's clock trails it;
    /// `None`: it has none (the `object_store` port, which seeds a record
    /// from its own `Last-Modified`).
    trails: Vec<Option<Duration>>,
    expiry: LeaseExpiry,
    /// The last second time may reach.
    horizon: u64,
    faults: u8,
    /// Whether an operator may delete the record (once).
    deletion: bool,
    bug: Bug,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Stored {
    version: Version,
    record: LeaseRecord,
    modified: SystemTime,
}

/// A lease a client was told it holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Held {
    token: u64,
    deadline: Instant,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Client {
    machine: Option<RecordLease<Version>>,
    step: Option<Step<Version>>,
    calls: usize,
    memory: Option<Known<Version>>,
    held: Option<Held>,
    /// The writes applied by the record, with the call that sent each (a
    /// delayed one can land during a later call).
    applied: Vec<(usize, LeaseRecord)>,
    /// A write of this call had its answer lost.
    lost: bool,
}

/// A write whose answer was given up on: it may land any time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct InFlight {
    client: usize,
    call: usize,
    on: On<Version>,
    record: LeaseRecord,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    now: u64,
    record: Option<Stored>,
    clients: Vec<Client>,
    in_flight: Vec<InFlight>,
    faults: u8,
    deleted: bool,
    /// The highest grant told, and the highest floor reported raised.
    top_grant: u64,
    top_floor: u64,
    /// A grant told at or below one of them.
    backwards: bool,
    /// A client told "granted" (or "renewed") of a write not applied.
    false_grant: bool,
    /// The writes applied by calls that ended saying they did not grant,
    /// renew or release: none may be the lease the record names.
    denied: Vec<u128>,
    /// An operator deleted the record while it named a holder: the lock
    /// no longer excludes (a new record grants at once), only the tokens
    /// still order the holders.
    deleted_held: bool,
    /// Writes applied with no answer (lost, or landed late).
    silent: Vec<u128>,
    /// A grant from a record made again after a deletion.
    remade_granted: bool,
    /// A lost answer settled as granted, and a takeover: coverage.
    settled_grant: bool,
    took_over: bool,
    remade: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Action {
    /// Client `c` starts its next call.
    Start(usize),
    /// Client `c`'s read or write reaches the record and is answered.
    Deliver(usize),
    /// Client `c`'s write is applied, but the answer is lost.
    LoseAnswer(usize),
    /// Client `c`'s write is delayed: no answer, and it lands later (or
    /// never).
    Delay(usize),
    /// Client `c`'s read fails.
    FailRead(usize),
    /// Client `c`'s wait for the server's clock is over (time runs on to
    /// its end, if it has not reached it).
    Wake(usize),
    /// The delayed write `i` lands.
    Land(usize),
    /// Time runs on to the next whole second.
    Tick,
    /// An operator deletes the record.
    Delete,
}

impl State {
    fn apply(
        &mut self,
        client: usize,
        call: usize,
        on: &On<Version>,
        record: &LeaseRecord,
    ) -> Option<Version> {
        if !on.holds_for(self.record.as_ref().map(|r| &r.version)) {
            return None;
        }
        self.record = Some(Stored {
            version: record.nonce,
            record: record.clone(),
            modified: server_at(self.now),
        });
        self.clients[client].applied.push((call, record.clone()));
        Some(record.nonce)
    }
}

impl LeaseModel {
    fn clocks(&self, s: &State, c: usize) -> Clocks {
        let estimate = self.trails[c].map(|trail| server_at(s.now) - trail);
        let (server_now, server_lag) = match self.bug {
            Bug::SeedWithoutLag => (estimate, Duration::ZERO),
            Bug::ClockAtZero => (Some(SystemTime::UNIX_EPOCH), LAG),
            _ => (estimate, LAG),
        };
        Clocks {
            now: at(s.now),
            server_now,
            server_lag,
        }
    }

    fn seen(&self, s: &State) -> Option<Seen<Version>> {
        let ahead = match self.bug {
            Bug::DateAhead => Duration::from_secs(5),
            _ => Duration::ZERO,
        };
        s.record.as_ref().map(|r| Seen {
            version: r.version,
            record: r.record.clone(),
            modified: Some(r.modified),
            answered: Some(server_at(s.now) + ahead),
        })
    }

    /// The record as client `c`'s read finds it.
    fn read_by(&self, s: &State, c: usize) -> Option<Seen<Version>> {
        let floor_call = matches!(
            self.scripts[c].get(s.clients[c].calls - 1),
            Some(Call::Floor(_))
        );
        let mut seen = self.seen(s);
        if let (Bug::FloorLowers, true, Some(seen)) = (self.bug, floor_call, seen.as_mut()) {
            seen.record.counter = 1;
            seen.record.holder = None;
        }
        seen
    }

    fn answer(&self, s: &mut State, c: usize, answer: Answer<Version>) {
        let clocks = self.clocks(s, c);
        let machine = s.clients[c].machine.as_mut().expect("a call runs");
        let step = machine.answer(answer, &clocks);
        self.after(s, c, step);
    }

    fn after(&self, s: &mut State, c: usize, step: Step<Version>) {
        let machine = s.clients[c].machine.as_ref().expect("a call runs");
        s.clients[c].memory = machine.memory().cloned();
        let Step::Done(end) = step else {
            s.clients[c].step = Some(step);
            return;
        };
        let client = &mut s.clients[c];
        client.machine = None;
        client.step = None;
        let ttl = Duration::from_secs(TTL_SECS.into());
        match end {
            End::Granted { token, sent_at } => {
                let holder = holder_of(c);
                let call = s.clients[c].calls;
                let granted = s.clients[c].applied.iter().find(|(n, r)| {
                    *n == call && r.counter == token && r.holder.as_ref() == Some(&holder)
                });
                s.false_grant |= granted.is_none();
                // Settled by reading its own nonce back.
                s.settled_grant |= granted.is_some_and(|(_, r)| s.silent.contains(&r.nonce));
                s.remade_granted |= s.remade;
                s.backwards |= token <= s.top_grant || token <= s.top_floor;
                s.top_grant = s.top_grant.max(token);
                s.clients[c].held = Some(Held {
                    token,
                    deadline: sent_at + ttl,
                });
            }
            End::Renewed { sent_at } => {
                let call = s.clients[c].calls;
                s.false_grant |= !s.clients[c].applied.iter().any(|(n, _)| *n == call);
                let held = s.clients[c].held.as_mut().expect("renewed a lease held");
                held.deadline = sent_at + ttl;
            }
            End::Floored => {
                if let Some(Call::Floor(secs)) = self.scripts[c].get(s.clients[c].calls - 1) {
                    s.top_floor = s.top_floor.max(floor_token(*secs));
                }
            }
            End::NotHeld => s.clients[c].held = None,
            _ => {}
        }
        if matches!(
            end,
            End::Held | End::NotHeld | End::Busy | End::Contention { .. } | End::ReadFailed
        ) {
            // Applied, or still on its way: none may make it the holder.
            let call = s.clients[c].calls;
            let applied = s.clients[c].applied.iter().filter(|(n, _)| *n == call);
            let mut nonces: Vec<u128> = applied.map(|(_, r)| r.nonce).collect();
            let flying = s
                .in_flight
                .iter()
                .filter(|f| f.client == c && f.call == call);
            nonces.extend(flying.map(|f| f.record.nonce));
            s.denied.extend(nonces);
        }
    }

    fn holders(&self, s: &State) -> usize {
        s.clients
            .iter()
            .filter(|c| c.held.as_ref().is_some_and(|h| at(s.now) < h.deadline))
            .count()
    }
}

fn floor_token(secs: u64) -> u64 {
    micros(SystemTime::UNIX_EPOCH + SERVER_EPOCH + Duration::from_secs(secs))
}

fn holder_of(c: usize) -> String {
    format!("client-{c}")
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let client = Client {
            machine: None,
            step: None,
            calls: 0,
            memory: None,
            held: None,
            applied: Vec::new(),
            lost: false,
        };
        vec![State {
            now: 0,
            record: None,
            clients: vec![client; self.scripts.len()],
            in_flight: Vec::new(),
            faults: self.faults,
            deleted: false,
            deleted_held: false,
            top_grant: 0,
            top_floor: 0,
            backwards: false,
            false_grant: false,
            denied: Vec::new(),
            settled_grant: false,
            silent: Vec::new(),
            remade_granted: false,
            took_over: false,
            remade: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (c, client) in s.clients.iter().enumerate() {
            match &client.step {
                None if client.calls < self.scripts[c].len() => actions.push(Action::Start(c)),
                None => {}
                Some(Step::Read) => {
                    actions.push(Action::Deliver(c));
                    if s.faults > 0 {
                        actions.push(Action::FailRead(c));
                    }
                }
                Some(Step::Write { .. }) => {
                    actions.push(Action::Deliver(c));
                    if s.faults > 0 {
                        actions.push(Action::LoseAnswer(c));
                        actions.push(Action::Delay(c));
                    }
                }
                Some(Step::Wait { until })
                    if micros_since_base(*until) <= self.horizon * SECOND =>
                {
                    actions.push(Action::Wake(c));
                }
                Some(Step::Wait { .. }) => {}
                Some(Step::Done(_)) => unreachable!("an end is taken at once"),
            }
        }
        for i in 0..s.in_flight.len() {
            actions.push(Action::Land(i));
        }
        if s.now < self.horizon * SECOND {
            actions.push(Action::Tick);
        }
        if self.deletion && !s.deleted && s.record.is_some() {
            actions.push(Action::Delete);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Start(c) => {
                let call = self.scripts[c][s.clients[c].calls];
                let client = &mut s.clients[c];
                client.calls += 1;
                client.lost = false;
                let holder = holder_of(c);
                let ttl_ms = u64::from(TTL_SECS) * 1000;
                let op = match (call, &client.held) {
                    (Call::Acquire, _) => Op::Acquire { holder, ttl_ms },
                    (Call::Floor(secs), _) => Op::Floor(floor_token(secs)),
                    // A lease past its deadline is not renewed (the
                    // issuer refuses before sending), nor one not held.
                    (Call::Renew, Some(held)) if at(s.now) < held.deadline => Op::Renew {
                        holder,
                        token: held.token,
                        ttl_ms,
                    },
                    // The holder stops writing when it calls release.
                    (Call::Release, Some(held)) => {
                        let token = held.token;
                        client.held = None;
                        Op::Release { holder, token }
                    }
                    (Call::Renew | Call::Release, _) => {
                        client.held = None;
                        return Some(s);
                    }
                };
                let nonce = ((c as u128 + 1) << 64) | ((client.calls as u128) << 32);
                let mut machine = RecordLease::new(op, self.expiry, client.memory.clone(), nonce);
                let step = machine.start(&self.clocks(&s, c));
                s.clients[c].machine = Some(machine);
                self.after(&mut s, c, step);
                // A call's first read goes out with it: starting has no
                // effect anyone else sees, so no interleaving is lost.
                if s.clients[c].step == Some(Step::Read) {
                    let seen = self.read_by(&s, c);
                    self.answer(&mut s, c, Answer::Read(seen));
                }
            }
            Action::Deliver(c) => match s.clients[c].step.clone() {
                Some(Step::Read) => {
                    let seen = self.read_by(&s, c);
                    self.answer(&mut s, c, Answer::Read(seen));
                }
                Some(Step::Write { on, record }) => {
                    let call = s.clients[c].calls;
                    let answer = match s.apply(c, call, &on, &record) {
                        Some(version) => {
                            let takeover = on != On::Absent
                                && record.holder.is_some()
                                && last.record.as_ref().is_some_and(|r| {
                                    r.record.holder.is_some() && r.record.holder != record.holder
                                });
                            s.took_over |= takeover;
                            Answer::Written(version)
                        }
                        // Both ports' refusals are exercised: the bucket's
                        // says nothing, DynamoDB's hands back the record.
                        None if c % 2 == 0 => Answer::Refused,
                        None => Answer::RefusedShowing(self.seen(&s)),
                    };
                    self.answer(&mut s, c, answer);
                }
                _ => return None,
            },
            Action::LoseAnswer(c) | Action::Delay(c) => {
                let Some(Step::Write { on, record }) = s.clients[c].step.clone() else {
                    return None;
                };
                s.faults -= 1;
                s.clients[c].lost = true;
                let call = s.clients[c].calls;
                if action == Action::LoseAnswer(c) {
                    s.apply(c, call, &on, &record);
                    s.silent.push(record.nonce);
                } else {
                    s.in_flight.push(InFlight {
                        client: c,
                        call,
                        on,
                        record,
                    });
                }
                let answer = match self.bug {
                    Bug::LostAsRefused => Answer::Refused,
                    _ => Answer::Lost,
                };
                self.answer(&mut s, c, answer);
            }
            Action::FailRead(c) => {
                s.faults -= 1;
                self.answer(&mut s, c, Answer::ReadFailed);
            }
            Action::Wake(c) => {
                if let Some(Step::Wait { until }) = s.clients[c].step {
                    s.now = s.now.max(micros_since_base(until));
                }
                self.answer(&mut s, c, Answer::Waited);
            }
            Action::Land(i) => {
                let flight = s.in_flight.remove(i);
                s.apply(flight.client, flight.call, &flight.on, &flight.record);
                s.silent.push(flight.record.nonce);
            }
            Action::Tick => s.now = (s.now / SECOND + 1) * SECOND,
            Action::Delete => {
                s.deleted_held = s.record.as_ref().is_some_and(|r| r.record.holder.is_some());
                s.record = None;
                s.deleted = true;
            }
        }
        if s.deleted && last.record.is_none() && s.record.is_some() {
            s.remade = true;
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("one holder at a time", |m: &LeaseModel, s: &State| {
                s.deleted_held || m.holders(s) <= 1
            }),
            Property::always("tokens strictly increase", |_, s: &State| !s.backwards),
            Property::always("\"granted\" is true", |_, s: &State| !s.false_grant),
            Property::always("\"not granted\" is true", |_, s: &State| {
                s.record.as_ref().is_none_or(|r| {
                    r.record.holder.is_none() || !s.denied.contains(&r.record.nonce)
                })
            }),
            // Coverage: the runs reach the cases the properties are about.
            Property::sometimes("a dead holder is taken over", |_, s: &State| s.took_over),
            Property::sometimes("a lost answer is settled as granted", |_, s: &State| {
                s.settled_grant
            }),
            Property::sometimes("a record deleted by hand is made again", |_, s: &State| {
                s.remade_granted
            }),
        ]
    }
}

/// A scenario: each client's calls, and what the run may do to them.
struct Scenario {
    name: &'static str,
    scripts: Vec<Vec<Call>>,
    faults: u8,
    deletion: bool,
    horizon: u64,
}

/// A holder that renews, paused past its TTL or not, among two
/// contenders; the same with one contender and two faults; three clients
/// racing to make a record an operator deletes; a floor raised among
/// grants, with one fault.
fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "a holder renewing, two contenders",
            scripts: vec![
                vec![Call::Acquire, Call::Renew],
                vec![Call::Acquire, Call::Acquire],
                vec![Call::Acquire],
            ],
            faults: 0,
            deletion: false,
            horizon: 3,
        },
        Scenario {
            name: "a holder renewing, a contender, two faults",
            scripts: vec![
                vec![Call::Acquire, Call::Renew],
                vec![Call::Acquire, Call::Acquire],
            ],
            faults: 2,
            deletion: false,
            horizon: 3,
        },
        Scenario {
            name: "three makers, a record deleted by hand",
            scripts: vec![
                vec![Call::Acquire],
                vec![Call::Acquire],
                vec![Call::Acquire],
            ],
            faults: 0,
            deletion: true,
            horizon: 3,
        },
        Scenario {
            name: "two makers, a record deleted by hand, one fault",
            scripts: vec![vec![Call::Acquire], vec![Call::Acquire]],
            faults: 1,
            deletion: true,
            horizon: 3,
        },
        Scenario {
            name: "a floor among grants",
            scripts: vec![
                vec![Call::Acquire, Call::Release],
                vec![Call::Floor(30), Call::Acquire],
            ],
            faults: 1,
            deletion: false,
            horizon: 3,
        },
    ]
}

fn model(scenario: &Scenario, expiry: LeaseExpiry, bug: Bug) -> LeaseModel {
    LeaseModel {
        scripts: scenario.scripts.clone(),
        // Client 0's estimate is exact, client 1's trails by most of the
        // lag, and client 2 has none.
        trails: vec![Some(Duration::ZERO), Some(Duration::from_millis(900)), None],
        expiry,
        horizon: scenario.horizon,
        faults: scenario.faults,
        deletion: scenario.deletion,
        bug,
    }
}

fn check(name: &str, model: LeaseModel, breaks: Option<&'static str>) -> impl Checker<LeaseModel> {
    let started = Instant::now();
    let described = format!(
        "{:?}, deletion {}, {:?}",
        model.expiry, model.deletion, model.bug
    );
    let checker = match breaks {
        None => model.checker().threads(2).spawn_bfs().join(),
        Some(property) => model
            .checker()
            .finish_when(HasDiscoveries::AnyOf([property].into()))
            .spawn_bfs()
            .join(),
    };
    println!(
        "{name} ({described}): {} states ({} distinct), depth {}, in {:?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker
}

/// A counterexample as people read it: each step, what the client was
/// doing, and the record and the grants after it.
fn print_trace(trace: stateright::Path<State, Action>, scripts: &[Vec<Call>]) {
    let steps = trace.into_vec();
    println!("counterexample ({} steps):", steps.len() - 1);
    for pair in steps.windows(2) {
        let ((before, action), (after, _)) = (&pair[0], &pair[1]);
        let Some(action) = action else { continue };
        let client = match action {
            Action::Start(c)
            | Action::Deliver(c)
            | Action::LoseAnswer(c)
            | Action::Delay(c)
            | Action::FailRead(c)
            | Action::Wake(c) => Some(*c),
            Action::Land(i) => Some(before.in_flight[*i].client),
            Action::Tick | Action::Delete => None,
        };
        let doing = client.map_or(String::new(), |c| {
            let calls = after.clients[c].calls;
            format!(" (client {c}, {:?})", scripts[c][calls.max(1) - 1])
        });
        let record = after.record.as_ref().map_or("none".to_owned(), |r| {
            format!(
                "v{} counter {} holder {:?}",
                r.version, r.record.counter, r.record.holder
            )
        });
        let held: Vec<_> = after
            .clients
            .iter()
            .map(|c| c.held.as_ref().map(|h| h.token))
            .collect();
        println!(
            "  t={:.6}s {action:?}{doing} -> record {record}; held {held:?}",
            after.now as f64 / SECOND as f64
        );
    }
}

#[test]
fn every_interleaving_of_three_clients_keeps_the_lease_rules() {
    for scenario in scenarios() {
        let checker = check(
            scenario.name,
            model(&scenario, LeaseExpiry::WaiterClock, Bug::None),
            None,
        );
        checker.assert_no_discovery("one holder at a time");
        checker.assert_no_discovery("tokens strictly increase");
        checker.assert_no_discovery("\"granted\" is true");
        checker.assert_no_discovery("\"not granted\" is true");
        if scenario.faults > 0 {
            checker.assert_any_discovery("a lost answer is settled as granted");
        }
        if scenario.deletion {
            checker.assert_any_discovery("a record deleted by hand is made again");
        }
        if scenario
            .scripts
            .iter()
            .any(|calls| calls == &[Call::Acquire, Call::Acquire])
        {
            checker.assert_any_discovery("a dead holder is taken over");
        }
    }
}

#[test]
fn honest_dates_keep_the_rules_when_expiry_trusts_them() {
    let scenario = scenarios().remove(0);
    let checker = check(
        scenario.name,
        model(&scenario, LeaseExpiry::ServerClocksAgree, Bug::None),
        None,
    );
    checker.assert_no_discovery("one holder at a time");
    checker.assert_no_discovery("tokens strictly increase");
}

#[test]
fn a_record_seeded_from_a_trailing_estimate_without_the_lag_restarts_below() {
    let scenario = scenarios().remove(2);
    let property = "tokens strictly increase";
    let checker = check(
        scenario.name,
        model(&scenario, LeaseExpiry::WaiterClock, Bug::SeedWithoutLag),
        Some(property),
    );
    print_trace(checker.assert_any_discovery(property), &scenario.scripts);
}

#[test]
fn a_date_ahead_lets_a_waiter_take_over_a_live_lease_when_expiry_trusts_dates() {
    let scenario = scenarios().remove(0);
    let property = "one holder at a time";
    let checker = check(
        scenario.name,
        model(&scenario, LeaseExpiry::ServerClocksAgree, Bug::DateAhead),
        Some(property),
    );
    print_trace(checker.assert_any_discovery(property), &scenario.scripts);
}

#[test]
fn a_port_whose_clock_reads_zero_restarts_a_deleted_record_below() {
    let scenario = scenarios().remove(2);
    let property = "tokens strictly increase";
    let checker = check(
        scenario.name,
        model(&scenario, LeaseExpiry::WaiterClock, Bug::ClockAtZero),
        Some(property),
    );
    print_trace(checker.assert_any_discovery(property), &scenario.scripts);
}

#[test]
fn a_floor_written_over_a_higher_counter_sends_tokens_back() {
    let scenario = Scenario {
        name: "a low floor among grants",
        scripts: vec![
            vec![Call::Acquire, Call::Release],
            vec![Call::Floor(0), Call::Acquire],
        ],
        faults: 0,
        deletion: false,
        horizon: 3,
    };
    let property = "tokens strictly increase";
    let checker = check(
        scenario.name,
        model(&scenario, LeaseExpiry::WaiterClock, Bug::FloorLowers),
        Some(property),
    );
    print_trace(checker.assert_any_discovery(property), &scenario.scripts);
}

#[test]
fn a_lost_answer_taken_for_a_refusal_leaves_a_grant_nobody_knows_of() {
    let scenario = scenarios().remove(1);
    let property = "\"not granted\" is true";
    let checker = check(
        scenario.name,
        model(&scenario, LeaseExpiry::WaiterClock, Bug::LostAsRefused),
        Some(property),
    );
    print_trace(checker.assert_any_discovery(property), &scenario.scripts);
}
