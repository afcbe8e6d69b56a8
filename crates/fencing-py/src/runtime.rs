//! The module's Tokio runtime, and running a Rust future from a Python
//! thread on it.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fencing_tokens::{Error, Result};
use pyo3::prelude::*;

use crate::errors;

/// How often a waiting call looks whether a signal handler raised (Ctrl-C):
/// the longest a KeyboardInterrupt waits.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// The runtime, with the process it was made in: after `os.fork()` its
/// threads are gone in the child, which gets one of its own.
static RUNTIME: Mutex<Option<(u32, Arc<tokio::runtime::Runtime>)>> = Mutex::new(None);

/// This process's runtime, made on first use.
pub(crate) fn runtime() -> PyResult<Arc<tokio::runtime::Runtime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(PoisonError::into_inner);
    match slot.take() {
        Some((made_in, runtime)) if made_in == pid => {
            *slot = Some((made_in, runtime.clone()));
            return Ok(runtime);
        }
        // The parent's, copied by fork without its threads: dropping it
        // would wait for them for ever.
        Some(inherited) => std::mem::forget(inherited),
        None => {}
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name("fencing")
        .enable_all()
        .build()
        .map(Arc::new)
        .map_err(|e| errors::internal(format!("cannot start fencing's runtime: {e}")))?;
    *slot = Some((pid, runtime.clone()));
    Ok(runtime)
}

/// What belongs to the process that made it: an issuer's or a store's
/// connections, a lease's keep-alive, all on that process's runtime. After
/// `os.fork()` the child may not use it (an error says to open its own),
/// and dropping it there leaks it rather than run drops that would reach
/// into the parent's runtime and sockets.
pub(crate) struct InProcess<T> {
    value: Option<T>,
    pid: u32,
}

impl<T> InProcess<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            value: Some(value),
            pid: std::process::id(),
        }
    }

    /// Whether this is the process that made it.
    pub(crate) fn here(&self) -> bool {
        self.pid == std::process::id()
    }

    /// The value; an error naming `what` in another process.
    pub(crate) fn get(&self, what: &str) -> PyResult<&T> {
        match &self.value {
            Some(value) if self.here() => Ok(value),
            _ => Err(errors::internal(format!(
                "this {what} was opened in process {} and this is process {} (os.fork(), a \
                 multiprocessing or Celery prefork worker): its connections belong to that \
                 process; open the {what} again in this one",
                self.pid,
                std::process::id()
            ))),
        }
    }
}

impl<T> Drop for InProcess<T> {
    fn drop(&mut self) {
        if let Some(value) = self.value.take()
            && !self.here()
        {
            std::mem::forget(value);
        }
    }
}

/// Runs `work` on the runtime and waits for it with the GIL released,
/// looking for a raised signal (Ctrl-C) every [`SIGNAL_CHECK`]: on one,
/// `work` is dropped (what it sent may still be applied, as when a Rust
/// future is dropped) and the signal's exception raised.
pub(crate) fn wait_for<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    let runtime = runtime()?;
    let mut task = runtime.spawn(work);
    loop {
        let done = py.detach(|| {
            runtime.block_on(async { tokio::time::timeout(SIGNAL_CHECK, &mut task).await.ok() })
        });
        match done {
            Some(Ok(outcome)) => return outcome.map_err(|e| errors::to_py(&e)),
            Some(Err(join)) => {
                return Err(errors::internal(format!(
                    "the call failed inside fencing (a bug; please report it): {}",
                    fencing_tokens::error_chain(&join)
                )));
            }
            None => {
                if let Err(raised) = py.check_signals() {
                    task.abort();
                    return Err(raised);
                }
            }
        }
    }
}

/// Seconds from Python as a duration: finite and not negative.
pub(crate) fn seconds(name: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        errors::to_py(&Error::invalid_input(format!(
            "{name} must be a number of seconds, finite and not negative: got {value}"
        )))
    })
}
