//! The engine's steps, answered by hand. The model checker
//! (`fencing-testkit`'s `model`) explores every interleaving of three
//! writers on a modelled record; these pin the step sequence each path
//! takes, which is what the request counts of the bench rest on.

use super::*;

fn t(n: u64) -> FencingToken {
    FencingToken::new(n)
}

fn found(version: u32, mark: u64, live: bool) -> Option<Found<u32>> {
    Some(Found {
        version,
        mark: t(mark),
        live,
    })
}

fn value(token: u64, on: Option<u32>) -> Step<u32> {
    Step::Write {
        on,
        frame: Frame {
            token: t(token),
            live: true,
        },
        payload: Payload::Value,
    }
}

fn put(token: u64, previous: Option<Known<u32>>) -> Engine<u32> {
    Engine::new(t(token), Intent::Put { small: true }, previous, 4)
}

/// The memo a write ends with.
fn written(e: &mut Engine<u32>) -> Known<u32> {
    e.take_memo().flatten().expect("remembered")
}

#[test]
fn a_cold_put_reads_then_writes_and_the_next_one_skips_the_read() {
    let mut e = put(5, None);
    assert_eq!(e.start(), Step::Read { body: false });
    assert_eq!(e.answer(Answer::Read(found(1, 4, true))), value(5, Some(1)));
    assert_eq!(
        e.answer(Answer::Written(Some(2))),
        Step::Done(End::Written(Some(2)))
    );
    let known = written(&mut e);
    assert!(known.trusted && !known.contended && known.live);

    let mut next = put(5, Some(known.clone()));
    assert_eq!(next.start(), value(5, Some(2)), "one request");
    // A lower token than the remembered mark reads first (and is refused).
    let mut lower = put(4, Some(known));
    assert_eq!(lower.start(), Step::Read { body: false });
    assert_eq!(
        lower.answer(Answer::Read(found(2, 5, true))),
        Step::Done(End::Stale { current: t(5) })
    );
}

#[test]
fn a_lost_answer_is_never_settled_as_nothing_written() {
    let mut e = put(5, None);
    e.start();
    e.answer(Answer::Read(found(1, 4, true)));
    assert_eq!(
        e.answer(Answer::Unknown),
        Step::Pause {
            attempt: 1,
            after_race: false
        }
    );
    assert_eq!(e.answer(Answer::Paused), Step::Read { body: false });
    // Ours may have landed and been overwritten by a higher token.
    assert_eq!(
        e.answer(Answer::Read(found(3, 6, true))),
        Step::Done(End::Unknown)
    );
    assert_eq!(e.failed(), Some(End::Unknown));
}

#[test]
fn a_lost_answer_on_a_version_still_there_is_settled_by_writing_again() {
    let mut e = put(5, None);
    e.start();
    e.answer(Answer::Read(found(1, 4, true)));
    e.answer(Answer::Unknown);
    e.answer(Answer::Paused);
    // Not applied (yet): a write on that version wins, and any copy of the
    // first still in flight then fails its precondition.
    assert_eq!(e.answer(Answer::Read(found(1, 4, true))), value(5, Some(1)));
    assert_eq!(
        e.answer(Answer::Written(Some(2))),
        Step::Done(End::Written(Some(2)))
    );
}

#[test]
fn create_presumes_absence_and_a_refusal_is_not_a_race() {
    let mut e = Engine::new(t(5), Intent::Create, None, 1);
    assert_eq!(e.start(), value(5, None), "no read first");
    // With one attempt allowed, the refused presumption still reads.
    assert_eq!(e.answer(Answer::Lost), Step::Read { body: false });
    assert_eq!(
        e.answer(Answer::Read(found(1, 4, false))),
        value(5, Some(1))
    );
    let mut e = Engine::new(t(5), Intent::Create, None, 4);
    e.start();
    e.answer(Answer::Lost);
    assert_eq!(
        e.answer(Answer::Read(found(1, 9, true))),
        Step::Done(End::Exists { mark: t(9) })
    );
}

#[test]
fn an_update_on_the_remembered_version_is_one_request_and_a_lost_one_is_the_callers() {
    let known = Known {
        version: 2,
        mark: t(5),
        live: true,
        trusted: true,
        contended: false,
    };
    let mut e = Engine::new(t(5), Intent::Update(2), Some(known.clone()), 4);
    assert_eq!(e.start(), value(5, Some(2)));
    assert_eq!(e.answer(Answer::Lost), Step::Done(End::NotMatched));
    // Another version: read, and refused on it without a write.
    let mut e = Engine::new(t(5), Intent::Update(7), Some(known), 4);
    assert_eq!(e.start(), Step::Read { body: false });
    assert_eq!(
        e.answer(Answer::Read(found(2, 5, true))),
        Step::Done(End::NotMatched)
    );
    // After a lost answer the object moved on: maybe ours.
    let mut e = Engine::new(t(5), Intent::Update(2), None, 4);
    e.start();
    e.answer(Answer::Read(found(2, 5, true)));
    e.answer(Answer::Unknown);
    e.answer(Answer::Paused);
    assert_eq!(
        e.answer(Answer::Read(found(3, 5, true))),
        Step::Done(End::Unknown)
    );
}

#[test]
fn every_attempt_lost_is_contention_and_a_contended_key_skips_the_read_for_small_puts() {
    let mut e = put(5, None);
    let mut step = e.start();
    for attempt in 1..4 {
        assert_eq!(step, Step::Read { body: false });
        assert_eq!(
            e.answer(Answer::Read(found(attempt, 4, true))),
            value(5, Some(attempt))
        );
        step = e.answer(Answer::Lost);
        assert_eq!(
            step,
            Step::Pause {
                attempt,
                after_race: true
            }
        );
        step = e.answer(Answer::Paused);
    }
    e.answer(Answer::Read(found(9, 4, true)));
    assert_eq!(
        e.answer(Answer::Lost),
        Step::Done(End::Contention { attempts: 4 })
    );

    // Read, overtaken, read again, refused: the key is contended.
    let mut e = put(5, None);
    e.start();
    e.answer(Answer::Read(found(1, 4, true)));
    e.answer(Answer::Lost);
    e.answer(Answer::Paused);
    e.answer(Answer::Read(found(2, 6, true)));
    let known = written(&mut e);
    assert!(known.contended && !known.trusted);
    let mut small = put(7, Some(known.clone()));
    assert_eq!(small.start(), value(7, Some(2)));
    // Won on the version read: writers taking turns, the read pays again.
    assert_eq!(
        small.answer(Answer::Written(Some(3))),
        Step::Done(End::Written(Some(3)))
    );
    assert!(
        written(&mut small).contended,
        "won without a read: still contended"
    );
    let mut read_first = put(7, None);
    read_first.start();
    read_first.answer(Answer::Read(found(1, 4, true)));
    read_first.answer(Answer::Written(Some(2)));
    assert!(!written(&mut read_first).contended);
    let untrusted = known;
    let mut large = Engine::new(t(7), Intent::Put { small: false }, Some(untrusted), 4);
    assert_eq!(large.start(), Step::Read { body: false });
}

#[test]
fn a_delete_is_settled_only_by_what_was_read_and_a_fence_keeps_the_value() {
    let ours = Known {
        version: 3,
        mark: t(5),
        live: false,
        trusted: true,
        contended: false,
    };
    let tombstone = Step::Write {
        on: Some(3),
        frame: Frame {
            token: t(5),
            live: false,
        },
        payload: Payload::Empty,
    };
    // Our own tombstone, remembered: read (someone may have written since),
    // and settled by what the read shows, not written again.
    let mut e = Engine::new(t(5), Intent::Delete, Some(ours.clone()), 4);
    assert_eq!(e.start(), Step::Read { body: false });
    assert_eq!(
        e.answer(Answer::Read(found(3, 5, false))),
        Step::Done(End::Unchanged)
    );
    // A live object remembered as ours: the tombstone goes straight on it.
    let live = Known { live: true, ..ours };
    let mut e = Engine::new(t(5), Intent::Delete, Some(live), 4);
    assert_eq!(e.start(), tombstone);

    let mut e = Engine::new(t(6), Intent::Fence, None, 4);
    assert_eq!(e.start(), Step::Read { body: true });
    assert_eq!(
        e.answer(Answer::Read(found(3, 5, true))),
        Step::Write {
            on: Some(3),
            frame: Frame {
                token: t(6),
                live: true
            },
            payload: Payload::AsRead,
        }
    );
    let mut e = Engine::new(t(6), Intent::Fence, None, 4);
    e.start();
    assert_eq!(
        e.answer(Answer::Read(found(4, 6, true))),
        Step::Done(End::Unchanged)
    );
}

#[test]
fn the_callers_conditions_other_than_create_and_update() {
    // NoneMatch: anything but the live object at that version.
    let mut e = Engine::new(t(5), Intent::NoneMatch(2), None, 4);
    assert_eq!(e.start(), Step::Read { body: false });
    assert_eq!(
        e.answer(Answer::Read(found(2, 4, true))),
        Step::Done(End::NotMatched)
    );
    let mut e = Engine::new(t(5), Intent::NoneMatch(2), None, 4);
    e.start();
    assert_eq!(e.answer(Answer::Read(found(3, 4, true))), value(5, Some(3)));
    // Stale before the caller's condition is even looked at.
    let mut e = Engine::new(t(5), Intent::NoneMatch(2), None, 4);
    e.start();
    assert_eq!(
        e.answer(Answer::Read(found(2, 9, true))),
        Step::Done(End::Stale { current: t(9) })
    );
    // DeleteMatch: a tombstone only on the live object at that version.
    let mut e = Engine::new(t(5), Intent::DeleteMatch(2), None, 4);
    e.start();
    assert_eq!(
        e.answer(Answer::Read(found(2, 4, true))),
        Step::Write {
            on: Some(2),
            frame: Frame {
                token: t(5),
                live: false
            },
            payload: Payload::Empty,
        }
    );
    let mut e = Engine::new(t(5), Intent::DeleteMatch(2), None, 4);
    e.start();
    assert_eq!(
        e.answer(Answer::Read(found(2, 4, false))),
        Step::Done(End::NotMatched),
        "a tombstone at that version is absent to the caller"
    );
}

#[test]
fn a_port_may_read_before_every_create() {
    let mut e = Engine::new(t(5), Intent::Create, None, 4).read_before_create();
    assert_eq!(e.start(), Step::Read { body: false });
    assert_eq!(
        e.answer(Answer::Read(found(1, 5, true))),
        Step::Done(End::Exists { mark: t(5) })
    );
}

#[test]
fn a_store_that_answers_no_write_is_left_after_a_few() {
    let mut e = put(5, None);
    let mut step = e.start();
    for _ in 1..MAX_UNANSWERED {
        assert_eq!(step, Step::Read { body: false });
        e.answer(Answer::Read(found(1, 4, true)));
        assert!(matches!(e.answer(Answer::Unknown), Step::Pause { .. }));
        step = e.answer(Answer::Paused);
    }
    e.answer(Answer::Read(found(1, 4, true)));
    assert_eq!(e.answer(Answer::Unknown), Step::Done(End::Unknown));
}

#[test]
fn a_failure_keeps_what_was_remembered() {
    let known = Known {
        version: 2,
        mark: t(5),
        live: true,
        trusted: true,
        contended: false,
    };
    let mut e = put(5, Some(known));
    e.start();
    assert_eq!(e.failed(), None, "nothing unanswered: the caller's error");
    assert_eq!(e.take_memo(), None, "a refusal says nothing of the version");
}
