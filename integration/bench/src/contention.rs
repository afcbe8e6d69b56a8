//! Many writers on one key: fenced against plain, in alternating rounds.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::BoxResult;
use crate::measure::{RatioKind, Row, Summary};

/// What one write came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Applied.
    Written,
    /// Refused: a higher token had been accepted (fenced side only).
    Stale,
    /// The store's compare-and-swap loop gave up after its attempts
    /// (object stores, fenced side only).
    GaveUp,
}

/// What a fenced write under contention came to.
pub(crate) fn outcome(result: fencing_tokens::Result<()>) -> BoxResult<Outcome> {
    match result {
        Ok(()) => Ok(Outcome::Written),
        Err(fencing_tokens::Error::StaleToken { .. }) => Ok(Outcome::Stale),
        Err(fencing_tokens::Error::Contention { .. }) => Ok(Outcome::GaveUp),
        Err(e) => Err(e.into()),
    }
}

/// A boxed write.
pub(crate) type WriteFuture = Pin<Box<dyn Future<Output = BoxResult<Outcome>> + Send>>;

/// One writer: called with the token of each write (the plain side ignores
/// it).
pub(crate) type Writer = Arc<dyn Fn(u64) -> WriteFuture + Send + Sync>;

/// How much contention to make.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Load {
    pub(crate) writers: usize,
    pub(crate) ops_per_writer: usize,
    pub(crate) rounds: usize,
}

#[derive(Default)]
struct Side {
    latencies: Vec<Duration>,
    elapsed: Duration,
    written: usize,
    stale: usize,
    gave_up: usize,
}

impl Side {
    fn ops(&self) -> usize {
        self.written + self.stale + self.gave_up
    }

    fn per_second(&self) -> f64 {
        self.ops() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Goodput: accepted writes per second.
    fn accepted_per_second(&self) -> f64 {
        self.written as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs `load.rounds` rounds of each side, alternating which goes first;
/// in a round, `load.writers` tasks each make `load.ops_per_writer` writes
/// as fast as they can. Every fenced write takes the next token of one
/// shared counter, as if each were made under a fresh lease: a write that
/// reaches the store after a later one is refused. `requests`, if given,
/// counts every request the fenced writers make (the plain side makes one
/// per write by construction).
pub(crate) async fn run(
    backend: &'static str,
    payload: usize,
    load: Load,
    fenced: &[Writer],
    plain: &[Writer],
    requests: Option<&AtomicU64>,
) -> BoxResult<Row> {
    let requests_before = requests.map(|r| r.load(Ordering::Relaxed));
    let tokens = Arc::new(AtomicU64::new(1));
    let mut sides = [Side::default(), Side::default()];
    for round in 0..load.rounds {
        for which in [round % 2, 1 - round % 2] {
            let writers = if which == 0 { fenced } else { plain };
            let side = &mut sides[which];
            let started = Instant::now();
            let mut tasks = JoinSet::new();
            for w in 0..load.writers {
                let write = writers[w % writers.len()].clone();
                let tokens = tokens.clone();
                let ops = load.ops_per_writer;
                tasks.spawn(async move {
                    let mut seen = Vec::with_capacity(ops);
                    for _ in 0..ops {
                        let token = tokens.fetch_add(1, Ordering::SeqCst);
                        let t = Instant::now();
                        let outcome = write(token).await?;
                        seen.push((t.elapsed(), outcome));
                    }
                    BoxResult::Ok(seen)
                });
            }
            while let Some(done) = tasks.join_next().await {
                for (took, outcome) in done?? {
                    side.latencies.push(took);
                    match outcome {
                        Outcome::Written => side.written += 1,
                        Outcome::Stale => side.stale += 1,
                        Outcome::GaveUp => side.gave_up += 1,
                    }
                }
            }
            side.elapsed += started.elapsed();
        }
    }
    let [f, p] = sides;
    let (fenced_rate, plain_rate) = (f.per_second(), p.per_second());
    let mut notes = format!(
        "{} writers × {} writes × {} rounds a side; {:.0} vs {:.0} writes/s; stale refusals {} of {}",
        load.writers,
        load.ops_per_writer,
        load.rounds,
        fenced_rate,
        plain_rate,
        f.stale,
        f.ops()
    );
    notes.push_str(&format!(
        "; goodput (accepted writes/s) {:.0} vs {:.0}",
        f.accepted_per_second(),
        p.accepted_per_second()
    ));
    if let (Some(requests), Some(before)) = (requests, requests_before) {
        let made = requests.load(Ordering::Relaxed) - before;
        notes.push_str(&format!(
            "; requests per fenced write {:.2} ({made} for {} writes; plain: 1)",
            made as f64 / f.ops().max(1) as f64,
            f.ops()
        ));
    }
    if f.gave_up > 0 {
        notes.push_str(&format!(
            "; {} gave up after the store's retries",
            f.gave_up
        ));
    }
    Ok(Row {
        backend,
        operation: format!("{} writers, one key", load.writers),
        payload: Some(payload),
        fenced: Summary::of(&f.latencies),
        plain: Summary::of(&p.latencies),
        ratio: plain_rate / fenced_rate,
        kind: RatioKind::Throughput,
        target: None,
        trips: None,
        notes,
    })
}
