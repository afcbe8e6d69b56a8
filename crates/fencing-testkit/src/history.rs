//! Recording fenced operations and checking them against the contract, and
//! the randomized history checker that drives issuer + store together.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fencing_core::{Error, FencedStore, FencingToken, LeaseRequest, TokenIssuer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What a recorded operation was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// `put`.
    Put,
    /// `fence`.
    Fence,
}

/// How a recorded operation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted by the store.
    Accepted,
    /// Refused as stale; the mark the store named.
    Refused {
        /// The `current` token of the [`Error::StaleToken`].
        current: FencingToken,
    },
    /// Any other error (does not take part in the check).
    Failed(String),
}

/// One fenced operation, with the real-time interval it ran in.
#[derive(Clone, Debug)]
pub struct Op {
    /// Which client ran it.
    pub client: usize,
    /// Put or fence.
    pub kind: OpKind,
    /// The token presented.
    pub token: FencingToken,
    /// The value written (puts).
    pub value: Bytes,
    /// When the call started.
    pub started: Instant,
    /// When it returned.
    pub finished: Instant,
    /// Its outcome.
    pub outcome: Outcome,
}

/// A thread-safe log of operations on one key.
#[derive(Clone, Debug, Default)]
pub struct History {
    ops: Arc<Mutex<Vec<Op>>>,
}

/// Counts from a checked history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Operations recorded.
    pub operations: usize,
    /// Accepted by the store.
    pub accepted: usize,
    /// Refused as stale.
    pub refused: usize,
    /// Failed with another error.
    pub failed: usize,
    /// Contract violations found (must be empty).
    pub violations: Vec<String>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs one put through `store` and records it.
    pub async fn put(
        &self,
        store: &dyn FencedStore,
        client: usize,
        key: &str,
        value: Bytes,
        token: FencingToken,
    ) -> Result<(), Error> {
        let started = Instant::now();
        let result = store.put(key, value.clone(), token).await;
        self.record(client, OpKind::Put, token, value, started, &result);
        result
    }

    /// Runs one fence through `store` and records it.
    pub async fn fence(
        &self,
        store: &dyn FencedStore,
        client: usize,
        key: &str,
        token: FencingToken,
    ) -> Result<FencingToken, Error> {
        let started = Instant::now();
        let result = store.fence(key, token).await;
        self.record(client, OpKind::Fence, token, Bytes::new(), started, &result);
        result
    }

    fn record<T>(
        &self,
        client: usize,
        kind: OpKind,
        token: FencingToken,
        value: Bytes,
        started: Instant,
        result: &Result<T, Error>,
    ) {
        let outcome = match result {
            Ok(_) => Outcome::Accepted,
            Err(Error::StaleToken { current, .. }) => Outcome::Refused { current: *current },
            Err(e) => Outcome::Failed(e.to_string()),
        };
        let op = Op {
            client,
            kind,
            token,
            value,
            started,
            finished: Instant::now(),
            outcome,
        };
        self.push(op);
    }

    /// Records an operation run elsewhere (another process, say), with the
    /// interval and outcome it observed.
    pub fn push(&self, op: Op) {
        self.ops.lock().expect("poisoned").push(op);
    }

    /// A copy of the operations so far.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().expect("poisoned").clone()
    }

    /// Reads `key`'s final value and mark from `store` and [`check`]s the
    /// history against them.
    ///
    /// # Panics
    /// If the store cannot be read.
    ///
    /// [`check`]: Self::check
    pub async fn check_final(&self, store: &dyn FencedStore, key: &str) -> Tally {
        let final_state = (
            store.get(key).await.expect("final get"),
            store.mark(key).await.expect("final mark"),
        );
        self.check(Some(final_state))
    }

    /// Checks the history against the store contract:
    /// - no accepted operation carries a token below one whose acceptance
    ///   had completed before it started (no stale accept);
    /// - every refusal was truly stale: the mark it named is above the token
    ///   presented and was set by an accepted operation that had started
    ///   before the refusal returned;
    /// - the final state (if given) holds the highest accepted token, and a
    ///   value that an accepted put at that token wrote.
    pub fn check(
        &self,
        final_state: Option<(Option<fencing_core::Versioned>, Option<FencingToken>)>,
    ) -> Tally {
        let ops = self.ops();
        let mut tally = Tally {
            operations: ops.len(),
            ..Tally::default()
        };
        let accepted: Vec<&Op> = ops
            .iter()
            .filter(|o| o.outcome == Outcome::Accepted)
            .collect();
        tally.accepted = accepted.len();

        // Stale accepts: sweep accepted ops by start time, keeping the highest
        // token among accepted ops that had finished before.
        let mut by_finish = accepted.clone();
        by_finish.sort_by_key(|o| o.finished);
        let mut by_start = accepted.clone();
        by_start.sort_by_key(|o| o.started);
        let mut done = 0;
        let mut highest: Option<&Op> = None;
        for op in &by_start {
            while done < by_finish.len() && by_finish[done].finished < op.started {
                let candidate = by_finish[done];
                if highest.is_none_or(|h| candidate.token > h.token) {
                    highest = Some(candidate);
                }
                done += 1;
            }
            if let Some(h) = highest.filter(|h| op.token < h.token) {
                tally.violations.push(format!(
                    "stale accept: client {} {:?} with token {} was accepted after client {}'s {:?} with token {} had been accepted",
                    op.client, op.kind, op.token, h.client, h.kind, h.token
                ));
            }
        }

        for op in &ops {
            match &op.outcome {
                Outcome::Refused { current } => {
                    tally.refused += 1;
                    if *current <= op.token {
                        tally.violations.push(format!(
                            "false refusal: client {} token {} refused, but the store named mark {}",
                            op.client, op.token, current
                        ));
                    } else if !accepted
                        .iter()
                        .any(|a| a.token == *current && a.started <= op.finished)
                    {
                        tally.violations.push(format!(
                            "invented mark: client {} token {} refused with mark {}, which no accepted operation had set",
                            op.client, op.token, current
                        ));
                    }
                }
                Outcome::Failed(_) => tally.failed += 1,
                Outcome::Accepted => {}
            }
        }

        if let Some((value, mark)) = final_state {
            let top = accepted.iter().map(|o| o.token).max();
            if mark != top {
                tally.violations.push(format!(
                    "final mark is {mark:?}, but the highest accepted token is {top:?}"
                ));
            }
            let last_put_token = accepted
                .iter()
                .filter(|o| o.kind == OpKind::Put)
                .map(|o| o.token)
                .max();
            match (value, last_put_token) {
                (Some(v), Some(t)) => {
                    let written = accepted
                        .iter()
                        .any(|o| o.kind == OpKind::Put && o.token == t && o.value == v.value);
                    if !written {
                        tally.violations.push(format!(
                            "final value {:?} was not written by any accepted put at the highest put token {t}",
                            String::from_utf8_lossy(&v.value)
                        ));
                    }
                    if Some(v.token) != mark {
                        tally.violations.push(format!(
                            "get returned token {} but mark() returned {mark:?}",
                            v.token
                        ));
                    }
                }
                (None, Some(t)) => tally.violations.push(format!(
                    "value lost: puts up to token {t} were accepted but the key is empty"
                )),
                (Some(v), None) => tally.violations.push(format!(
                    "value {:?} present though no put was accepted",
                    String::from_utf8_lossy(&v.value)
                )),
                (None, None) => {}
            }
        }
        tally
    }
}

/// The randomized history checker's parameters.
#[derive(Clone, Debug)]
pub struct HistoryConfig {
    /// Seeds every random choice (pauses, fences, extra writes).
    pub seed: u64,
    /// Concurrent clients.
    pub clients: usize,
    /// Lease cycles per client.
    pub cycles_per_client: usize,
    /// Lease TTL; a paused client sleeps past it.
    pub ttl: Duration,
    /// Chance that a client pauses past its TTL before writing.
    pub pause_probability: f64,
    /// How long an acquire may wait.
    pub acquire_wait: Duration,
}

impl HistoryConfig {
    /// A short run: 4 clients × 8 cycles, a pause in one cycle of five.
    pub fn quick(seed: u64, ttl: Duration) -> Self {
        Self {
            seed,
            clients: 4,
            cycles_per_client: 8,
            ttl,
            pause_probability: 0.2,
            acquire_wait: ttl * 40 + Duration::from_secs(10),
        }
    }

    /// The long mode: 16 clients × 400 cycles (over 10,000 operations), a
    /// pause past the TTL in one cycle of 200.
    pub fn long(seed: u64, ttl: Duration) -> Self {
        Self {
            clients: 16,
            cycles_per_client: 400,
            pause_probability: 0.005,
            ..Self::quick(seed, ttl)
        }
    }

    /// The seed from `FENCING_SEED` if set, else a random one (printed by
    /// the report so a failure can be replayed).
    pub fn seed_from_env() -> u64 {
        std::env::var("FENCING_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| rand::rng().random())
    }
}

/// What a history run did.
#[derive(Clone, Debug)]
pub struct HistoryReport {
    /// `issuer × store`.
    pub pair: String,
    /// The seed that replays the random choices.
    pub seed: u64,
    /// Counts and violations.
    pub tally: Tally,
    /// Acquires that failed (timeouts, backend errors).
    pub acquire_errors: Vec<String>,
}

impl HistoryReport {
    /// Panics naming the pair and the seed if any violation was found, or if
    /// the run accepted nothing (a history that proves nothing).
    pub fn assert_clean(&self) {
        assert!(
            self.tally.violations.is_empty(),
            "history check failed for {} with seed {} (replay with FENCING_SEED={}):\n  {}",
            self.pair,
            self.seed,
            self.seed,
            self.tally.violations.join("\n  ")
        );
        assert!(
            self.tally.accepted > 0,
            "history for {} (seed {}) accepted no write: {:?}; acquire errors: {:?}",
            self.pair,
            self.seed,
            self.tally,
            self.acquire_errors
        );
    }
}

impl std::fmt::Display for HistoryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: seed {} operations {} accepted {} refused {} failed {} violations {}",
            self.pair,
            self.seed,
            self.tally.operations,
            self.tally.accepted,
            self.tally.refused,
            self.tally.failed,
            self.tally.violations.len()
        )
    }
}

/// A [`HistoryConfig::quick`] run at `ttl` with the seed of
/// [`HistoryConfig::seed_from_env`]: prints the report (with the seed that
/// replays it), panics on any violation, and returns the report for further
/// checks. The `history_checker_finds_no_stale_accept` test of every suite.
pub async fn quick_check(
    issuer: Arc<dyn TokenIssuer>,
    store: Arc<dyn FencedStore>,
    ttl: Duration,
) -> HistoryReport {
    let config = HistoryConfig::quick(HistoryConfig::seed_from_env(), ttl);
    let report = run_history(issuer, store, &config).await;
    println!("{report}");
    report.assert_clean();
    report
}

/// Runs `config.clients` clients that loop acquire → maybe pause past the
/// TTL → maybe fence → write → release against one resource and one key,
/// then checks the whole history.
pub async fn run_history(
    issuer: Arc<dyn TokenIssuer>,
    store: Arc<dyn FencedStore>,
    config: &HistoryConfig,
) -> HistoryReport {
    let prefix = crate::unique_prefix();
    let resource = format!("{prefix}/history");
    let key = format!("{prefix}/history-key");
    let history = History::new();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for client in 0..config.clients {
        let (issuer, store, history, errors) = (
            issuer.clone(),
            store.clone(),
            history.clone(),
            errors.clone(),
        );
        let (resource, key, config) = (resource.clone(), key.clone(), config.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(
                config.seed ^ (client as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            );
            for cycle in 0..config.cycles_per_client {
                let request = LeaseRequest::new(resource.clone(), config.ttl);
                let lease = match issuer.acquire(&request, config.acquire_wait).await {
                    Ok(lease) => lease,
                    Err(e) => {
                        errors
                            .lock()
                            .expect("poisoned")
                            .push(format!("client {client}: {e}"));
                        continue;
                    }
                };
                let pause = rng.random_bool(config.pause_probability);
                let fence_first = rng.random_bool(0.25);
                let writes = rng.random_range(1..=2);
                if fence_first {
                    let _ = history.fence(&*store, client, &key, lease.token()).await;
                }
                if pause {
                    // The zombie: asleep while its lease runs out.
                    tokio::time::sleep(config.ttl + config.ttl / 2).await;
                }
                for w in 0..writes {
                    let value = Bytes::from(format!(
                        "client {client} cycle {cycle} write {w} token {}",
                        lease.token()
                    ));
                    let _ = history
                        .put(&*store, client, &key, value, lease.token())
                        .await;
                }
                // Losing the lease here is expected after a pause.
                let _ = issuer.release(&lease).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("history client panicked");
    }
    let tally = history.check_final(&*store, &key).await;
    let acquire_errors = errors.lock().expect("poisoned").clone();
    HistoryReport {
        pair: format!("{} × {}", issuer.name(), store.name()),
        seed: config.seed,
        tally,
        acquire_errors,
    }
}
