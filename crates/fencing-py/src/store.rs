//! `fencing.Store`: writes that carry a fencing token.

use std::sync::Arc;

use fencing_tokens::{Bytes, FencedStore, FencingToken, Result};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::aio::Completions;
use crate::lease::token_from;
use crate::runtime::{InProcess, wait_for};

/// A fenced store: every write carries a token, and one lower than the
/// highest the key has accepted is refused (`StaleToken`) with nothing
/// written.
#[pyclass(frozen, module = "fencing")]
pub(crate) struct Store {
    inner: InProcess<Arc<dyn FencedStore>>,
    /// The URL without its secrets, for `repr`.
    shown: String,
}

impl Store {
    /// Opens the store `url` names (on the runtime).
    pub(crate) async fn open(url: String) -> Result<Self> {
        let shown = fencing_tokens::redact(&url);
        let inner = crate::sql::noting_sqlite_file(&url, fencing_tokens::open_store(&url)).await?;
        Ok(Self {
            inner: InProcess::new(inner),
            shown,
        })
    }

    pub(crate) fn store(&self) -> PyResult<Arc<dyn FencedStore>> {
        self.inner.get("store").cloned()
    }
}

/// What each call runs on the runtime, shared by the sync methods (which
/// wait for it) and the `_start_*` ones of `fencing.aio` (which don't).
impl Store {
    fn put_call(
        &self,
        key: String,
        value: &[u8],
        token: &Bound<'_, PyAny>,
    ) -> PyResult<impl Future<Output = Result<()>> + Send + 'static> {
        let (store, token) = (self.store()?, token_from(token)?);
        let value = Bytes::copy_from_slice(value);
        Ok(async move { store.put(&key, value, token).await })
    }

    fn get_call(
        &self,
        key: String,
    ) -> PyResult<impl Future<Output = Result<Option<Found>>> + Send + 'static> {
        let store = self.store()?;
        Ok(async move { Ok(store.get(&key).await?.map(Found)) })
    }

    fn fence_call(
        &self,
        key: String,
        token: &Bound<'_, PyAny>,
    ) -> PyResult<impl Future<Output = Result<u64>> + Send + 'static> {
        let (store, token) = (self.store()?, token_from(token)?);
        Ok(async move { store.fence(&key, token).await.map(FencingToken::get) })
    }

    fn mark_call(
        &self,
        key: String,
    ) -> PyResult<impl Future<Output = Result<Option<u64>>> + Send + 'static> {
        let store = self.store()?;
        Ok(async move { Ok(store.mark(&key).await?.map(FencingToken::get)) })
    }

    fn delete_call(
        &self,
        key: String,
        token: &Bound<'_, PyAny>,
    ) -> PyResult<impl Future<Output = Result<()>> + Send + 'static> {
        let (store, token) = (self.store()?, token_from(token)?);
        Ok(async move { store.delete(&key, token).await })
    }

    fn floor_call(&self) -> PyResult<impl Future<Output = Result<Option<u64>>> + Send + 'static> {
        let store = self.store()?;
        Ok(async move { Ok(store.floor().await?.map(FencingToken::get)) })
    }

    fn raise_floor_call(
        &self,
        floor: &Bound<'_, PyAny>,
    ) -> PyResult<impl Future<Output = Result<u64>> + Send + 'static> {
        let (store, floor) = (self.store()?, token_from(floor)?);
        Ok(async move { store.raise_floor(floor).await.map(FencingToken::get) })
    }

    fn remove_floored_marks_call(
        &self,
        most: u32,
    ) -> PyResult<impl Future<Output = Result<u64>> + Send + 'static> {
        let store = self.store()?;
        Ok(async move { store.remove_floored_marks(most).await })
    }
}

#[pymethods]
impl Store {
    /// The backend's name: "postgres", "s3", …
    #[getter]
    fn name(&self) -> PyResult<&'static str> {
        Ok(self.store()?.name())
    }

    /// Writes `value` to `key` with `token`: `StaleToken` (nothing
    /// written) if the key has accepted a higher one.
    fn put(
        &self,
        py: Python<'_>,
        key: String,
        value: &[u8],
        token: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        wait_for(py, self.put_call(key, value, token)?)
    }

    /// The value of `key` and its mark, or None.
    fn get(&self, py: Python<'_>, key: String) -> PyResult<Option<Found>> {
        wait_for(py, self.get_call(key)?)
    }

    /// Raises `key`'s mark to `token` without writing a value, so that
    /// every lower token is refused from now on; returns the mark.
    /// `StaleToken` if it is above `token` already.
    fn fence(&self, py: Python<'_>, key: String, token: &Bound<'_, PyAny>) -> PyResult<u64> {
        wait_for(py, self.fence_call(key, token)?)
    }

    /// `key`'s mark: the highest token it has accepted, or None.
    fn mark(&self, py: Python<'_>, key: String) -> PyResult<Option<u64>> {
        wait_for(py, self.mark_call(key)?)
    }

    /// Deletes `key`'s value with `token`, keeping its mark:
    /// `StaleToken` if the key has accepted a higher token.
    fn delete(&self, py: Python<'_>, key: String, token: &Bound<'_, PyAny>) -> PyResult<()> {
        wait_for(py, self.delete_call(key, token)?)
    }

    /// The store's floor: every token at or below it is refused on every
    /// key (on DynamoDB, on every key without a mark). None if none was
    /// raised. `Unsupported` from a store that keeps no floor (the object
    /// stores).
    fn floor(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        wait_for(py, self.floor_call()?)
    }

    /// Raises the store's floor to `floor` and returns it: every token at
    /// or below it is refused on every key from now on, keys never written
    /// included. Never lowered: a lower floor raises `InvalidInput`.
    fn raise_floor(&self, py: Python<'_>, floor: &Bound<'_, PyAny>) -> PyResult<u64> {
        wait_for(py, self.raise_floor_call(floor)?)
    }

    /// Removes up to `most` marks the floor covers (keys with no value,
    /// marks at or below it) and returns how many went; call again until
    /// it returns 0.
    #[pyo3(signature = (most = 1000))]
    fn remove_floored_marks(&self, py: Python<'_>, most: u32) -> PyResult<u64> {
        wait_for(py, self.remove_floored_marks_call(most)?)
    }

    fn __repr__(&self) -> String {
        format!("Store({:?})", self.shown)
    }
}

/// A value read, made a `Versioned` in the thread that holds the GIL.
pub(crate) struct Found(fencing_tokens::Versioned);

impl<'py> IntoPyObject<'py> for Found {
    type Target = Versioned;
    type Output = Bound<'py, Versioned>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, Versioned>> {
        Bound::new(
            py,
            Versioned {
                value: PyBytes::new(py, &self.0.value).unbind(),
                token: self.0.token.get(),
            },
        )
    }
}

/// A value and its key's mark.
#[pyclass(frozen, get_all, module = "fencing")]
pub(crate) struct Versioned {
    /// The stored bytes.
    value: Py<PyBytes>,
    /// The key's mark: the highest token it has accepted.
    token: u64,
}

#[pymethods]
impl Versioned {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Versioned(value=<{} bytes>, token={})",
            self.value.bind(py).as_bytes().len(),
            self.token
        )
    }
}

/// `fencing.aio`'s way into a [`Store`]: its calls started on the runtime
/// (`_native._calls_of(obj)`), kept off the public class.
#[pyclass(frozen, module = "fencing._native", name = "_StoreCalls")]
pub(crate) struct StoreCalls(pub(crate) Py<Store>);

#[pymethods]
impl StoreCalls {
    fn start_floor(&self, calls: &Completions) -> PyResult<u64> {
        let this = self.0.get();
        calls.start(this.floor_call()?)
    }

    fn start_raise_floor(&self, calls: &Completions, floor: &Bound<'_, PyAny>) -> PyResult<u64> {
        let this = self.0.get();
        calls.start(this.raise_floor_call(floor)?)
    }

    #[pyo3(signature = (calls, most = 1000))]
    fn start_remove_floored_marks(&self, calls: &Completions, most: u32) -> PyResult<u64> {
        let this = self.0.get();
        calls.start(this.remove_floored_marks_call(most)?)
    }

    fn start_put(
        &self,
        calls: &Completions,
        key: String,
        value: &[u8],
        token: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let this = self.0.get();
        calls.start(this.put_call(key, value, token)?)
    }

    fn start_get(&self, calls: &Completions, key: String) -> PyResult<u64> {
        let this = self.0.get();
        calls.start(this.get_call(key)?)
    }

    fn start_fence(
        &self,
        calls: &Completions,
        key: String,
        token: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let this = self.0.get();
        calls.start(this.fence_call(key, token)?)
    }

    fn start_mark(&self, calls: &Completions, key: String) -> PyResult<u64> {
        let this = self.0.get();
        calls.start(this.mark_call(key)?)
    }

    fn start_delete(
        &self,
        calls: &Completions,
        key: String,
        token: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let this = self.0.get();
        calls.start(this.delete_call(key, token)?)
    }
}
