//! `fencing._native`: the Rust half of the `fencing` Python package.
//!
//! Every call blocks its Python thread, never the others: the work runs on
//! a Tokio runtime the module owns (`runtime`), the GIL is released while
//! it does, and Ctrl-C (or any signal handler that raises) still
//! interrupts a long wait. The exceptions are the Python classes of
//! `fencing.errors`, built from [`fencing_tokens::Error`] in one place
//! (`errors`).

mod aio;
mod election;
mod errors;
mod issuer;
mod lease;
mod lock;
mod runtime;
mod sql;
mod store;

use pyo3::prelude::*;

/// Opens the lock service `url` names (the URL grammar of `fence`: etcd://,
/// zk://, redis://, postgres://, mysql://, sqlite://, s3://, gs://, az://,
/// dynamodb://), connecting and checking it as the Rust `open_issuer` does.
#[pyfunction]
fn open_issuer(py: Python<'_>, url: String) -> PyResult<issuer::Issuer> {
    runtime::wait_for(py, issuer::Issuer::open(url))
}

/// Opens the fenced store `url` names (postgres://, mysql://, sqlite://,
/// s3://, gs://, az://, dynamodb://).
#[pyfunction]
fn open_store(py: Python<'_>, url: String) -> PyResult<store::Store> {
    runtime::wait_for(py, store::Store::open(url))
}

/// `fencing.aio.open_issuer`'s start.
#[pyfunction]
fn _start_open_issuer(calls: &aio::Completions, url: String) -> PyResult<u64> {
    calls.start(issuer::Issuer::open(url))
}

/// `fencing.aio.open_store`'s start.
#[pyfunction]
fn _start_open_store(calls: &aio::Completions, url: String) -> PyResult<u64> {
    calls.start(store::Store::open(url))
}

/// `fencing.aio`'s way into an issuer, a store, a lock or an election: its
/// calls started on the runtime, which the public classes do not show.
#[pyfunction]
fn _calls_of(py: Python<'_>, target: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    if let Ok(issuer) = target.cast::<issuer::Issuer>() {
        return Ok(Py::new(py, issuer::IssuerCalls(issuer.clone().unbind()))?.into_any());
    }
    if let Ok(store) = target.cast::<store::Store>() {
        return Ok(Py::new(py, store::StoreCalls(store.clone().unbind()))?.into_any());
    }
    if let Ok(lock) = target.cast::<lock::Lock>() {
        return Ok(Py::new(py, lock::LockCalls(lock.clone().unbind()))?.into_any());
    }
    if let Ok(election) = target.cast::<election::Election>() {
        return Ok(Py::new(py, election::ElectionCalls(election.clone().unbind()))?.into_any());
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "no calls of a {}",
        target.get_type().name()?
    )))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(open_issuer, m)?)?;
    m.add_function(wrap_pyfunction!(open_store, m)?)?;
    m.add_function(wrap_pyfunction!(_start_open_issuer, m)?)?;
    m.add_function(wrap_pyfunction!(_start_open_store, m)?)?;
    m.add_function(wrap_pyfunction!(_calls_of, m)?)?;
    m.add_class::<issuer::Issuer>()?;
    m.add_class::<lease::Lease>()?;
    m.add_class::<lease::Holding>()?;
    m.add_class::<election::Election>()?;
    m.add_class::<election::Leader>()?;
    m.add_class::<lock::Lock>()?;
    m.add_class::<lock::Held>()?;
    m.add_class::<store::Store>()?;
    m.add_class::<store::Versioned>()?;
    m.add_class::<sql::SqlGuard>()?;
    m.add_class::<aio::Completions>()?;
    m.add_class::<issuer::IssuerCalls>()?;
    m.add_class::<store::StoreCalls>()?;
    m.add_class::<lock::LockCalls>()?;
    m.add_class::<election::ElectionCalls>()?;
    m.add_function(wrap_pyfunction!(sql::sqlite_file_in_use, m)?)?;
    Ok(())
}
