//! `fencing_tokens::Error` as the exceptions of `fencing.errors`: the one
//! place the Rust error becomes a Python one.

use fencing_tokens::Error;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The exception for `error`: its class from `fencing.errors`, its message
/// (the error and its causes, redacted: [`Error::chain`]) and its fields as
/// attributes.
pub(crate) fn to_py(error: &Error) -> PyErr {
    Python::attach(|py| build(py, error).unwrap_or_else(|failed| failed))
}

/// A `fencing.errors.FencingError` that no Rust error stands behind.
pub(crate) fn internal(message: String) -> PyErr {
    Python::attach(|py| {
        let made = || -> PyResult<PyErr> {
            let class = py.import("fencing.errors")?.getattr("FencingError")?;
            Ok(PyErr::from_value(class.call1((message,))?))
        };
        made().unwrap_or_else(|failed| failed)
    })
}

fn build(py: Python<'_>, error: &Error) -> PyResult<PyErr> {
    let fields = PyDict::new(py);
    fields.set_item("retryable", error.is_retryable())?;
    let class = match error {
        Error::StaleToken {
            key,
            presented,
            current,
        } => {
            fields.set_item("key", key)?;
            fields.set_item("presented", presented.get())?;
            fields.set_item("current", current.get())?;
            "StaleToken"
        }
        Error::Unfenced { key } => {
            fields.set_item("key", key)?;
            "Unfenced"
        }
        Error::LeaseLost { resource, token } => {
            fields.set_item("resource", resource)?;
            fields.set_item("token", token.get())?;
            "LeaseLost"
        }
        Error::Busy {
            resource,
            operation,
        } => {
            fields.set_item("resource", resource)?;
            fields.set_item("operation", *operation)?;
            "Busy"
        }
        Error::Timeout { operation, after } => {
            fields.set_item("operation", operation)?;
            fields.set_item("after", after.as_secs_f64())?;
            "Timeout"
        }
        Error::TokenOutOfRange { token, max } => {
            fields.set_item("token", token.get())?;
            fields.set_item("max", max.get())?;
            "TokenOutOfRange"
        }
        Error::InvalidInput { .. } => "InvalidInput",
        Error::UnsafeConfiguration { backend, .. } => {
            fields.set_item("backend", *backend)?;
            "UnsafeConfiguration"
        }
        Error::Tls { backend, .. } => {
            fields.set_item("backend", *backend)?;
            "Tls"
        }
        Error::Unauthenticated { backend, .. } => {
            fields.set_item("backend", *backend)?;
            "Unauthenticated"
        }
        Error::Unsupported { backend, operation } => {
            fields.set_item("backend", *backend)?;
            fields.set_item("operation", *operation)?;
            "Unsupported"
        }
        Error::Contention { key, attempts } => {
            fields.set_item("key", key)?;
            fields.set_item("attempts", *attempts)?;
            "Contention"
        }
        Error::OutcomeUnknown {
            backend, operation, ..
        } => {
            fields.set_item("backend", *backend)?;
            fields.set_item("operation", operation)?;
            "OutcomeUnknown"
        }
        Error::Backend { backend, .. } => {
            fields.set_item("backend", *backend)?;
            "BackendError"
        }
        _ => "FencingError",
    };
    let class = py.import("fencing.errors")?.getattr(class)?;
    Ok(PyErr::from_value(
        class.call((error.chain(),), Some(&fields))?,
    ))
}
