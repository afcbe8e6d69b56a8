//! The conditional-write engine, model-checked: the core's own
//! [`Engine`] (not a second description of it) run by three writers
//! against a modelled record, in every interleaving, with answers lost,
//! requests delayed past their answer, and reads failing.
//!
//! The record is what every object store offers: a version that changes on
//! every write (a GCS generation, an Azure ETag; S3's MD5 ETag can come
//! back, but only with the same bytes, token and all), and a write applied
//! only if the object is at the version named (or absent). Each writer is a
//! store of its own, with its own memory of the key, running a short script
//! of calls with its token. The checker explores every order of every
//! step, and at each state checks:
//!
//! - **marks never go down**: every write the record accepts carries a
//!   token at least every one it accepted before;
//! - **"nothing written" is true**: a call that ends stale, refused,
//!   contended or failed had none of its writes applied, then or later
//!   (a delayed copy landing after the call ended counts);
//! - **"written" is true**: a call that ends written had a write applied.
//!
//! Each known-bad variant (a parameter of the model, never of the engine)
//! must yield a counterexample, printed as a trace: a store that ignores
//! the version condition (it accepts a token below its mark), and a port
//! that settles a lost answer as a lost race ("not written").

use std::time::Instant;

use fencing_core::FencingToken;
use fencing_core::adapter::cas::{Answer, End, Engine, Found, Frame, Intent, Known, Step};
use stateright::{Checker, HasDiscoveries, Model, Property};

/// What the model gets wrong on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    None,
    /// The store applies a write whatever version it names.
    StoreIgnoresVersion,
    /// A write whose answer was lost is answered as a failed precondition.
    LostAnswerAsLost,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Op {
    Put,
    Create,
    Delete,
    Fence,
    /// An update on the version this writer last saw.
    UpdateSeen,
}

/// Per writer: its token and its calls, in order.
type Scripts = Vec<(u64, Vec<Op>)>;

struct WriteModel {
    scripts: Scripts,
    max_attempts: u32,
    /// Whether writers with one token share one store (and its memory of
    /// the key), as one holder's tasks do.
    shared_stores: bool,
    /// How many faults (a lost answer, a delayed request, a failed read)
    /// a run may have.
    faults: u8,
    bug: Bug,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Record {
    version: u32,
    mark: u64,
    live: bool,
}

/// A call's fate, as the checker judges it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Call {
    /// A write of this call was applied by the record.
    applied: bool,
    /// A write of this call had its answer lost (applied, or delayed).
    lost_answer: bool,
    /// What the engine reported; `None` while running.
    report: Option<Report>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Report {
    Written,
    Unchanged,
    /// Stale, exists, not matched, contention, or a failure with no write
    /// unanswered: all say "nothing written".
    NothingWritten(&'static str),
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Writer {
    engine: Option<Engine<u32>>,
    step: Option<Step<u32>>,
    calls: Vec<Call>,
}

/// A write sent whose answer was given up on: it may land any time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct InFlight {
    writer: usize,
    call: usize,
    on: Option<u32>,
    frame: Frame,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    record: Option<Record>,
    versions: u32,
    /// The highest token the record accepted, and whether one below it
    /// was accepted after it.
    top: u64,
    regressed: bool,
    writers: Vec<Writer>,
    /// What each store remembers of the key: a writer's own, or one
    /// shared by the tasks of one holder (one store, one token).
    memory: Vec<Option<Known<u32>>>,
    in_flight: Vec<InFlight>,
    faults: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Action {
    /// Writer `w` starts its next call.
    Start(usize),
    /// Writer `w`'s read or write reaches the record and is answered.
    Deliver(usize),
    /// Writer `w`'s write is applied, but the answer is lost.
    LoseAnswer(usize),
    /// Writer `w`'s write is delayed: no answer, and it lands later (or
    /// never).
    Delay(usize),
    /// Writer `w`'s read fails.
    FailRead(usize),
    /// Writer `w`'s pause ends.
    Resume(usize),
    /// The delayed write `i` lands.
    Land(usize),
}

impl State {
    /// Applies a conditional write if its condition holds (or the store
    /// ignores conditions); the new version, or `None` if refused.
    fn apply(
        &mut self,
        bug: Bug,
        writer: usize,
        call: usize,
        on: Option<u32>,
        frame: Frame,
    ) -> Option<u32> {
        let holds = match (&self.record, on) {
            (None, None) => true,
            (Some(r), Some(v)) => r.version == v,
            _ => false,
        };
        if !holds && bug != Bug::StoreIgnoresVersion {
            return None;
        }
        self.versions += 1;
        let token = frame.token.get();
        self.regressed |= token < self.top;
        self.top = self.top.max(token);
        self.record = Some(Record {
            version: self.versions,
            mark: token,
            live: frame.live,
        });
        self.writers[writer].calls[call].applied = true;
        Some(self.versions)
    }

    fn found(&self) -> Option<Found<u32>> {
        self.record.as_ref().map(|r| Found {
            version: r.version,
            mark: FencingToken::new(r.mark),
            live: r.live,
        })
    }
}

impl WriteModel {
    /// Feeds `answer` to writer `w`'s engine and keeps its next step;
    /// an end is reported at once.
    fn answer(&self, s: &mut State, w: usize, answer: Answer<u32>) {
        let engine = s.writers[w].engine.as_mut().expect("a call runs");
        let step = engine.answer(answer);
        self.settle(s, w, step);
    }

    /// The store writer `w` writes through: its own, or with
    /// `shared_stores`, the first writer's with the same token.
    fn store(&self, w: usize) -> usize {
        let token = self.scripts[w].0;
        match self.shared_stores {
            true => self
                .scripts
                .iter()
                .position(|(t, _)| *t == token)
                .unwrap_or(w),
            false => w,
        }
    }

    fn settle(&self, s: &mut State, w: usize, step: Step<u32>) {
        let engine = s.writers[w].engine.as_mut().expect("a call runs");
        if let Some(memo) = engine.take_memo() {
            s.memory[self.store(w)] = memo;
        }
        let writer = &mut s.writers[w];
        match step {
            Step::Done(end) => {
                let report = match end {
                    End::Written(_) => Report::Written,
                    End::Unchanged => Report::Unchanged,
                    End::Stale { .. } => Report::NothingWritten("stale"),
                    End::Exists { .. } => Report::NothingWritten("exists"),
                    End::NotMatched => Report::NothingWritten("not matched"),
                    End::Contention { .. } => Report::NothingWritten("contention"),
                    End::Unknown => Report::Unknown,
                };
                self.report(writer, report);
            }
            step => writer.step = Some(step),
        }
    }

    fn report(&self, writer: &mut Writer, report: Report) {
        writer.calls.last_mut().expect("a call").report = Some(report);
        writer.engine = None;
        writer.step = None;
    }
}

impl Model for WriteModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let writers = self
            .scripts
            .iter()
            .map(|_| Writer {
                engine: None,
                step: None,
                calls: Vec::new(),
            })
            .collect();
        vec![State {
            record: None,
            versions: 0,
            top: 0,
            regressed: false,
            writers,
            memory: vec![None; self.scripts.len()],
            in_flight: Vec::new(),
            faults: self.faults,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (w, writer) in s.writers.iter().enumerate() {
            match &writer.step {
                None if writer.calls.len() < self.scripts[w].1.len() => {
                    actions.push(Action::Start(w));
                }
                None => {}
                Some(Step::Read { .. }) => {
                    actions.push(Action::Deliver(w));
                    if s.faults > 0 {
                        actions.push(Action::FailRead(w));
                    }
                }
                Some(Step::Write { .. }) => {
                    actions.push(Action::Deliver(w));
                    if s.faults > 0 {
                        actions.push(Action::LoseAnswer(w));
                        actions.push(Action::Delay(w));
                    }
                }
                Some(Step::Pause { .. }) => actions.push(Action::Resume(w)),
                Some(Step::Done(_)) => unreachable!("an end is reported at once"),
            }
        }
        for i in 0..s.in_flight.len() {
            actions.push(Action::Land(i));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Start(w) => {
                let (token, script) = &self.scripts[w];
                let known = s.memory[self.store(w)].clone();
                let writer = &mut s.writers[w];
                let intent = match script[writer.calls.len()] {
                    Op::Put => Intent::Put { small: true },
                    Op::Create => Intent::Create,
                    Op::Delete => Intent::Delete,
                    Op::Fence => Intent::Fence,
                    Op::UpdateSeen => Intent::Update(known.as_ref().map_or(0, |k| k.version)),
                };
                let mut engine =
                    Engine::new(FencingToken::new(*token), intent, known, self.max_attempts);
                let step = engine.start();
                writer.calls.push(Call::default());
                writer.engine = Some(engine);
                self.settle(&mut s, w, step);
            }
            Action::Deliver(w) => match s.writers[w].step.clone() {
                Some(Step::Read { .. }) => {
                    let found = s.found();
                    self.answer(&mut s, w, Answer::Read(found));
                }
                Some(Step::Write { on, frame, .. }) => {
                    let call = s.writers[w].calls.len() - 1;
                    let answer = match s.apply(self.bug, w, call, on, frame) {
                        Some(version) => Answer::Written(Some(version)),
                        None => Answer::Lost,
                    };
                    self.answer(&mut s, w, answer);
                }
                _ => return None,
            },
            Action::LoseAnswer(w) | Action::Delay(w) => {
                let Some(Step::Write { on, frame, .. }) = s.writers[w].step.clone() else {
                    return None;
                };
                s.faults -= 1;
                let call = s.writers[w].calls.len() - 1;
                s.writers[w].calls[call].lost_answer = true;
                if action == Action::LoseAnswer(w) {
                    s.apply(self.bug, w, call, on, frame);
                } else {
                    s.in_flight.push(InFlight {
                        writer: w,
                        call,
                        on,
                        frame,
                    });
                }
                let answer = if self.bug == Bug::LostAnswerAsLost {
                    Answer::Lost
                } else {
                    Answer::Unknown
                };
                self.answer(&mut s, w, answer);
            }
            Action::FailRead(w) => {
                s.faults -= 1;
                let store = self.store(w);
                let writer = &mut s.writers[w];
                let engine = writer.engine.as_mut().expect("a call runs");
                let report = match engine.failed() {
                    Some(_) => Report::Unknown,
                    None => Report::NothingWritten("failed"),
                };
                if let Some(memo) = engine.take_memo() {
                    s.memory[store] = memo;
                }
                self.report(&mut s.writers[w], report);
            }
            Action::Resume(w) => self.answer(&mut s, w, Answer::Paused),
            Action::Land(i) => {
                let flight = s.in_flight.remove(i);
                s.apply(
                    self.bug,
                    flight.writer,
                    flight.call,
                    flight.on,
                    flight.frame,
                );
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("marks never go down", |_, s: &State| !s.regressed),
            Property::always("\"nothing written\" is true", |_, s: &State| {
                s.writers
                    .iter()
                    .flat_map(|w| &w.calls)
                    .all(|c| !(matches!(c.report, Some(Report::NothingWritten(_))) && c.applied))
            }),
            Property::always("\"written\" is true", |_, s: &State| {
                s.writers
                    .iter()
                    .flat_map(|w| &w.calls)
                    .all(|c| c.report != Some(Report::Written) || c.applied)
            }),
            // Coverage: the runs reach the cases the properties are about.
            Property::sometimes("a stale writer is refused", |_, s: &State| {
                s.writers
                    .iter()
                    .flat_map(|w| &w.calls)
                    .any(|c| c.report == Some(Report::NothingWritten("stale")))
            }),
            Property::sometimes("a lost answer is settled as written", |_, s: &State| {
                s.writers
                    .iter()
                    .flat_map(|w| &w.calls)
                    .any(|c| c.lost_answer && c.report == Some(Report::Written))
            }),
            Property::sometimes("a lost answer is reported unknown", |_, s: &State| {
                s.writers
                    .iter()
                    .flat_map(|w| &w.calls)
                    .any(|c| c.lost_answer && c.report == Some(Report::Unknown))
            }),
            Property::sometimes("every attempt lost is contention", |_, s: &State| {
                s.writers
                    .iter()
                    .flat_map(|w| &w.calls)
                    .any(|c| c.report == Some(Report::NothingWritten("contention")))
            }),
        ]
    }
}

/// Three writers: a zombie with the lowest token, the holder writing and
/// deleting, and a newer holder fencing and creating, or the same holder's
/// second task racing the first with the same token.
fn scenarios() -> Vec<(&'static str, Scripts)> {
    vec![
        (
            "zombie, holder, newer holder",
            vec![
                (1, vec![Op::Put]),
                (2, vec![Op::Put, Op::Delete]),
                (3, vec![Op::Fence, Op::Create]),
            ],
        ),
        (
            "two tasks of one holder and a zombie",
            vec![
                (2, vec![Op::Create, Op::UpdateSeen]),
                (2, vec![Op::Put, Op::Put]),
                (1, vec![Op::Delete]),
            ],
        ),
    ]
}

/// Explores `scripts` with `bug`; with a `bug`, only until the first
/// state that breaks `breaks` (breadth first on one thread: a shortest
/// counterexample).
fn check(
    name: &str,
    scripts: Scripts,
    shared_stores: bool,
    bug: Bug,
    breaks: Option<&'static str>,
) -> impl Checker<WriteModel> {
    let started = Instant::now();
    let model = WriteModel {
        scripts,
        max_attempts: 3,
        shared_stores,
        faults: FAULTS,
        bug,
    };
    let checker = match breaks {
        None => model.checker().threads(2).spawn_bfs().join(),
        Some(property) => model
            .checker()
            .finish_when(HasDiscoveries::AnyOf([property].into()))
            .spawn_bfs()
            .join(),
    };
    println!(
        "{name} (shared stores: {shared_stores}, {bug:?}): {} states ({} distinct), depth {}, in {:?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker
}

/// Faults per run: lost answers, delayed writes and failed reads.
const FAULTS: u8 = 2;

/// A counterexample as people read it: each step, and the record after it.
fn print_trace(trace: stateright::Path<State, Action>, scripts: &[(u64, Vec<Op>)]) {
    let steps = trace.into_vec();
    println!("counterexample ({} steps):", steps.len() - 1);
    for (state, action) in steps {
        if let Some(action) = action {
            let w = match action {
                Action::Start(w)
                | Action::Deliver(w)
                | Action::LoseAnswer(w)
                | Action::Delay(w)
                | Action::FailRead(w)
                | Action::Resume(w) => w,
                Action::Land(i) => state.in_flight[i].writer,
            };
            let call = state.writers[w].calls.len();
            print!("  writer {w} (token {}): {action:?}", scripts[w].0);
            if let Action::Start(_) = action {
                print!(" {:?}", scripts[w].1[call]);
            }
            println!();
        } else {
            println!("  record: {:?}", state.record);
            for (w, writer) in state.writers.iter().enumerate() {
                println!("  writer {w} calls: {:?}", writer.calls);
            }
        }
    }
}

#[test]
fn every_interleaving_of_three_writers_keeps_the_mark_rule() {
    for (name, scripts) in scenarios() {
        let checker = check(name, scripts.clone(), false, Bug::None, None);
        checker.assert_properties();
        if name.contains("one holder") {
            let checker = check(name, scripts, true, Bug::None, None);
            checker.assert_properties();
        }
    }
}

#[test]
fn a_store_that_ignores_the_version_lets_a_mark_go_down() {
    let (name, scripts) = scenarios().remove(0);
    let property = "marks never go down";
    let checker = check(
        name,
        scripts,
        false,
        Bug::StoreIgnoresVersion,
        Some(property),
    );
    let trace = checker.assert_any_discovery(property);
    print_trace(trace, &scenarios().remove(0).1);
}

#[test]
fn a_lost_answer_settled_as_a_lost_race_reports_nothing_written_of_a_write_applied() {
    let (name, scripts) = scenarios().remove(0);
    let property = "\"nothing written\" is true";
    let checker = check(name, scripts, false, Bug::LostAnswerAsLost, Some(property));
    let trace = checker.assert_any_discovery(property);
    print_trace(trace, &scenarios().remove(0).1);
}
