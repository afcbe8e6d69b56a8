//! The verdict: the history checker's clauses per lane, the final state,
//! and the windows a run is judged by.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fencing_testkit::history::{History, Op, OpKind, Outcome};
use fencing_tokens::FencingToken;

use super::{Call, Event, FinalState, RunReport, Timeline, value_of};

/// The longest gap between consecutive instants within the run (its start
/// and end included).
fn longest_gap(mut at: Vec<u64>, (start, end): (u64, u64)) -> Duration {
    at.retain(|t| (start..=end).contains(t));
    at.push(start);
    at.push(end);
    at.sort_unstable();
    let gap = at.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    Duration::from_nanos(gap)
}

/// Where two or more of `intervals` overlap.
fn overlap_windows(intervals: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut edges: Vec<(u64, i32)> = intervals
        .iter()
        .flat_map(|&(s, e)| [(s, 1), (e, -1)])
        .collect();
    // Ends before starts at the same instant: touching is not overlapping.
    edges.sort_unstable();
    let (mut depth, mut opened, mut windows) = (0, 0, Vec::new());
    for (at, d) in edges {
        let before = depth;
        depth += d;
        if before < 2 && depth >= 2 {
            opened = at;
        } else if before >= 2 && depth < 2 && at > opened {
            windows.push((opened, at));
        }
    }
    windows
}

/// The final value and mark against the calls: the mark is at least the
/// highest accepted token and was presented by some call that may have been
/// applied (accepted, or failed with its outcome unknown); the value was
/// written by such a put at the mark.
fn final_state_violations(calls: &[&Call], (value, mark): FinalState) -> Vec<String> {
    let maybe_applied = |c: &&&Call| !matches!(c.outcome, Some(Event::Stale(_)));
    let top = calls
        .iter()
        .filter(|c| c.outcome == Some(Event::Ok))
        .map(|c| c.token)
        .max();
    let mut found = Vec::new();
    let mark = mark.map(FencingToken::get);
    if mark < top {
        found.push(format!(
            "final mark {mark:?} is below the highest accepted token {top:?}"
        ));
    }
    if let Some(m) = mark
        && !calls.iter().filter(maybe_applied).any(|c| c.token == m)
    {
        found.push(format!(
            "final mark {m} was presented by no call that could have set it"
        ));
    }
    if let Some(v) = value {
        let written = calls
            .iter()
            .filter(maybe_applied)
            .any(|c| c.kind == OpKind::Put && value_of(c.client as u64, c.token, c.seq) == v.value);
        if !written {
            found.push(format!(
                "final value {:?} was written by no put that could have been applied",
                String::from_utf8_lossy(&v.value)
            ));
        }
    } else if calls
        .iter()
        .any(|c| c.kind == OpKind::Put && c.outcome == Some(Event::Ok))
    {
        found.push("value lost: puts were accepted but the key is empty".to_owned());
    }
    found
}

impl Timeline {
    /// Judges the run. `finals` holds each lane's value and mark, read after
    /// every client stopped.
    pub fn check(&self, label: &str, seed: u64, finals: &BTreeMap<u32, FinalState>) -> RunReport {
        let all = self.calls();
        let mut report = RunReport {
            label: label.to_owned(),
            seed,
            duration: Duration::from_nanos(self.span.1 - self.span.0),
            ..RunReport::default()
        };
        for lane in self.lanes() {
            let calls: Vec<&Call> = all.iter().filter(|c| c.lane == lane).collect();
            let final_state = finals.get(&lane).cloned().unwrap_or_default();
            self.check_lane(lane, &calls, final_state, &mut report);
        }
        self.windows(&all, &mut report);
        report
    }

    /// One lane's history: the checker's clauses and the final state.
    fn check_lane(
        &self,
        lane: u32,
        calls: &[&Call],
        final_state: FinalState,
        report: &mut RunReport,
    ) {
        let (base_ns, base) = (self.span.0, Instant::now());
        let instant = |ns: u64| base + Duration::from_nanos(ns.saturating_sub(base_ns));
        let history = History::new();
        for (i, c) in calls.iter().enumerate() {
            let outcome = match &c.outcome {
                Some(Event::Ok) => Outcome::Accepted,
                Some(Event::Stale(current)) => Outcome::Refused {
                    current: FencingToken::new(*current),
                },
                Some(Event::Err(e)) => Outcome::Failed(e.clone()),
                _ => Outcome::Failed(format!("call {i}: no answer before the run ended")),
            };
            history.push(Op {
                client: c.client,
                kind: c.kind,
                token: FencingToken::new(c.token),
                value: value_of(c.client as u64, c.token, c.seq),
                started: instant(c.start),
                finished: instant(c.end),
                outcome,
            });
        }
        // The final state is judged here, not by the history: a call whose
        // answer was lost may have been applied, so its token may be the mark.
        let tally = history.check(None);
        report.operations += tally.operations;
        report.accepted += tally.accepted;
        report.refused += tally.refused;
        report.failed += tally.failed;
        report.stale_accepts += tally
            .violations
            .iter()
            .filter(|v| v.starts_with("stale accept"))
            .count();
        let found = tally
            .violations
            .into_iter()
            .chain(final_state_violations(calls, final_state));
        report
            .violations
            .extend(found.map(|v| format!("lane {lane}: {v}")));
    }

    /// Grants, clocks, and the windows: two holders of one lane at once, and
    /// the longest times without a grant or an accepted write (any lane).
    fn windows(&self, calls: &[Call], report: &mut RunReport) {
        let mut held: BTreeMap<usize, (u32, u64)> = BTreeMap::new();
        let mut intervals: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
        let mut grants = Vec::new();
        for (client, at, event) in &self.events {
            match event {
                Event::Grant(lane, _) => {
                    report.grants += 1;
                    grants.push(*at);
                    if let Some((l, start)) = held.insert(*client, (*lane, *at)) {
                        intervals.entry(l).or_default().push((start, *at));
                    }
                }
                Event::Release(..) => {
                    if let Some((l, start)) = held.remove(client) {
                        intervals.entry(l).or_default().push((start, *at));
                    }
                }
                Event::AcquireFailed(_) => report.acquire_failures += 1,
                Event::Clock(secs) => {
                    let real = (self.wall_minus_monotonic + i128::from(*at)) as f64 / 1e9;
                    let off = (*secs as f64 - real) / 3600.0;
                    if off.abs() > 1.0 / 60.0 {
                        let e = report.clock_skew.entry(*client).or_insert((off, off));
                        *e = (e.0.min(off), e.1.max(off));
                    }
                }
                _ => {}
            }
        }
        for (lane, start) in held.into_values() {
            intervals
                .entry(lane)
                .or_default()
                .push((start, start.max(self.span.1)));
        }
        let windows: BTreeMap<u32, Vec<(u64, u64)>> = intervals
            .iter()
            .map(|(lane, i)| (*lane, overlap_windows(i)))
            .collect();
        report.overlaps = windows.values().map(Vec::len).sum();
        report.longest_overlap = windows
            .values()
            .flatten()
            .map(|(s, e)| Duration::from_nanos(e - s))
            .max()
            .unwrap_or_default();
        for c in calls {
            let lane = windows.get(&c.lane).map_or(&[][..], Vec::as_slice);
            if lane.iter().any(|(s, e)| (*s..*e).contains(&c.start)) {
                match c.outcome {
                    Some(Event::Ok) => report.overlap_calls.0 += 1,
                    Some(Event::Stale(_)) => report.overlap_calls.1 += 1,
                    _ => {}
                }
            }
        }
        report.longest_without_grant = longest_gap(grants, self.span);
        let accepts = calls
            .iter()
            .filter(|c| c.outcome == Some(Event::Ok))
            .map(|c| c.end)
            .collect();
        report.longest_without_accept = longest_gap(accepts, self.span);
        for fault in &self.faults {
            *report.faults.entry(fault.kind.clone()).or_default() += 1;
        }
    }
}
