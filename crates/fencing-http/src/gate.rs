//! The in-process gate: per resource, a request's store check waits until
//! every lower-token request already admitted on this instance has finished.
//!
//! Each request for a key is in one phase: *waiting* (for the gate),
//! *checking* (its `fence` is at the store) or *running* (admitted; the inner
//! service has it). A request with token `t` leaves *waiting* when
//! 1. no request with a token below `t` is *checking* or *running*: a lower
//!    token admitted before `t` must be finished before `t` is admitted, and
//! 2. no request with a token above `t` is *waiting* or *checking*: a higher
//!    token goes first, so a stream of old tokens cannot starve a new holder
//!    (the old ones then reach the store and are refused as stale).
//!
//! Equal tokens do not wait for each other: one holder may have many
//! requests in flight. The highest waiting token can always move (it waits
//! only for requests that finish on their own), so the gate cannot deadlock;
//! the wait is bounded by the layer's time limit anyway.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound::{Excluded, Unbounded};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

/// How many requests per token are in one phase.
type Counts = BTreeMap<u64, usize>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Waiting,
    Checking,
    Running,
}

/// One key's requests, by phase.
#[derive(Debug, Default)]
struct Slot {
    notify: Arc<Notify>,
    waiting: Counts,
    checking: Counts,
    running: Counts,
}

impl Slot {
    fn counts(&mut self, phase: Phase) -> &mut Counts {
        match phase {
            Phase::Waiting => &mut self.waiting,
            Phase::Checking => &mut self.checking,
            Phase::Running => &mut self.running,
        }
    }

    fn add(&mut self, phase: Phase, token: u64) {
        *self.counts(phase).entry(token).or_default() += 1;
    }

    fn remove(&mut self, phase: Phase, token: u64) {
        let counts = self.counts(phase);
        if let Some(n) = counts.get_mut(&token) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&token);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.checking.is_empty() && self.running.is_empty()
    }

    /// Rules 1 and 2 of the module docs.
    fn may_check(&self, token: u64) -> bool {
        let below = |c: &Counts| c.range(..token).next().is_none();
        let above = |c: &Counts| c.range((Excluded(token), Unbounded)).next().is_none();
        below(&self.checking)
            && below(&self.running)
            && above(&self.waiting)
            && above(&self.checking)
    }
}

/// The gate of one layer (shared by every service it made).
#[derive(Debug)]
pub(crate) struct Gate {
    max_wait: Duration,
    slots: Mutex<HashMap<String, Slot>>,
}

/// The gate's wait ran out.
#[derive(Debug)]
pub(crate) struct Elapsed(pub(crate) Duration);

impl Gate {
    pub(crate) fn new(max_wait: Duration) -> Self {
        Self {
            max_wait,
            slots: Mutex::default(),
        }
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        // The maps stay consistent across a panic (each change is one step).
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `token` may be checked at the store for `key`; the pass
    /// is then *checking*. Dropping it (refused, failed, cancelled) lets the
    /// others move.
    pub(crate) async fn enter(self: &Arc<Self>, key: &str, token: u64) -> Result<Pass, Elapsed> {
        let notify = {
            let mut slots = self.slots();
            let slot = slots.entry(key.to_owned()).or_default();
            slot.add(Phase::Waiting, token);
            slot.notify.clone()
        };
        let mut pass = Pass {
            gate: self.clone(),
            key: key.to_owned(),
            token,
            phase: Phase::Waiting,
        };
        let deadline = tokio::time::Instant::now() + self.max_wait;
        loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if pass.advance(Phase::Checking, true) {
                return Ok(pass);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(Elapsed(self.max_wait)); // `pass` drops: no longer waiting
            }
        }
    }
}

/// A request's place in the gate; leaves it on drop.
#[derive(Debug)]
pub(crate) struct Pass {
    gate: Arc<Gate>,
    key: String,
    token: u64,
    phase: Phase,
}

impl Pass {
    /// Admitted: the inner service runs. Higher tokens wait until this drops.
    pub(crate) fn running(mut self) -> Self {
        self.advance(Phase::Running, false);
        self
    }

    /// Moves to `to` (if `checked`, only when the rules allow); wakes the others.
    fn advance(&mut self, to: Phase, checked: bool) -> bool {
        let mut slots = self.gate.slots();
        let Some(slot) = slots.get_mut(&self.key) else {
            return false;
        };
        if checked && !slot.may_check(self.token) {
            return false;
        }
        slot.remove(self.phase, self.token);
        slot.add(to, self.token);
        self.phase = to;
        slot.notify.notify_waiters();
        true
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        let mut slots = self.gate.slots();
        if let Some(slot) = slots.get_mut(&self.key) {
            slot.remove(self.phase, self.token);
            slot.notify.notify_waiters();
            if slot.is_empty() {
                slots.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate() -> Arc<Gate> {
        Arc::new(Gate::new(Duration::from_millis(200)))
    }

    #[tokio::test]
    async fn a_higher_token_waits_for_lower_ones_in_flight() {
        let gate = gate();
        let seven = gate.enter("k", 7).await.unwrap().running();
        let same = gate.enter("k", 7).await.unwrap().running(); // equal: no wait
        let eight = tokio::spawn({
            let gate = gate.clone();
            async move { gate.enter("k", 8).await.map(Pass::running) }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!eight.is_finished(), "8 must wait while 7 runs");
        drop(seven);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!eight.is_finished(), "8 must wait for every 7");
        drop(same);
        let eight = eight.await.unwrap().unwrap();
        // Another key is not held up.
        drop(gate.enter("other", 1).await.unwrap());
        drop(eight);
        assert!(gate.slots().is_empty(), "slots are freed");
    }

    #[tokio::test]
    async fn a_lower_token_waits_for_a_higher_one_to_be_checked() {
        let gate = gate();
        let running = gate.enter("k", 7).await.unwrap().running();
        let eight = tokio::spawn({
            let gate = gate.clone();
            async move { gate.enter("k", 8).await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let late = tokio::spawn({
            let gate = gate.clone();
            async move { gate.enter("k", 7).await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!late.is_finished(), "a new 7 does not overtake a waiting 8");
        drop(running);
        eight.await.unwrap().unwrap();
        late.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn the_wait_is_bounded() {
        let gate = gate();
        let _seven = gate.enter("k", 7).await.unwrap().running();
        let err = gate.enter("k", 8).await.unwrap_err();
        assert_eq!(err.0, Duration::from_millis(200));
        assert_eq!(
            gate.slots()["k"].waiting.len(),
            0,
            "a timed-out request leaves"
        );
    }
}
