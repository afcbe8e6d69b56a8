//! `with issuer.lock(...) as held:` and `lock.acquire()` /
//! `lock.release()`: the Rust `Lock` and `LeaseGuard` behind a context
//! manager and the calls of redis-py's, kazoo's and `threading`'s locks.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use fencing_tokens::{Error, FencedStore, LeaseGuard, Lock as RustLock, Result, TokenIssuer};
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;

use crate::aio::{Completions, GiveUp};
use crate::errors;
use crate::lease::Lease;
use crate::runtime::{InProcess, wait_for};

/// One `with` block's guard: its `Held` reads it, its `__exit__` takes it
/// (None from then on).
type Slot = Arc<Mutex<Option<LeaseGuard>>>;

/// Where a `Lock` is: one `with` at a time, so that a block's exit can
/// only ever release its own lease.
enum State {
    Idle,
    /// A taking is waiting for the lease: the n-th of this lock, so that a
    /// taking given up (its `async with` cancelled) can no longer change
    /// the state of the next one.
    Entering(u64),
    Held(Slot),
}

struct Inner {
    /// The Rust lock, taken again (a clone of it) by every `with`.
    lock: RustLock,
    /// For `locked()`: who holds the resource, this lock or another.
    holders: Arc<dyn TokenIssuer>,
    resource: String,
    issuer: &'static str,
    /// Shared with a taking in flight, which may finish (or be dropped)
    /// on the runtime.
    state: Arc<Mutex<State>>,
    takings: std::sync::atomic::AtomicU64,
}

/// A lock to take with `with`: what `Issuer.lock` returns.
#[pyclass(frozen, weakref, module = "fencing")]
pub(crate) struct Lock {
    inner: InProcess<Inner>,
}

impl Lock {
    pub(crate) fn new(
        issuer: Arc<dyn TokenIssuer>,
        resource: String,
        ttl: Duration,
        wait: Option<Duration>,
        fences: Vec<(Arc<dyn FencedStore>, String)>,
    ) -> Self {
        let mut lock = RustLock::new(issuer.clone(), resource.clone()).ttl(ttl);
        if let Some(wait) = wait {
            lock = lock.wait(wait);
        }
        for (store, key) in &fences {
            lock = lock.fence(store, [key.clone()]);
        }
        Self::of(lock, issuer, resource)
    }

    /// The Python lock of a Rust `lock` on `resource` of `issuer` (an
    /// election's campaign, say).
    pub(crate) fn of(lock: RustLock, issuer: Arc<dyn TokenIssuer>, resource: String) -> Self {
        Self {
            inner: InProcess::new(Inner {
                issuer: issuer.name(),
                lock,
                holders: issuer,
                resource,
                state: Arc::new(Mutex::new(State::Idle)),
                takings: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A taking in flight: back to `Idle` if it fails or is dropped (Ctrl-C,
/// a cancelled `async with`) before its lease reaches Python, unless the
/// lock has moved on to another taking.
struct Entering {
    state: Option<Arc<Mutex<State>>>,
    taking: u64,
}

impl Entering {
    /// Moves the lock on to `next`, if it still waits for this taking;
    /// once only.
    fn settle(&mut self, next: State) {
        if let Some(state) = self.state.take() {
            let mut state = locked(&state);
            if matches!(*state, State::Entering(n) if n == self.taking) {
                *state = next;
            }
        }
    }
}

impl Drop for Entering {
    fn drop(&mut self) {
        self.settle(State::Idle);
    }
}

/// A lease taken, on its way to Python: it becomes the `Held` of the
/// block (and the lock's state) only there, and only if the lock still
/// waits for this taking. Dropped on the way (a loop gone before it read
/// the answer), or arriving for a taking given up, its guard releases the
/// lease when it drops.
pub(crate) struct Entered {
    guard: LeaseGuard,
    entering: Entering,
}

impl Entered {
    fn into_held(mut self) -> Held {
        let slot = Slot::new(Mutex::new(Some(self.guard)));
        self.entering.settle(State::Held(slot.clone()));
        Held {
            slot: InProcess::new(slot),
        }
    }
}

impl<'py> IntoPyObject<'py> for Entered {
    type Target = Held;
    type Output = Bound<'py, Held>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, Held>> {
        Bound::new(py, self.into_held())
    }
}

/// How long `acquire(blocking, timeout)` waits, as `threading.Lock` and
/// kazoo take it (redis-py's `blocking_timeout` is the same): `None` for
/// the lock's own `wait` (as long as it takes if it has none),
/// `Duration::MAX` for as long as it takes.
fn acquire_wait(
    blocking: bool,
    timeout: Option<f64>,
    blocking_timeout: Option<f64>,
) -> PyResult<Option<Duration>> {
    let value_error =
        |message: &str| Err(pyo3::exceptions::PyValueError::new_err(message.to_owned()));
    let timeout = match (timeout, blocking_timeout) {
        (Some(_), Some(_)) => return value_error("give timeout or blocking_timeout, not both"),
        (timeout, blocking_timeout) => timeout.or(blocking_timeout),
    };
    match (blocking, timeout) {
        // redis-py ignores a blocking_timeout when not blocking.
        (false, Some(_)) if blocking_timeout.is_none() => {
            value_error("can't specify a timeout for a non-blocking call")
        }
        (false, _) => Ok(Some(Duration::ZERO)),
        (true, None) => Ok(None),
        // threading.Lock's "no timeout".
        (true, Some(-1.0)) => Ok(Some(Duration::MAX)),
        (true, Some(t)) => crate::runtime::seconds("timeout", t).map(Some),
    }
}

impl Lock {
    /// Marks the lock as being taken (one `with` at a time) and returns
    /// the taking to run on the runtime, waiting `wait` if given (else as
    /// the lock was made).
    fn enter_call(
        &self,
        wait: Option<Duration>,
    ) -> PyResult<(
        impl Future<Output = Result<Entered>> + Send + 'static,
        GiveUp,
    )> {
        let inner = self.inner.get("lock")?;
        let taking = {
            let mut state = locked(&inner.state);
            if !matches!(*state, State::Idle) {
                return Err(errors::to_py(&Error::invalid_input(format!(
                    "the lock on {:?} is held or being taken already: one `with` at a time \
                     (a thread of its own takes a lock of its own: `issuer.lock(...)` again)",
                    inner.resource
                ))));
            }
            let taking = inner
                .takings
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            *state = State::Entering(taking);
            taking
        };
        let entering = Entering {
            state: Some(inner.state.clone()),
            taking,
        };
        // This taking, given up: the lock free again, unless it moved on to
        // another taking (never the next one's state).
        let state = inner.state.clone();
        let give_up: GiveUp = Box::new(move || {
            let mut state = locked(&state);
            if matches!(*state, State::Entering(n) if n == taking) {
                *state = State::Idle;
            }
        });
        let lock = match wait {
            Some(wait) => inner.lock.clone().wait(wait),
            None => inner.lock.clone(),
        };
        let taken = async move {
            let guard = lock.await?;
            Ok(Entered { guard, entering })
        };
        Ok((taken, give_up))
    }

    /// `acquire()`'s taking: `None` when the wait ran out (nothing held).
    fn acquire_call(
        &self,
        wait: Option<Duration>,
    ) -> PyResult<(
        impl Future<Output = Result<Option<Entered>>> + Send + 'static,
        GiveUp,
    )> {
        let (entering, give_up) = self.enter_call(wait)?;
        let taken = async move {
            match entering.await {
                Ok(entered) => Ok(Some(entered)),
                Err(Error::Timeout { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        };
        Ok((taken, give_up))
    }

    /// Gives back the lease of `held`, a taking's answer nobody awaits any
    /// more (its caller was cancelled just as it came): the lock goes
    /// `Idle` only if it still holds that very lease.
    fn give_back_held(&self, held: &Held) -> PyResult<()> {
        let slot = held.slot.get("lease")?;
        if let Ok(inner) = self.inner.get("lock") {
            let mut state = locked(&inner.state);
            if matches!(&*state, State::Held(ours) if Arc::ptr_eq(ours, slot)) {
                *state = State::Idle;
            }
        }
        // Released in the background as the guard drops.
        drop(locked(slot).take());
        Ok(())
    }

    /// `release()`: the lease this lock holds, given back; `LeaseLost` if it
    /// was lost meanwhile; an error if the lock holds none.
    fn release_call(&self) -> PyResult<impl Future<Output = Result<Exited>> + Send + 'static> {
        let guard = self.take_held()?;
        if guard.is_none() {
            let resource = self
                .inner
                .get("lock")
                .map_or("?", |inner| inner.resource.as_str());
            return Err(errors::to_py(&Error::invalid_input(format!(
                "the lock on {resource:?} is not held by this lock: nothing to release"
            ))));
        }
        Ok(Self::exit_with(guard, false))
    }

    /// `locked()`: whether anyone holds the resource (redis-py's meaning).
    fn locked_call(&self) -> PyResult<impl Future<Output = Result<bool>> + Send + 'static> {
        let inner = self.inner.get("lock")?;
        let (issuer, resource) = (inner.holders.clone(), inner.resource.clone());
        Ok(async move { Ok(issuer.holder(&resource).await?.is_some()) })
    }

    /// The lease this lock holds now, if any (in this process).
    fn held_slot(&self) -> Option<Slot> {
        let inner = self.inner.get("lock").ok()?;
        match &*locked(&inner.state) {
            State::Held(slot) => Some(slot.clone()),
            _ => None,
        }
    }

    /// Takes the block's lease out of the lock (`Idle` again) and returns
    /// its release to run on the runtime: `None`, or, if `block_raised`, a
    /// failed release's message (a warning: the block's exception goes on);
    /// `LeaseLost` if the block finished but the lease was lost while it
    /// ran.
    fn exit_call(
        &self,
        block_raised: bool,
    ) -> PyResult<impl Future<Output = Result<Exited>> + Send + 'static> {
        Ok(Self::exit_with(self.take_held()?, block_raised))
    }

    /// Gives `guard` back, as [`exit_call`](Self::exit_call) says.
    async fn exit_with(guard: Option<LeaseGuard>, block_raised: bool) -> Result<Exited> {
        let Some(guard) = guard else {
            return Ok(Exited(None));
        };
        let (lease, was_lost) = (guard.lease(), guard.is_lost());
        let released = guard.release().await;
        if block_raised {
            return Ok(Exited(released.err().map(|failed| {
                format!(
                    "fencing: releasing {:?} failed while the block raised: {failed}",
                    lease.resource()
                )
            })));
        }
        if was_lost {
            return Err(Error::lease_lost(&lease));
        }
        released.map(|()| Exited(None))
    }
}

impl Lock {
    /// The block's lease, taken out of the lock (`Idle` again); `None` if
    /// no block holds it, or in a forked child (the lease is the parent's).
    fn take_held(&self) -> PyResult<Option<LeaseGuard>> {
        if !self.inner.here() {
            return Ok(None);
        }
        let inner = self.inner.get("lock")?;
        let mut state = locked(&inner.state);
        Ok(match std::mem::replace(&mut *state, State::Idle) {
            State::Held(slot) => locked(&slot).take(),
            other => {
                *state = other;
                None
            }
        })
    }
}

#[pymethods]
impl Lock {
    /// Acquires, starts the renewals and fences every key; the `Held`
    /// lease.
    fn __enter__(&self, py: Python<'_>) -> PyResult<Held> {
        wait_for(py, self.enter_call(None)?.0).map(Entered::into_held)
    }

    /// Acquires as `with` does (renewed in the background from then on,
    /// every `(store, key)` of `fence` fenced with the new token) and
    /// returns True, or False if the wait ran out: waiting as long as it
    /// takes (or the lock's `wait`) with `blocking` and no `timeout`, up to
    /// `timeout` seconds (-1: as long as it takes), or trying once without
    /// `blocking`. `blocking_timeout` is redis-py's name for `timeout`.
    /// Other failures raise. Give it back with `release()`; the token is
    /// `lock.token`.
    #[pyo3(signature = (blocking = true, timeout = None, *, blocking_timeout = None))]
    fn acquire(
        &self,
        py: Python<'_>,
        blocking: bool,
        timeout: Option<f64>,
        blocking_timeout: Option<f64>,
    ) -> PyResult<bool> {
        let wait = acquire_wait(blocking, timeout, blocking_timeout)?;
        Ok(wait_for(py, self.acquire_call(wait)?.0)?
            .map(Entered::into_held)
            .is_some())
    }

    /// Gives the lease back. `LeaseLost` if it was lost while held (a
    /// write made after that was refused, or will be); `InvalidInput` if
    /// this lock holds none.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        wait_for(py, self.release_call()?).map(drop)
    }

    /// Whether anyone holds the resource: this lock or another holder (as
    /// redis-py's `locked()`); `owned()` says whether this lock does.
    fn locked(&self, py: Python<'_>) -> PyResult<bool> {
        wait_for(py, self.locked_call()?)
    }

    /// Whether this lock holds the lease and it is not lost (no request).
    fn owned(&self) -> bool {
        self.held_slot()
            .is_some_and(|slot| locked(&slot).as_ref().is_some_and(|g| !g.is_lost()))
    }

    /// What this lock holds now (`with` or `acquire()`), or None.
    #[getter]
    fn held(&self) -> Option<Held> {
        self.held_slot().map(|slot| Held {
            slot: InProcess::new(slot),
        })
    }

    /// The token of the lease this lock holds: `LeaseLost` once it is lost,
    /// `InvalidInput` if it holds none.
    #[getter]
    fn token(&self) -> PyResult<u64> {
        match self.held() {
            Some(held) => held.token(),
            None => Err(errors::to_py(&Error::invalid_input(
                "the lock is not held: no token".to_owned(),
            ))),
        }
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
        wait_for(py, self.exit_call(exc_type.is_some())?)?.warn(py);
        Ok(false)
    }

    /// `async with`: [`__enter__`](Self::__enter__) on the runtime, no
    /// thread waiting, and the block's task cancelled when the lease is lost
    /// (`fencing._async_lock`).
    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.py()
            .import("fencing._async_lock")?
            .call_method1("enter", (slf,))
    }

    /// `async with`: `LeaseLost` if the block was cancelled because the
    /// lease was lost, else as [`__exit__`](Self::__exit__).
    fn __aexit__<'py>(
        slf: &Bound<'py, Self>,
        exc_type: Option<Bound<'py, PyAny>>,
        exc: Option<Bound<'py, PyAny>>,
        traceback: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        slf.py()
            .import("fencing._async_lock")?
            .call_method1("exit", (slf, exc_type, exc, traceback))
    }

    fn __repr__(&self) -> String {
        match self.inner.get("lock") {
            Ok(inner) => format!("Lock({:?}, issuer={:?})", inner.resource, inner.issuer),
            Err(_) => "Lock(of another process)".to_owned(),
        }
    }
}

/// A block's lease given back: with the message of a failed release when
/// the block raised, which becomes a `RuntimeWarning` (the block's own
/// exception goes on).
pub(crate) struct Exited(Option<String>);

impl Exited {
    fn warn(self, py: Python<'_>) {
        let Some(message) = self.0 else {
            return;
        };
        let category = py.get_type::<pyo3::exceptions::PyRuntimeWarning>();
        let message = std::ffi::CString::new(message.replace('\0', " ")).unwrap_or_default();
        // A warnings filter that raises must not replace the block's own
        // exception.
        if let Err(raised) = PyErr::warn(py, category.as_any(), &message, 1) {
            raised.write_unraisable(py, None);
        }
    }
}

impl<'py> IntoPyObject<'py> for Exited {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    /// The message, for `fencing._async_lock` to warn with from the
    /// block's own frame.
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.0.into_bound_py_any(py)
    }
}

/// The lease a `with issuer.lock(...)` block holds, renewed in the
/// background until the block ends.
#[pyclass(frozen, module = "fencing")]
pub(crate) struct Held {
    slot: InProcess<Slot>,
}

impl Held {
    fn with<T>(&self, then: impl FnOnce(&LeaseGuard) -> T) -> PyResult<T> {
        match locked(self.slot.get("lease")?).as_ref() {
            Some(guard) => Ok(then(guard)),
            None => Err(errors::internal(
                "the lock's block has ended: the lease is released".to_owned(),
            )),
        }
    }
}

#[pymethods]
impl Held {
    /// The fencing token: present it with every write. Raises `LeaseLost`
    /// once the lease is lost, also past its deadline before the keep-alive
    /// has said so (a process continued after a pause), so that no call is
    /// sent with a token the library already knows is no longer held; the
    /// token stays readable on `lease`.
    #[getter]
    fn token(&self) -> PyResult<u64> {
        self.with(|g| g.current())?
            .map(|token| token.get())
            .map_err(|e| errors::to_py(&e))
    }

    /// The lease as last renewed. Presented as a token (`store.put(...,
    /// held.lease)`), it is refused with `LeaseLost` once the lease is lost,
    /// as `held.token` is; its `token` stays readable.
    #[getter]
    fn lease(&self) -> PyResult<Lease> {
        self.with(|g| Lease {
            inner: g.lease(),
            watch: Some(g.watch()),
        })
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
        let (lease, was_lost) = self.with(|g| (g.lease(), g.is_lost()))?;
        if was_lost {
            return Err(errors::to_py(&Error::lease_lost(&lease)));
        }
        Ok(())
    }

    fn __repr__(&self) -> String {
        match self.with(|g| (g.lease(), g.is_lost())) {
            Ok((lease, was_lost)) => format!(
                "Held(resource={:?}, token={}, lost={was_lost})",
                lease.resource(),
                lease.token(),
            ),
            Err(_) => "Held(released)".to_owned(),
        }
    }
}

/// `fencing.aio`'s way into a [`Lock`]: its calls started on the runtime
/// (`_native._calls_of(obj)`), kept off the public class.
#[pyclass(frozen, module = "fencing._native", name = "_LockCalls")]
pub(crate) struct LockCalls(pub(crate) Py<Lock>);

#[pymethods]
impl LockCalls {
    #[pyo3(signature = (calls, blocking = true, timeout = None, blocking_timeout = None))]
    fn start_acquire(
        &self,
        calls: &Completions,
        blocking: bool,
        timeout: Option<f64>,
        blocking_timeout: Option<f64>,
    ) -> PyResult<u64> {
        let this = self.0.get();
        let wait = acquire_wait(blocking, timeout, blocking_timeout)?;
        let (taken, give_up) = this.acquire_call(wait)?;
        calls.start_taking(
            taken,
            Box::new(|entered| Box::pin(async move { drop(entered) })),
            Some(give_up),
        )
    }

    fn start_release(&self, calls: &Completions) -> PyResult<u64> {
        let this = self.0.get();
        calls.start_detached(this.release_call()?)
    }

    fn start_locked(&self, calls: &Completions) -> PyResult<u64> {
        let this = self.0.get();
        calls.start(this.locked_call()?)
    }

    fn start_enter(&self, calls: &Completions) -> PyResult<u64> {
        let this = self.0.get();
        // Cancelled, the lock is free again at once (this taking's state
        // only), and a lease it still gets is released by the guard's drop.
        let (taken, give_up) = this.enter_call(None)?;
        calls.start_taking(
            taken,
            Box::new(|entered| Box::pin(async move { drop(entered) })),
            Some(give_up),
        )
    }

    /// A taking's answer that came just as its caller was cancelled: its
    /// own lease given back, the lock `Idle` only if it holds that lease.
    fn give_back(&self, held: &Held) -> PyResult<()> {
        self.0.get().give_back_held(held)
    }

    /// Leaves a block with no event loop to wait on (its coroutine closed
    /// by the garbage collector after its loop was gone): the lock is
    /// `Idle`, and the lease is released in the background by the guard's
    /// drop.
    fn abandon(&self) -> PyResult<()> {
        let this = self.0.get();
        drop(this.take_held()?);
        Ok(())
    }

    /// [`Lock::__exit__`] on the runtime: the failed release's
    /// message comes back for `fencing._async_lock` to warn with.
    fn start_exit(&self, calls: &Completions, block_raised: bool) -> PyResult<u64> {
        let this = self.0.get();
        calls.start_detached(this.exit_call(block_raised)?)
    }
}
