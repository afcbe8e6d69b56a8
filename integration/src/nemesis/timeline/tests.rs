use super::*;

fn timeline(lines: &[(usize, &str)]) -> Timeline {
    let events: Vec<_> = lines
        .iter()
        .map(|(c, l)| {
            let (at, e) = Event::parse(l).expect("parses");
            (*c, at, e)
        })
        .collect();
    let end = events.iter().map(|e| e.1).max().unwrap_or(0) + 1;
    Timeline {
        events,
        span: (0, end),
        ..Timeline::default()
    }
}

fn state(client: u64, token: u64, seq: u64) -> BTreeMap<u32, FinalState> {
    let state = (
        Some(Versioned {
            value: value_of(client, token, seq),
            token: FencingToken::new(token),
        }),
        Some(FencingToken::new(token)),
    );
    BTreeMap::from([(0, state)])
}

#[test]
fn a_zombie_refused_after_the_takeover_is_clean_and_counted() {
    let t = timeline(&[
        (0, "10 grant 0 1"),
        (0, "20 put 0 1 1"),
        (0, "30 ok"),
        (1, "40 grant 0 2"),
        (1, "50 put 0 2 1"),
        (1, "60 ok"),
        (0, "70 put 0 1 2"),
        (0, "80 stale 2"),
        (0, "90 release 0 1"),
        (1, "100 release 0 2"),
    ]);
    let r = t.check("t", 7, &state(1, 2, 1));
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(
        (r.accepted, r.refused, r.grants, r.stale_accepts),
        (2, 1, 2, 0)
    );
    assert_eq!(r.overlaps, 1);
    assert_eq!(r.longest_overlap, Duration::from_nanos(50));
    assert_eq!(r.overlap_calls, (1, 1));
}

#[test]
fn a_stale_accept_is_found() {
    let t = timeline(&[
        (0, "10 grant 0 1"),
        (1, "40 grant 0 2"),
        (1, "50 put 0 2 1"),
        (1, "60 ok"),
        (0, "70 put 0 1 1"),
        (0, "80 ok"),
    ]);
    let r = t.check("t", 7, &state(0, 1, 1));
    assert_eq!(r.stale_accepts, 1, "{:?}", r.violations);
    assert!(r.violations.iter().any(|v| v.contains("below the highest")));
}

#[test]
fn lanes_are_judged_apart() {
    // Token 1 on lane 1 after token 2 on lane 0: two locks, no stale accept.
    let t = timeline(&[
        (0, "10 grant 0 2"),
        (0, "20 put 0 2 1"),
        (0, "30 ok"),
        (1, "40 grant 1 1"),
        (1, "50 put 1 1 1"),
        (1, "60 ok"),
    ]);
    let mut finals = state(0, 2, 1);
    finals.insert(1, state(1, 1, 1)[&0].clone());
    let r = t.check("t", 7, &finals);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.accepted, r.grants), (2, 2));
}

#[test]
fn an_unanswered_put_may_be_the_final_value() {
    let t = timeline(&[(0, "10 grant 0 3"), (0, "20 put 0 3 1")]);
    let r = t.check("t", 7, &state(0, 3, 1));
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.failed, 1);
}

#[test]
fn gaps_count_from_the_run_edges() {
    let t = timeline(&[
        (0, "100 grant 0 1"),
        (0, "150 release 0 1"),
        (0, "400 grant 0 2"),
    ]);
    let r = t.check("t", 7, &BTreeMap::new());
    assert_eq!(r.longest_without_grant, Duration::from_nanos(300));
}
