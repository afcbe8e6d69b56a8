//! What a nemesis run saw, and its verdict.
//!
//! Clients print events stamped with the machine's real monotonic clock
//! (read by a raw system call, so `faketime` cannot skew it), the parent
//! adds the faults it injected, and [`Timeline::check`] turns it into a
//! [`RunReport`]: the history checker's verdict (no stale accept, no false
//! refusal) plus the windows a run is judged by — two holders at once, and
//! the longest time without a grant or an accepted write.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use fencing_testkit::history::OpKind;
use fencing_tokens::{FencingToken, Versioned};

/// CLOCK_MONOTONIC in nanoseconds, read through the vDSO by rustix:
/// LD_PRELOAD (libfaketime) intercepts libc's `clock_gettime`, not this.
pub fn real_monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let nanos = i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec);
    u64::try_from(nanos).expect("the monotonic clock is positive")
}

/// The value client `client` writes in its `seq`th put under `token`.
pub fn value_of(client: u64, token: u64, seq: u64) -> Bytes {
    Bytes::from(format!("client {client} token {token} put {seq}"))
}

/// One line a client printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Acquired lane `.0`'s lock, with token `.1`.
    Grant(u32, u64),
    /// An acquire failed (timeout, unreachable service).
    AcquireFailed(String),
    /// About to put (lane, token, sequence number).
    Put(u32, u64, u64),
    /// About to fence (lane, token).
    Fence(u32, u64),
    /// The last call was accepted.
    Ok,
    /// The last call was refused as stale; the mark the store named.
    Stale(u64),
    /// The last call failed otherwise (its outcome may be unknown).
    Err(String),
    /// About to release (lane, token).
    Release(u32, u64),
    /// The client's wall clock (Unix seconds), as its process reads it.
    Clock(i64),
}

impl Event {
    /// Parses `NS EVENT ARGS…`.
    pub fn parse(line: &str) -> Option<(u64, Self)> {
        let mut words = line.splitn(3, ' ');
        let at = words.next()?.parse().ok()?;
        let kind = words.next()?;
        let rest = words.next().unwrap_or("");
        let nums: Vec<u64> = rest.split(' ').map_while(|n| n.parse().ok()).collect();
        let lane = || nums.first().and_then(|l| u32::try_from(*l).ok());
        let event = match (kind, nums.as_slice()) {
            ("grant", [_, token]) => Self::Grant(lane()?, *token),
            ("acquire-failed", _) => Self::AcquireFailed(rest.to_owned()),
            ("put", [_, token, seq]) => Self::Put(lane()?, *token, *seq),
            ("fence", [_, token]) => Self::Fence(lane()?, *token),
            ("ok", _) => Self::Ok,
            ("stale", [mark]) => Self::Stale(*mark),
            ("err", _) => Self::Err(rest.to_owned()),
            ("release", [_, token]) => Self::Release(lane()?, *token),
            ("clock", _) => Self::Clock(rest.trim().parse().ok()?),
            _ => return None,
        };
        Some((at, event))
    }
}

/// A fault the nemesis held from `start` to `end` (ns).
#[derive(Clone, Debug)]
pub struct FaultSpan {
    /// Its kind, e.g. `partition-leader`.
    pub kind: String,
    /// What exactly, e.g. `etcd-2 (leader) | etcd-1 etcd-3`.
    pub detail: String,
    /// When it was injected.
    pub start: u64,
    /// When it was healed.
    pub end: u64,
}

/// Events of every client and the faults, in one clock.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// (client, ns, event), in the order received.
    pub events: Vec<(usize, u64, Event)>,
    /// The faults.
    pub faults: Vec<FaultSpan>,
    /// When the run started and ended (ns).
    pub span: (u64, u64),
    /// The real wall clock minus the monotonic one, in ns (to tell how far
    /// a client's wall clock was off).
    pub wall_minus_monotonic: i128,
}

impl Timeline {
    /// An empty timeline starting now.
    pub fn start() -> Self {
        let mono = real_monotonic_ns();
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_nanos();
        let wall = i128::try_from(wall).expect("a wall clock within i128");
        Self {
            span: (mono, mono),
            wall_minus_monotonic: wall - i128::from(mono),
            ..Self::default()
        }
    }
}

/// A lane's key after the run: its value and mark.
pub type FinalState = (Option<Versioned>, Option<FencingToken>);

/// One fenced call with its outcome (`None`: no answer before the run ended).
struct Call {
    client: usize,
    lane: u32,
    kind: OpKind,
    token: u64,
    seq: u64,
    start: u64,
    end: u64,
    outcome: Option<Event>,
}

/// A run's verdict and the numbers it is judged by.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// `issuer × store` and the variant, e.g. `etcd-cluster × postgres`.
    pub label: String,
    /// The seed that replays the schedule.
    pub seed: u64,
    /// How long the clients ran.
    pub duration: Duration,
    /// Fenced calls (puts and fences).
    pub operations: usize,
    /// Accepted by the store.
    pub accepted: usize,
    /// Refused as stale.
    pub refused: usize,
    /// Failed otherwise, or unanswered at the end.
    pub failed: usize,
    /// Leases granted.
    pub grants: usize,
    /// Acquires that failed.
    pub acquire_failures: usize,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, usize>,
    /// Accepted writes below a mark already accepted (must be 0).
    pub stale_accepts: usize,
    /// Every contract violation, stale accepts included (must be empty).
    pub violations: Vec<String>,
    /// Windows in which two or more clients held a lease they believed live.
    pub overlaps: usize,
    /// The longest such window.
    pub longest_overlap: Duration,
    /// Calls started inside such windows: (accepted, refused).
    pub overlap_calls: (usize, usize),
    /// The longest time without a grant.
    pub longest_without_grant: Duration,
    /// The longest time without an accepted write.
    pub longest_without_accept: Duration,
    /// Per client whose wall clock was off by over a minute: the least and
    /// the most it was off, in hours (what `faketime` did, as measured).
    pub clock_skew: BTreeMap<usize, (f64, f64)>,
}

impl RunReport {
    /// Panics with the report, the seed and where the timeline was written
    /// if the run broke the contract or proved nothing (no refusal means no
    /// zombie ever reached the store).
    pub fn assert_clean(&self, evidence: &str) {
        assert!(
            self.violations.is_empty(),
            "{self}\nviolations (replay with FENCING_SEED={}; timeline: {evidence}):\n  {}",
            self.seed,
            self.violations.join("\n  ")
        );
        assert!(
            self.accepted > 0 && self.grants > 1,
            "{self}\nthe run accepted no write or granted at most once: it proves nothing (timeline: {evidence})"
        );
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

impl std::fmt::Display for RunReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        write!(
            f,
            "{} (seed {}): {} of clients; {} fenced calls: {} accepted, {} refused as stale, {} failed; \
             {} grants, {} acquires failed; faults: {}; stale accepts {}; two holders at once: {} windows \
             (longest {}; calls in them {} accepted, {} refused); longest without a grant {}, without an \
             accepted write {}",
            self.label,
            self.seed,
            secs(self.duration),
            self.operations,
            self.accepted,
            self.refused,
            self.failed,
            self.grants,
            self.acquire_failures,
            if faults.is_empty() {
                "none".to_owned()
            } else {
                faults.join(", ")
            },
            self.stale_accepts,
            self.overlaps,
            secs(self.longest_overlap),
            self.overlap_calls.0,
            self.overlap_calls.1,
            secs(self.longest_without_grant),
            secs(self.longest_without_accept),
        )?;
        for (client, (low, high)) in &self.clock_skew {
            write!(f, "; client {} clock off {low:+.2} h", client + 1)?;
            if (high - low).abs() > 0.01 {
                write!(f, " to {high:+.2} h")?;
            }
        }
        Ok(())
    }
}

impl Timeline {
    fn calls(&self) -> Vec<Call> {
        let mut open: BTreeMap<usize, Call> = BTreeMap::new();
        let mut calls = Vec::new();
        for (client, at, event) in &self.events {
            let (client, at) = (*client, *at);
            let started = match event {
                Event::Put(lane, token, seq) => Some((*lane, OpKind::Put, *token, *seq)),
                Event::Fence(lane, token) => Some((*lane, OpKind::Fence, *token, 0)),
                _ => None,
            };
            if let Some((lane, kind, token, seq)) = started {
                if let Some(unanswered) = open.remove(&client) {
                    calls.push(unanswered);
                }
                let call = Call {
                    client,
                    lane,
                    kind,
                    token,
                    seq,
                    start: at,
                    end: at,
                    outcome: None,
                };
                open.insert(client, call);
            } else if matches!(event, Event::Ok | Event::Stale(_) | Event::Err(_))
                && let Some(mut call) = open.remove(&client)
            {
                call.end = at;
                call.outcome = Some(event.clone());
                calls.push(call);
            }
        }
        calls.extend(open.into_values().map(|mut c| {
            c.end = c.start.max(self.span.1);
            c
        }));
        calls
    }

    /// The lanes (independent locks and keys) the clients used.
    pub fn lanes(&self) -> std::collections::BTreeSet<u32> {
        self.events
            .iter()
            .filter_map(|(_, _, e)| match e {
                Event::Grant(lane, _) => Some(*lane),
                _ => None,
            })
            .collect()
    }
}

mod check;
mod svg;
#[cfg(test)]
mod tests;
