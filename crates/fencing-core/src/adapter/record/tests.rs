//! The machine driven by hand, answer by answer: what each step asks for.

use std::time::{Duration, Instant, SystemTime};

use super::*;

const TTL_MS: u64 = 2_000;

fn clocks(now: Instant, server: Option<SystemTime>) -> Clocks {
    Clocks {
        now,
        server_now: server,
        server_lag: Duration::from_secs(1),
    }
}

fn acquire() -> Op {
    Op::Acquire {
        holder: "me".into(),
        ttl_ms: TTL_MS,
    }
}

fn record(counter: u64, holder: Option<&str>, nonce: u128) -> LeaseRecord {
    LeaseRecord {
        counter,
        holder: holder.map(str::to_owned),
        ttl_ms: if holder.is_some() { TTL_MS } else { 0 },
        nonce,
    }
}

fn seen(version: u32, record: LeaseRecord) -> Seen<u32> {
    Seen {
        version,
        record,
        modified: None,
        answered: None,
    }
}

fn write_of(step: &Step<u32>) -> (On<u32>, LeaseRecord) {
    match step {
        Step::Write { on, record } => (on.clone(), record.clone()),
        other => panic!("expected a write, got {other:?}"),
    }
}

#[test]
fn an_absent_record_is_made_at_the_servers_time_after_the_lag() {
    let t0 = Instant::now();
    let server = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
    let c = clocks(t0, Some(server));
    let mut m = RecordLease::new(acquire(), LeaseExpiry::default(), None, 7);
    assert_eq!(m.start(&c), Step::Read);
    // Made unseeded first, then seeded on its own version.
    let (on, made) = write_of(&m.answer(Answer::Read(None), &c));
    assert_eq!(on, On::Absent);
    assert!(made.is_unseeded());
    let Step::Wait { until } = m.answer(Answer::Written(1), &c) else {
        panic!("no wait for the server's clock");
    };
    assert!(until >= t0 + Duration::from_secs(1));
    // Woken early: asked to wait again.
    assert_eq!(m.answer(Answer::Waited, &c), Step::Wait { until });
    let later = clocks(until, Some(server + Duration::from_secs(1)));
    let (on, made) = write_of(&m.answer(Answer::Waited, &later));
    assert_eq!(on, On::At(1));
    assert_eq!(
        made.counter, 1_001_000_000,
        "the estimate plus the lag, in µs"
    );
    assert_eq!(made.holder.as_deref(), Some("me"));
    assert_eq!(
        m.answer(Answer::Written(2), &later),
        Step::Done(End::Granted {
            token: 1_001_000_000,
            sent_at: until
        })
    );
}

#[test]
fn without_a_server_time_a_record_is_made_unseeded_then_seeded_from_itself() {
    let t0 = Instant::now();
    let c = clocks(t0, None);
    let mut m = RecordLease::new(Op::Floor(5), LeaseExpiry::default(), None, 7);
    m.start(&c);
    let (on, made) = write_of(&m.answer(Answer::Read(None), &c));
    assert_eq!(on, On::Absent);
    assert!(made.is_unseeded());
    assert_eq!(m.answer(Answer::Written(1), &c), Step::Read);
    let modified = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000);
    let back = Seen {
        modified: Some(modified),
        ..seen(1, made)
    };
    let Step::Wait { until } = m.answer(Answer::Read(Some(back)), &c) else {
        panic!("no wait");
    };
    let (on, seeded) = write_of(&m.answer(Answer::Waited, &clocks(until, None)));
    assert_eq!(on, On::At(1));
    assert_eq!(
        seeded.counter, 2_000_999_999,
        "a floor below the seed: the next grant is the seed"
    );
    assert!(seeded.holder.is_none());
}

#[test]
fn with_no_server_time_at_all_nothing_is_granted() {
    let c = clocks(Instant::now(), None);
    let mut m = RecordLease::new(acquire(), LeaseExpiry::default(), None, 7);
    m.start(&c);
    let unseeded = seen(3, LeaseRecord::unseeded(1));
    assert_eq!(
        m.answer(Answer::Read(Some(unseeded)), &c),
        Step::Done(End::NoServerClock)
    );
}

#[test]
fn a_record_this_caller_released_is_granted_without_a_read() {
    let now = Instant::now();
    let c = clocks(now, None);
    let memory = Known {
        seen: seen(4, record(9, None, 1)),
        received: now,
        since: now,
    };
    let mut m = RecordLease::new(acquire(), LeaseExpiry::default(), Some(memory), 7);
    let (on, granted) = write_of(&m.start(&c));
    assert_eq!((on, granted.counter), (On::At(4), 10));
    // The memory was old: a refusal that shows nothing means read again.
    assert_eq!(m.answer(Answer::Refused, &c), Step::Read);
    assert_eq!(
        m.answer(
            Answer::Read(Some(seen(5, record(11, Some("other"), 2)))),
            &c
        ),
        Step::Done(End::Held)
    );
}

#[test]
fn a_held_record_is_taken_over_only_after_the_same_version_for_a_ttl() {
    let t0 = Instant::now();
    let held = seen(6, record(20, Some("other"), 2));
    let mut first = RecordLease::new(acquire(), LeaseExpiry::default(), None, 7);
    first.start(&clocks(t0, None));
    let step = first.answer(Answer::Read(Some(held.clone())), &clocks(t0, None));
    assert_eq!(step, Step::Done(End::Held));
    let memory = first.memory().cloned();

    let almost = t0 + Duration::from_millis(TTL_MS - 1);
    let mut early = RecordLease::new(acquire(), LeaseExpiry::default(), memory.clone(), 7);
    early.start(&clocks(almost, None));
    let step = early.answer(Answer::Read(Some(held.clone())), &clocks(almost, None));
    assert_eq!(step, Step::Done(End::Held), "taken over before a TTL");

    let after = t0 + Duration::from_millis(TTL_MS);
    let mut late = RecordLease::new(acquire(), LeaseExpiry::default(), memory, 7);
    late.start(&clocks(after, None));
    let (on, taken) = write_of(&late.answer(Answer::Read(Some(held)), &clocks(after, None)));
    assert_eq!((on, taken.counter), (On::At(6), 21));

    // A renew in between (a new version) starts the count again.
    let mut renewed =
        RecordLease::new(acquire(), LeaseExpiry::default(), late.memory().cloned(), 7);
    renewed.start(&clocks(after, None));
    let fresh = seen(7, record(20, Some("other"), 3));
    assert_eq!(
        renewed.answer(Answer::Read(Some(fresh)), &clocks(after, None)),
        Step::Done(End::Held)
    );
}

#[test]
fn a_lost_answer_is_settled_by_the_nonce_or_sent_again_on_the_same_version() {
    let now = Instant::now();
    let c = clocks(now, None);
    let mut m = RecordLease::new(acquire(), LeaseExpiry::default(), None, 7);
    m.start(&c);
    let free = seen(2, record(5, None, 1));
    let (_, sent) = write_of(&m.answer(Answer::Read(Some(free.clone())), &c));
    assert_eq!(m.answer(Answer::Lost, &c), Step::Read);
    assert!(m.lost_an_answer());
    // Still at the version it named: the same write again.
    let again = m.answer(Answer::Read(Some(free.clone())), &c);
    assert_eq!(write_of(&again), (On::At(2), sent.clone()));
    // Refused now: the first copy may have landed; the read tells.
    assert_eq!(m.answer(Answer::Refused, &c), Step::Read);
    let ours = seen(3, sent.clone());
    assert_eq!(
        m.answer(Answer::Read(Some(ours)), &c),
        Step::Done(End::Granted {
            token: 6,
            sent_at: now
        })
    );

    // Three answers lost on a version still there: unknown.
    let mut m = RecordLease::new(acquire(), LeaseExpiry::default(), None, 7);
    m.start(&c);
    let mut step = m.answer(Answer::Read(Some(free.clone())), &c);
    for _ in 0..MAX_UNANSWERED {
        write_of(&step);
        assert_eq!(m.answer(Answer::Lost, &c), Step::Read);
        step = m.answer(Answer::Read(Some(free.clone())), &c);
    }
    assert_eq!(step, Step::Done(End::Unknown));

    // A failed read after a lost answer is unknown, never "not granted".
    let mut m = RecordLease::new(acquire(), LeaseExpiry::default(), None, 7);
    m.start(&c);
    m.answer(Answer::Read(Some(free)), &c);
    m.answer(Answer::Lost, &c);
    assert_eq!(m.answer(Answer::ReadFailed, &c), Step::Done(End::Unknown));
}

#[test]
fn renew_and_release_need_the_record_to_name_the_lease() {
    let now = Instant::now();
    let c = clocks(now, None);
    let ours = seen(8, record(30, Some("me"), 1));
    let memory = Known {
        seen: ours.clone(),
        received: now,
        since: now,
    };
    let release = Op::Release {
        holder: "me".into(),
        token: 30,
    };
    let mut m = RecordLease::new(release.clone(), LeaseExpiry::default(), Some(memory), 7);
    let (on, freed) = write_of(&m.start(&c));
    assert_eq!((on, freed.counter, freed.holder), (On::At(8), 30, None));
    // The remembered version was old: read, and it is someone else's.
    assert_eq!(m.answer(Answer::Refused, &c), Step::Read);
    let theirs = seen(9, record(31, Some("other"), 2));
    assert_eq!(
        m.answer(Answer::Read(Some(theirs)), &c),
        Step::Done(End::NotHeld)
    );

    let renew = Op::Renew {
        holder: "me".into(),
        token: 30,
        ttl_ms: TTL_MS,
    };
    let mut m = RecordLease::new(renew, LeaseExpiry::default(), None, 7);
    assert_eq!(m.start(&c), Step::Read);
    let (on, renewed) = write_of(&m.answer(Answer::Read(Some(ours)), &c));
    assert_eq!((on, renewed.counter), (On::At(8), 30));
    assert_eq!(
        m.answer(Answer::Written(10), &c),
        Step::Done(End::Renewed { sent_at: now })
    );
}

#[test]
fn a_refusal_that_shows_the_record_is_judged_without_a_read() {
    let now = Instant::now();
    let c = clocks(now, None);
    let memory = Known {
        seen: seen(1, record(3, None, 1)),
        received: now,
        since: now,
    };
    let mut m = RecordLease::new(acquire(), LeaseExpiry::default(), Some(memory), 7);
    write_of(&m.start(&c));
    // Granted and released by others since: free at a higher counter.
    let moved = seen(4, record(5, None, 2));
    let (on, granted) = write_of(&m.answer(Answer::RefusedShowing(Some(moved)), &c));
    assert_eq!((on, granted.counter), (On::At(4), 6));
}

#[test]
fn a_floor_never_lowers_and_waits_for_a_live_holder() {
    let now = Instant::now();
    let c = clocks(now, None);
    let mut m = RecordLease::new(Op::Floor(10), LeaseExpiry::default(), None, 7);
    m.start(&c);
    assert_eq!(
        m.answer(Answer::Read(Some(seen(1, record(12, None, 1)))), &c),
        Step::Done(End::Floored)
    );
    let mut m = RecordLease::new(Op::Floor(10), LeaseExpiry::default(), None, 7);
    m.start(&c);
    assert_eq!(
        m.answer(Answer::Read(Some(seen(1, record(3, Some("x"), 1)))), &c),
        Step::Done(End::Busy)
    );
    let mut m = RecordLease::new(Op::Floor(10), LeaseExpiry::default(), None, 7);
    m.start(&c);
    let (_, raised) = write_of(&m.answer(Answer::Read(Some(seen(1, record(3, None, 1)))), &c));
    assert_eq!((raised.counter, raised.holder), (10, None));
}

#[test]
fn a_counter_at_the_top_grants_nothing() {
    let c = clocks(Instant::now(), None);
    let mut m = RecordLease::new(acquire(), LeaseExpiry::default(), None, 7);
    m.start(&c);
    assert_eq!(
        m.answer(Answer::Read(Some(seen(1, record(u64::MAX, None, 1)))), &c),
        Step::Done(End::OutOfRange)
    );
}

#[test]
fn our_nonce_on_a_record_changed_since_is_judged_as_read_not_taken_as_ours() {
    // A release whose answer was lost; the read back shows its nonce, but a
    // writer that keeps the nonce (an older release's floor) has raised
    // the counter since. Remembering our record at that version would let
    // the next grant write below the floor on it.
    let now = Instant::now();
    let c = clocks(now, None);
    let ours = seen(8, record(30, Some("me"), 1));
    let release = Op::Release {
        holder: "me".into(),
        token: 30,
    };
    let mut m = RecordLease::new(release, LeaseExpiry::default(), None, 7);
    m.start(&c);
    let (_, freed) = write_of(&m.answer(Answer::Read(Some(ours)), &c));
    assert_eq!(m.answer(Answer::Lost, &c), Step::Read);
    let floored = seen(
        9,
        LeaseRecord {
            counter: 90,
            ..freed
        },
    );
    assert_eq!(
        m.answer(Answer::Read(Some(floored.clone())), &c),
        Step::Done(End::NotHeld)
    );
    assert_eq!(m.memory().map(|k| &k.seen), Some(&floored));
}

#[test]
fn a_lost_create_on_a_record_still_absent_is_decided_again_with_a_new_nonce() {
    let c = clocks(Instant::now(), None);
    let mut m = RecordLease::new(acquire(), LeaseExpiry::default(), None, 7);
    m.start(&c);
    let (on, first) = write_of(&m.answer(Answer::Read(None), &c));
    assert_eq!(on, On::Absent);
    assert_eq!(m.answer(Answer::Lost, &c), Step::Read);
    let (on, again) = write_of(&m.answer(Answer::Read(None), &c));
    assert_eq!(on, On::Absent);
    assert!(again.is_unseeded());
    assert_ne!(again.nonce, first.nonce, "the same bytes sent again");
}

#[test]
fn a_record_is_removed_only_when_idle_dead_and_the_idle_time_below_the_servers_clock() {
    use crate::Removal;
    let second = Duration::from_secs(1);
    let at = |micros: u64| Some(SystemTime::UNIX_EPOCH + Duration::from_micros(micros));
    let free = seen(1, record(1_000, None, 1));
    let held = seen(1, record(1_000, Some("h"), 1));
    // Unchanged for less than the idle time: in use.
    assert_eq!(
        removal(&free, second / 2, second, at(5_000_000)),
        Removal::InUse
    );
    // A holder's TTL not yet passed, whatever the idle time: in use.
    let ttl = Duration::from_millis(TTL_MS);
    assert_eq!(
        removal(&held, ttl / 2, second, at(5_000_000)),
        Removal::InUse
    );
    assert_eq!(removal(&held, ttl, second, at(5_000_000)), Removal::Removed);
    assert_eq!(
        removal(&free, second, second, at(5_000_000)),
        Removal::Removed
    );
    // A counter less than the idle time below the server's clock (a floor,
    // a record made within it), or no clock at all: kept.
    assert_eq!(
        removal(&free, second, second, at(1_000_999)),
        Removal::Floored
    );
    assert_eq!(
        removal(&free, second, second, at(1_001_001)),
        Removal::Removed
    );
    assert_eq!(removal(&free, second, second, None), Removal::Floored);
    // An unseeded record gave no token.
    let unseeded = seen(1, LeaseRecord::unseeded(7));
    assert_eq!(removal(&unseeded, second, second, None), Removal::Removed);
}
