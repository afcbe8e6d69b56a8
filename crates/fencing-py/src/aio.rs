//! `fencing._native.Completions`: awaitable calls that run on the module's
//! Tokio runtime, with no Rust thread ever calling into Python.
//!
//! A call started from an event loop is spawned on the runtime and given
//! an id; when it ends, its answer (still a Rust value) is queued and one
//! byte is written to a socket whose other end the loop watches
//! (`loop.add_reader`). The loop's reader then calls [`Completions::drain`]
//! in its own thread, with the GIL: the answers become Python objects
//! there and resolve their futures (`fencing.aio`). Tokio threads never
//! take the GIL, so nothing can hang on it at interpreter shutdown. Once
//! the loop's `Completions` is gone, answers are dropped as they come (a
//! lease in one is released by its drop).

use std::collections::HashMap;
use std::future::Future;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fencing_tokens::Result;
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use tokio::sync::Notify;

use crate::errors;
use crate::runtime::{InProcess, runtime};

/// How long a cancelled taking (an acquire, an `async with`) may still run
/// to finish a request in flight, so that a lease granted meanwhile is
/// given back at once rather than left to its TTL. A taking still waiting
/// for a holder after that is dropped.
pub(crate) const TAKING_GRACE: Duration = Duration::from_secs(2);

/// An answer waiting for the loop's thread to turn it into Python.
type Answer = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// Gives back what a cancelled taking got.
pub(crate) type GiveBack<T> = Box<dyn FnOnce(T) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// What a taking's cancellation settles at once, on the loop's thread (a
/// lock free to be taken again), before the taking has stopped.
pub(crate) type GiveUp = Box<dyn FnOnce() + Send>;

/// How a running call is stopped.
enum Stop {
    /// Dropped at once.
    Abort(tokio::task::AbortHandle),
    /// Told to stop: it finishes a request in flight first.
    Notify(Arc<Notify>),
    /// Not stopped: it runs to its end (a release).
    Detached,
    /// Being spawned (the GIL is held until its handle is in place).
    Spawning,
}

/// What the runtime's tasks share with the loop.
struct Shared {
    /// `None` once the loop's `Completions` is gone.
    answers: Mutex<Option<Vec<(u64, Answer)>>>,
    running: Mutex<HashMap<u64, Stop>>,
    /// What a taking's cancellation settles, kept until its answer is
    /// drained: cancelled after it answered but before the loop read the
    /// answer, it must still settle (the lock is free for a retry at once).
    give_ups: Mutex<HashMap<u64, GiveUp>>,
    /// Written one byte per answer (a full buffer is fine: the loop
    /// drains every queued answer at each wake-up).
    wake: UnixStream,
}

fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn answer(&self, id: u64, answer: Answer) {
        locked(&self.running).remove(&id);
        let mut answers = locked(&self.answers);
        let Some(queue) = answers.as_mut() else {
            // Nobody will read it: dropped here, outside the lock.
            drop(answers);
            drop(answer);
            return;
        };
        queue.push((id, answer));
        drop(answers);
        // WouldBlock: bytes are pending already, so the loop will drain.
        let _ = (&self.wake).write(&[1]);
    }
}

/// One event loop's calls in flight: `fencing.aio` makes one per loop and
/// watches [`fileno`](Self::fileno).
#[pyclass(frozen, module = "fencing._native")]
pub(crate) struct Completions {
    shared: InProcess<Arc<Shared>>,
    /// The end the loop reads.
    woken: UnixStream,
    next: AtomicU64,
}

#[pymethods]
impl Completions {
    #[new]
    fn new() -> PyResult<Self> {
        let (woken, wake) = UnixStream::pair()
            .map_err(|e| errors::internal(format!("cannot make a socket pair: {e}")))?;
        for end in [&woken, &wake] {
            end.set_nonblocking(true)
                .map_err(|e| errors::internal(format!("cannot make a socket non-blocking: {e}")))?;
        }
        Ok(Self {
            shared: InProcess::new(Arc::new(Shared {
                answers: Mutex::new(Some(Vec::new())),
                running: Mutex::new(HashMap::new()),
                give_ups: Mutex::new(HashMap::new()),
                wake,
            })),
            woken,
            next: AtomicU64::new(1),
        })
    }

    /// The descriptor that becomes readable when answers are queued.
    fn fileno(&self) -> i32 {
        self.woken.as_raw_fd()
    }

    /// The answers queued since the last call: `(id, ok, value)`, the value
    /// being the call's result, or the exception it raised.
    fn drain(&self, py: Python<'_>) -> PyResult<Vec<(u64, bool, Py<PyAny>)>> {
        let mut sink = [0u8; 256];
        loop {
            match (&self.woken).read(&mut sink) {
                Ok(n) if n > 0 => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // Empty (WouldBlock), or closed.
                _ => break,
            }
        }
        let shared = self.shared.get("event loop's calls")?;
        let answers = locked(&shared.answers)
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        {
            let mut give_ups = locked(&shared.give_ups);
            for (id, _) in &answers {
                give_ups.remove(id);
            }
        }
        Ok(answers
            .into_iter()
            .map(|(id, answer)| match answer(py) {
                Ok(value) => (id, true, value),
                Err(raised) => (id, false, raised.into_value(py).into_any()),
            })
            .collect())
    }

    /// Stops the call `id` if it is still running (its future was
    /// cancelled). A taking finishes a request in flight first (at most
    /// [`TAKING_GRACE`]) and gives back what it got; a release runs to its
    /// end; anything else is dropped as a Rust future is, so what it sent
    /// may still be applied.
    /// It still answers (`CancelledError`).
    fn cancel(&self, id: u64) -> PyResult<()> {
        let shared = self.shared.get("event loop's calls")?;
        let stop = locked(&shared.running).remove(&id);
        let give_up = locked(&shared.give_ups).remove(&id);
        if let Some(give_up) = give_up {
            give_up();
        }
        match stop {
            Some(Stop::Abort(handle)) => handle.abort(),
            Some(Stop::Notify(notify)) => notify.notify_one(),
            Some(Stop::Detached | Stop::Spawning) | None => {}
        }
        Ok(())
    }

    /// How many calls are still running (not yet answered or cancelled).
    fn running(&self) -> PyResult<usize> {
        Ok(locked(&self.shared.get("event loop's calls")?.running).len())
    }
}

impl Drop for Completions {
    fn drop(&mut self) {
        if !self.shared.here() {
            return;
        }
        if let Ok(shared) = self.shared.get("event loop's calls") {
            // Taken out of the lock before they drop: a lease in one is
            // released by its drop.
            let unread = locked(&shared.answers).take();
            drop(unread);
        }
    }
}

impl Completions {
    /// Spawns `work` on the runtime; returns the id its answer will carry.
    /// Every call answers exactly once: with its outcome, `CancelledError`
    /// once cancelled, or an internal error if it panicked.
    pub(crate) fn start<T, F>(&self, work: F) -> PyResult<u64>
    where
        T: for<'py> IntoPyObject<'py> + Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        self.start_as(work, Stop::Abort)
    }

    /// [`start`](Self::start) for a call that gives a lease back: it is not
    /// stopped when its caller is cancelled (a release cut off in flight
    /// would leave the resource held until its TTL), and runs to its end.
    pub(crate) fn start_detached<T, F>(&self, work: F) -> PyResult<u64>
    where
        T: for<'py> IntoPyObject<'py> + Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        self.start_as(work, |_| Stop::Detached)
    }

    fn start_as<T, F>(
        &self,
        work: F,
        stop: impl FnOnce(tokio::task::AbortHandle) -> Stop,
    ) -> PyResult<u64>
    where
        T: for<'py> IntoPyObject<'py> + Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let (id, handle) = self.spawn(|mut answering| async move {
            let outcome = work.await;
            answering.send(outcome_answer(outcome));
        })?;
        self.register(id, stop(handle));
        Ok(id)
    }

    /// [`start`](Self::start) for a call that takes a lease: cancelled, it
    /// finishes a request in flight (at most [`TAKING_GRACE`]) and gives
    /// back what it got with `give_back`, so that a timed-out or cancelled
    /// taking does not hold the resource for a TTL.
    pub(crate) fn start_taking<T, F>(
        &self,
        work: F,
        give_back: GiveBack<T>,
        give_up: Option<GiveUp>,
    ) -> PyResult<u64>
    where
        T: for<'py> IntoPyObject<'py> + Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let stop = Arc::new(Notify::new());
        let stopped = stop.clone();
        self.spawn(|mut answering| async move {
            tokio::pin!(work);
            tokio::select! {
                biased;
                outcome = &mut work => answering.send(outcome_answer(outcome)),
                () = stopped.notified() => {
                    if let Ok(Ok(taken)) = tokio::time::timeout(TAKING_GRACE, &mut work).await {
                        give_back(taken).await;
                    }
                    // Answers CancelledError as it drops.
                }
            }
        })
        .map(|(id, _)| {
            self.register(id, Stop::Notify(stop));
            if let (Some(give_up), Ok(shared)) = (give_up, self.shared.get("event loop's calls")) {
                locked(&shared.give_ups).insert(id, give_up);
            }
            id
        })
    }

    /// Spawns the task `make` builds around the call's [`Answering`].
    fn spawn<Fut>(
        &self,
        make: impl FnOnce(Answering) -> Fut,
    ) -> PyResult<(u64, tokio::task::AbortHandle)>
    where
        Fut: Future<Output = ()> + Send + 'static,
    {
        let shared = self.shared.get("event loop's calls")?.clone();
        let runtime = runtime()?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        // In the table before the task can answer (which removes it); the
        // GIL held by the caller keeps `cancel` out until it is replaced.
        locked(&shared.running).insert(id, Stop::Spawning);
        let answering = Answering {
            shared: Some(shared),
            id,
        };
        Ok((id, runtime.spawn(make(answering)).abort_handle()))
    }

    /// Puts `stop` in place of `Spawning`, unless the call answered first.
    fn register(&self, id: u64, stop: Stop) {
        if let Ok(shared) = self.shared.get("event loop's calls")
            && let Some(slot) = locked(&shared.running).get_mut(&id)
        {
            *slot = stop;
        }
    }
}

/// A call's outcome as its answer.
fn outcome_answer<T>(outcome: Result<T>) -> Answer
where
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    Box::new(move |py| match outcome {
        Ok(value) => value.into_py_any(py),
        Err(error) => Err(errors::to_py(&error)),
    })
}

/// A call's promise to answer: kept by its task, it answers
/// `CancelledError` if the task is dropped before it sent the outcome, or
/// an internal error if the task panicked.
pub(crate) struct Answering {
    shared: Option<Arc<Shared>>,
    id: u64,
}

impl Answering {
    fn send(&mut self, answer: Answer) {
        if let Some(shared) = self.shared.take() {
            shared.answer(self.id, answer);
        }
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        if self.shared.is_none() {
            return;
        }
        let answer: Answer = if std::thread::panicking() {
            Box::new(|_| {
                Err(errors::internal(
                    "the call failed inside fencing (a bug; please report it)".to_owned(),
                ))
            })
        } else {
            Box::new(|_| {
                Err(pyo3::exceptions::asyncio::CancelledError::new_err(
                    "the call was cancelled",
                ))
            })
        };
        self.send(answer);
    }
}
