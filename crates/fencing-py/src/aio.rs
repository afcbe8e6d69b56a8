//! `fencing._native.Completions`: awaitable calls that run on the module's
//! Tokio runtime, with no Rust thread ever calling into Python.
//!
//! A call started from an event loop is spawned on the runtime and given
//! an id; when it ends, its answer (still a Rust value) is queued and one
//! byte is written to a socket whose other end the loop watches
//! (`loop.add_reader`). The loop's reader then calls [`Completions::drain`]
//! in its own thread, with the GIL: the answers become Python objects
//! there and resolve their futures (`fencing.aio`). Tokio threads never
//! take the GIL, so nothing can hang on it at interpreter shutdown, and a
//! loop that is gone leaves answers in a queue that is simply dropped.

use std::collections::HashMap;
use std::future::Future;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use fencing_tokens::Result;
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;

use crate::errors;
use crate::runtime::{InProcess, runtime};

/// An answer waiting for the loop's thread to turn it into Python.
type Answer = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// What the runtime's tasks share with the loop.
struct Shared {
    answers: Mutex<Vec<(u64, Answer)>>,
    /// Aborts the calls still running, by id (a cancelled future).
    running: Mutex<HashMap<u64, tokio::task::AbortHandle>>,
    /// Written one byte per answer (a full buffer is fine: the loop
    /// drains every queued answer at each wake-up).
    wake: UnixStream,
}

impl Shared {
    fn answer(&self, id: u64, answer: Answer) {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        self.answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((id, answer));
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
                answers: Mutex::new(Vec::new()),
                running: Mutex::new(HashMap::new()),
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
        let answers = std::mem::take(
            &mut *self
                .shared
                .get("event loop's calls")?
                .answers
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        answers
            .into_iter()
            .map(|(id, answer)| match answer(py) {
                Ok(value) => Ok((id, true, value)),
                Err(raised) => Ok((id, false, raised.into_value(py).into_any())),
            })
            .collect()
    }

    /// Stops the call `id` if it is still running (its future was
    /// cancelled): it is dropped as a Rust future is, so what it sent may
    /// still be applied. It still answers (`CancelledError`).
    fn cancel(&self, id: u64) -> PyResult<()> {
        let running = self
            .shared
            .get("event loop's calls")?
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        if let Some(handle) = running {
            handle.abort();
        }
        Ok(())
    }

    /// How many calls are still running.
    fn running(&self) -> PyResult<usize> {
        Ok(self
            .shared
            .get("event loop's calls")?
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len())
    }
}

impl Completions {
    /// Spawns `work` on the runtime; returns the id its answer will carry.
    /// Every call answers exactly once: with its outcome, or, stopped by
    /// [`cancel`](Self::cancel) or the runtime's shutdown, with
    /// `CancelledError`.
    pub(crate) fn start<T, F>(&self, work: F) -> PyResult<u64>
    where
        T: for<'py> IntoPyObject<'py> + Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let shared = self.shared.get("event loop's calls")?.clone();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut answering = Answering {
            shared: Some(shared.clone()),
            id,
        };
        // Held until the task is registered, so that its answer (which
        // removes it) cannot come first and leave a stale entry.
        let mut running = shared
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let task = runtime()?.spawn(async move {
            let outcome = work.await;
            answering.send(Box::new(move |py| match outcome {
                Ok(value) => value.into_py_any(py),
                Err(error) => Err(errors::to_py(&error)),
            }));
        });
        running.insert(id, task.abort_handle());
        Ok(id)
    }
}

/// A call's promise to answer: kept by its task, it answers
/// `CancelledError` if the task is dropped before it sent the outcome.
struct Answering {
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
        self.send(Box::new(|_| {
            Err(pyo3::exceptions::asyncio::CancelledError::new_err(
                "the call was cancelled",
            ))
        }));
    }
}
