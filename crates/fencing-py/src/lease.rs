//! A lease as Python sees it (`Lease`, `Holding`), and a token taken from
//! Python (an `int` or a `Lease`): what the issuer hands out and every
//! store, lock and SQL guard takes.

use std::time::Instant;

use fencing_tokens::keepalive::LeaseWatch;
use fencing_tokens::{Error, FencingToken};
use pyo3::prelude::*;

use crate::errors;

/// A lease: the resource, its fencing token, its holder and its TTL.
#[pyclass(frozen, module = "fencing")]
pub(crate) struct Lease {
    pub(crate) inner: fencing_tokens::Lease,
    /// The guard's view, for a lease read off a `Held` (`held.lease`):
    /// presented as a token, it is refused once that lease is lost, as
    /// `held.token` is.
    pub(crate) watch: Option<LeaseWatch>,
}

impl From<fencing_tokens::Lease> for Lease {
    fn from(inner: fencing_tokens::Lease) -> Self {
        Self { inner, watch: None }
    }
}

impl Lease {
    /// The token to write with: `LeaseLost` if it is a guard's lease that
    /// is no longer held.
    pub(crate) fn token_to_send(&self) -> fencing_tokens::Result<FencingToken> {
        match &self.watch {
            Some(watch) => watch.current(),
            None => Ok(self.inner.token()),
        }
    }
}

#[pymethods]
impl Lease {
    /// The fencing token: present it with every write.
    #[getter]
    fn token(&self) -> u64 {
        self.inner.token().get()
    }

    /// The leased resource.
    #[getter]
    fn resource(&self) -> &str {
        self.inner.resource()
    }

    /// The holder's id.
    #[getter]
    fn holder(&self) -> &str {
        self.inner.holder().as_str()
    }

    /// The TTL, in seconds.
    #[getter]
    fn ttl(&self) -> f64 {
        self.inner.ttl().as_secs_f64()
    }

    /// Seconds left before the lease's local deadline (counted from when
    /// its request was sent), 0 once passed.
    #[getter]
    fn remaining(&self) -> f64 {
        self.inner
            .deadline()
            .saturating_duration_since(Instant::now())
            .as_secs_f64()
    }

    /// Whether the local deadline has passed: stop writing with it.
    #[getter]
    fn expired(&self) -> bool {
        self.inner.is_expired()
    }

    fn __repr__(&self) -> String {
        format!(
            "Lease(resource={:?}, token={}, ttl={:?})",
            self.inner.resource(),
            self.inner.token(),
            self.inner.ttl()
        )
    }
}

/// Who holds a resource, and the token of their lease.
#[pyclass(frozen, get_all, module = "fencing")]
pub(crate) struct Holding {
    /// The holder's id (`foreign:…` for another lock client on the same
    /// lock: etcdctl, Curator, redis-py).
    pub(crate) holder: String,
    /// Its lease's token (0 where the issuer cannot read one).
    pub(crate) token: u64,
}

#[pymethods]
impl Holding {
    fn __repr__(&self) -> String {
        format!("Holding(holder={:?}, token={})", self.holder, self.token)
    }
}

/// The name of `value`'s type, for a message.
pub(crate) fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}

/// A token from Python: an `int` from 0 to 2**64 - 1, or a `Lease` (its
/// token; `LeaseLost` for a `held.lease` whose lease is no longer held).
/// Anything else is `InvalidInput`, not an `OverflowError`.
pub(crate) fn token_from(value: &Bound<'_, PyAny>) -> PyResult<FencingToken> {
    if let Ok(lease) = value.cast::<Lease>() {
        return lease.get().token_to_send().map_err(|e| errors::to_py(&e));
    }
    // An int to Python, and 1 to `extract`: a token by mistake.
    if value.is_instance_of::<pyo3::types::PyBool>() {
        return Err(errors::to_py(&Error::invalid_input(
            "a fencing token is an int (or a Lease): got a bool",
        )));
    }
    let Ok(number) = value.extract::<i128>() else {
        return Err(errors::to_py(&Error::invalid_input(format!(
            "a fencing token is an int (or a Lease): got {}",
            type_name(value)
        ))));
    };
    u64::try_from(number).map(FencingToken::new).map_err(|_| {
        errors::to_py(&Error::invalid_input(format!(
            "a fencing token is from 0 to 2**64 - 1: got {number}"
        )))
    })
}
