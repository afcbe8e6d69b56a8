//! `with issuer.lock(...) as held:`: the Rust `Lock` and `LeaseGuard`
//! behind a context manager.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fencing_tokens::{Error, FencedStore, LeaseGuard, Lock as RustLock, TokenIssuer};
use pyo3::prelude::*;

use crate::errors;
use crate::issuer::Lease;
use crate::runtime::{Opened, wait_for};

/// The guard while the block runs; None before and after.
type Slot = Arc<Mutex<Option<LeaseGuard>>>;

/// A lock to take with `with`: what `Issuer.lock` returns.
#[pyclass(module = "fencing")]
pub(crate) struct Lock {
    issuer: Arc<dyn TokenIssuer>,
    opened: Opened,
    resource: String,
    ttl: Duration,
    wait: Option<Duration>,
    fences: Vec<(Arc<dyn FencedStore>, String)>,
    held: Slot,
}

impl Lock {
    pub(crate) fn new(
        issuer: Arc<dyn TokenIssuer>,
        opened: Opened,
        resource: String,
        ttl: Duration,
        wait: Option<Duration>,
        fences: Vec<(Arc<dyn FencedStore>, String)>,
    ) -> Self {
        Self {
            issuer,
            opened,
            resource,
            ttl,
            wait,
            fences,
            held: Slot::default(),
        }
    }
}

fn slot(held: &Slot) -> std::sync::MutexGuard<'_, Option<LeaseGuard>> {
    held.lock().unwrap_or_else(PoisonError::into_inner)
}

#[pymethods]
impl Lock {
    /// Acquires, starts the renewals and fences every key; the `Held`
    /// lease.
    fn __enter__(&self, py: Python<'_>) -> PyResult<Held> {
        self.opened.check("lock")?;
        if slot(&self.held).is_some() {
            return Err(errors::to_py(&Error::invalid_input(format!(
                "the lock on {:?} is held already: one `with` at a time",
                self.resource
            ))));
        }
        let (issuer, resource, ttl, wait) = (
            self.issuer.clone(),
            self.resource.clone(),
            self.ttl,
            self.wait,
        );
        let fences = self.fences.clone();
        let guard = wait_for(py, async move {
            let mut lock = RustLock::new(issuer, resource).ttl(ttl);
            if let Some(wait) = wait {
                lock = lock.wait(wait);
            }
            for (store, key) in &fences {
                lock = lock.fence(&**store, [key.clone()]);
            }
            lock.await
        })?;
        *slot(&self.held) = Some(guard);
        Ok(Held {
            held: self.held.clone(),
        })
    }

    /// Releases. If the block raised, its exception goes on (a failed
    /// release only warns). If it finished but the lease was lost while
    /// it ran, `LeaseLost`: a write it made after that was refused, or
    /// will be once the next holder writes or fences.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let Some(guard) = slot(&self.held).take() else {
            return Ok(false);
        };
        let (lease, lost) = (guard.lease(), guard.is_lost());
        let released = wait_for(py, async move { guard.release().await });
        if exc_type.is_some() {
            if let Err(failed) = released {
                let message = format!(
                    "fencing: releasing {:?} failed while the block raised: {failed}",
                    lease.resource()
                );
                let category = py.get_type::<pyo3::exceptions::PyRuntimeWarning>();
                let message =
                    std::ffi::CString::new(message.replace('\0', " ")).unwrap_or_default();
                PyErr::warn(py, category.as_any(), &message, 1)?;
            }
            return Ok(false);
        }
        if lost {
            return Err(errors::to_py(&Error::lease_lost(&lease)));
        }
        released.map(|()| false)
    }

    fn __repr__(&self) -> String {
        format!("Lock({:?}, issuer={:?})", self.resource, self.issuer.name())
    }
}

/// The lease a `with issuer.lock(...)` block holds, renewed in the
/// background until the block ends.
#[pyclass(frozen, module = "fencing")]
pub(crate) struct Held {
    held: Slot,
}

impl Held {
    fn with<T>(&self, then: impl FnOnce(&LeaseGuard) -> T) -> PyResult<T> {
        match slot(&self.held).as_ref() {
            Some(guard) => Ok(then(guard)),
            None => Err(errors::internal(
                "the lock's block has ended: the lease is released".to_owned(),
            )),
        }
    }
}

#[pymethods]
impl Held {
    /// The fencing token: present it with every write.
    #[getter]
    fn token(&self) -> PyResult<u64> {
        self.with(|g| g.token().get())
    }

    /// The lease as last renewed.
    #[getter]
    fn lease(&self) -> PyResult<Lease> {
        self.with(|g| Lease::from(g.lease()))
    }

    /// Whether the lease was lost: a renewal refused, or its deadline
    /// passed before one succeeded (a paused process, an unreachable
    /// issuer). Stop the work.
    #[getter]
    fn lost(&self) -> PyResult<bool> {
        self.with(LeaseGuard::is_lost)
    }

    /// Raises `LeaseLost` if the lease was lost: call it between steps of
    /// long work.
    fn check(&self) -> PyResult<()> {
        let lease = self.with(LeaseGuard::lease)?;
        if self.with(LeaseGuard::is_lost)? {
            return Err(errors::to_py(&Error::lease_lost(&lease)));
        }
        Ok(())
    }

    fn __repr__(&self) -> String {
        match slot(&self.held).as_ref() {
            Some(g) => format!(
                "Held(resource={:?}, token={}, lost={})",
                g.lease().resource(),
                g.token(),
                g.is_lost()
            ),
            None => "Held(released)".to_owned(),
        }
    }
}
