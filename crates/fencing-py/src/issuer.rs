//! `fencing.Issuer` and the leases it grants.

use std::sync::Arc;

use fencing_tokens::{FencedStore, LeaseRequest, Result, TokenIssuer};
use pyo3::prelude::*;

use crate::aio::{Completions, GiveBack};
use crate::lease::{Holding, Lease, token_from, type_name};
use crate::lock::Lock;
use crate::runtime::{InProcess, seconds, wait_for};
use crate::store::Store;

// The signatures below write the TTL default, 30 s, as a literal: Python
// shows it in `help()` and the stubs check it (`mypy.stubtest`). It is the
// Rust default:
const _: () = assert!(fencing_tokens::lock::DEFAULT_TTL.as_secs() == 30);

/// A lock service: grants leases with fencing tokens on resources.
#[pyclass(frozen, module = "fencing")]
pub(crate) struct Issuer {
    inner: InProcess<Arc<dyn TokenIssuer>>,
    /// The URL without its secrets, for `repr`.
    shown: String,
}

impl Issuer {
    /// Opens the issuer `url` names (on the runtime).
    pub(crate) async fn open(url: String) -> Result<Self> {
        let shown = fencing_tokens::redact(&url);
        let inner = crate::sql::noting_sqlite_file(&url, fencing_tokens::open_issuer(&url)).await?;
        Ok(Self {
            inner: InProcess::new(inner),
            shown,
        })
    }

    fn issuer(&self) -> PyResult<Arc<dyn TokenIssuer>> {
        self.inner.get("issuer").cloned()
    }
}

/// What each call runs on the runtime, shared by the sync methods (which
/// wait for it) and the `_start_*` ones of `fencing.aio` (which don't).
impl Issuer {
    fn acquire_call(
        &self,
        resource: String,
        ttl: f64,
        wait: f64,
    ) -> PyResult<impl Future<Output = Result<Lease>> + Send + 'static> {
        let (issuer, request, wait) = (
            self.issuer()?,
            request(resource, ttl)?,
            seconds("wait", wait)?,
        );
        Ok(async move { issuer.acquire(&request, wait).await.map(Lease::from) })
    }

    fn try_acquire_call(
        &self,
        resource: String,
        ttl: f64,
    ) -> PyResult<impl Future<Output = Result<Option<Lease>>> + Send + 'static> {
        let (issuer, request) = (self.issuer()?, request(resource, ttl)?);
        Ok(async move { Ok(issuer.try_acquire(&request).await?.map(Lease::from)) })
    }

    fn renew_call(
        &self,
        lease: &Lease,
    ) -> PyResult<impl Future<Output = Result<Lease>> + Send + 'static> {
        let (issuer, lease) = (self.issuer()?, lease.inner.clone());
        Ok(async move { issuer.renew(&lease).await.map(Lease::from) })
    }

    fn release_call(
        &self,
        lease: &Lease,
    ) -> PyResult<impl Future<Output = Result<()>> + Send + 'static> {
        let (issuer, lease) = (self.issuer()?, lease.inner.clone());
        Ok(async move { issuer.release(&lease).await })
    }

    fn holder_call(
        &self,
        resource: String,
    ) -> PyResult<impl Future<Output = Result<Option<Holding>>> + Send + 'static> {
        let issuer = self.issuer()?;
        Ok(async move {
            Ok(issuer.holder(&resource).await?.map(|h| Holding {
                holder: h.holder.as_str().to_owned(),
                token: h.token.get(),
            }))
        })
    }

    /// Releases a lease a cancelled taking got.
    fn give_back(&self) -> PyResult<GiveBack<Lease>> {
        let issuer = self.issuer()?;
        Ok(Box::new(move |lease: Lease| {
            Box::pin(async move {
                let _ = issuer.release(&lease.inner).await;
            })
        }))
    }

    fn remove_idle_call(
        &self,
        resource: String,
        idle: f64,
    ) -> PyResult<impl Future<Output = Result<&'static str>> + Send + 'static> {
        let (issuer, idle) = (self.issuer()?, seconds("idle", idle)?);
        Ok(async move { Ok(issuer.remove_idle(&resource, idle).await?.as_str()) })
    }

    fn raise_floor_call(
        &self,
        resource: String,
        floor: &Bound<'_, PyAny>,
    ) -> PyResult<impl Future<Output = Result<()>> + Send + 'static> {
        let (issuer, floor) = (self.issuer()?, token_from(floor)?);
        Ok(async move { issuer.raise_floor(&resource, floor).await })
    }
}

/// A `fencing.Store`, or the one behind a `fencing.aio.Store` (`.sync`).
fn store_of(value: &Bound<'_, PyAny>) -> PyResult<Arc<dyn FencedStore>> {
    if let Ok(store) = value.cast::<Store>() {
        return store.get().store();
    }
    if let Ok(sync) = value.getattr("sync")
        && let Ok(store) = sync.cast::<Store>()
    {
        return store.get().store();
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "fence takes (store, key) pairs, a store being a fencing.Store or a fencing.aio.Store: got {}",
        type_name(value)
    )))
}

fn request(resource: String, ttl: f64) -> PyResult<LeaseRequest> {
    Ok(LeaseRequest::new(resource, seconds("ttl", ttl)?))
}

#[pymethods]
impl Issuer {
    /// The backend's name: "etcd", "redis", "postgres", …
    #[getter]
    fn name(&self) -> PyResult<&'static str> {
        Ok(self.issuer()?.name())
    }

    /// The shortest TTL it grants, in seconds.
    #[getter]
    fn min_ttl(&self) -> PyResult<f64> {
        Ok(self.issuer()?.min_ttl().as_secs_f64())
    }

    /// A lock on `resource` for a `with` block: acquired (waiting up to
    /// `wait` seconds, as long as it takes if None), renewed in the
    /// background every third of `ttl`, each `(store, key)` of `fence`
    /// fenced with the new token before the block runs, released at its
    /// end.
    #[pyo3(signature = (resource, *, ttl = 30.0, wait = None, fence = Vec::new()))]
    fn lock(
        &self,
        resource: String,
        ttl: f64,
        wait: Option<f64>,
        fence: Vec<(Bound<'_, PyAny>, String)>,
    ) -> PyResult<Lock> {
        let fences: Vec<(Arc<dyn FencedStore>, String)> = fence
            .into_iter()
            .map(|(store, key)| Ok((store_of(&store)?, key)))
            .collect::<PyResult<_>>()?;
        Ok(Lock::new(
            self.issuer()?,
            resource,
            seconds("ttl", ttl)?,
            wait.map(|w| seconds("wait", w)).transpose()?,
            fences,
        ))
    }

    /// An election on `resource` for `candidate` (a name people read, e.g.
    /// the host): `with election.campaign() as term:` runs its block as
    /// leader, terms being leases of `ttl` renewed in the background, each
    /// `(store, key)` of `fence` fenced with a new term's token before its
    /// block runs (so a deposed leader's late writes there are refused);
    /// `election.leader()` says who leads.
    #[pyo3(signature = (resource, *, candidate, ttl = 30.0, fence = Vec::new()))]
    fn election(
        &self,
        resource: String,
        candidate: String,
        ttl: f64,
        fence: Vec<(Bound<'_, PyAny>, String)>,
    ) -> PyResult<crate::election::Election> {
        let fences: Vec<(Arc<dyn FencedStore>, String)> = fence
            .into_iter()
            .map(|(store, key)| Ok((store_of(&store)?, key)))
            .collect::<PyResult<_>>()?;
        Ok(crate::election::election(
            self.issuer()?,
            resource,
            candidate,
            seconds("ttl", ttl)?,
            fences,
        ))
    }

    /// Acquires `resource`, waiting up to `wait` seconds for its holder to
    /// release it or expire; `Timeout` after that. Nothing renews the
    /// lease: call `renew` before `ttl` passes, or use `lock`.
    #[pyo3(signature = (resource, *, ttl = 30.0, wait = 0.0))]
    fn acquire(&self, py: Python<'_>, resource: String, ttl: f64, wait: f64) -> PyResult<Lease> {
        wait_for(py, self.acquire_call(resource, ttl, wait)?)
    }

    /// Tries once: the lease, or None if another holder has `resource`.
    #[pyo3(signature = (resource, *, ttl = 30.0))]
    fn try_acquire(&self, py: Python<'_>, resource: String, ttl: f64) -> PyResult<Option<Lease>> {
        wait_for(py, self.try_acquire_call(resource, ttl)?)
    }

    /// Extends `lease` by its TTL, keeping its token; `LeaseLost` if it
    /// expired or was taken.
    fn renew(&self, py: Python<'_>, lease: &Lease) -> PyResult<Lease> {
        wait_for(py, self.renew_call(lease)?)
    }

    /// Gives `lease` up so the next holder gets in at once.
    fn release(&self, py: Python<'_>, lease: &Lease) -> PyResult<()> {
        wait_for(py, self.release_call(lease)?)
    }

    /// Who holds `resource` now, or None.
    fn holder(&self, py: Python<'_>, resource: String) -> PyResult<Option<Holding>> {
        wait_for(py, self.holder_call(resource)?)
    }

    /// Makes every token granted on `resource` from now on higher than
    /// `floor` (a migration from another issuer); `Busy` while it is held.
    fn raise_floor(
        &self,
        py: Python<'_>,
        resource: String,
        floor: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        wait_for(py, self.raise_floor_call(resource, floor)?)
    }

    /// Removes what `resource` keeps on the server (its counter, its lease
    /// record) if no lease is held and none was granted for `idle` seconds,
    /// never sending a token back: `"removed"`, `"absent"`, `"in-use"` or
    /// `"floored"` (a counter a floor put above the server's clock, kept).
    /// On the bucket lease and DynamoDB the call watches the record for
    /// `idle` seconds. `Unsupported` from an issuer that cannot remove its
    /// records safely (ZooKeeper, etcd, GCS).
    fn remove_idle(&self, py: Python<'_>, resource: String, idle: f64) -> PyResult<&'static str> {
        wait_for(py, self.remove_idle_call(resource, idle)?)
    }

    fn __repr__(&self) -> String {
        format!("Issuer({:?})", self.shown)
    }
}

/// `fencing.aio`'s way into a [`Issuer`]: its calls started on the runtime
/// (`_native._calls_of(obj)`), kept off the public class.
#[pyclass(frozen, module = "fencing._native", name = "_IssuerCalls")]
pub(crate) struct IssuerCalls(pub(crate) Py<Issuer>);

#[pymethods]
impl IssuerCalls {
    #[pyo3(signature = (calls, resource, ttl = 30.0, wait = 0.0))]
    fn start_acquire(
        &self,
        calls: &Completions,
        resource: String,
        ttl: f64,
        wait: f64,
    ) -> PyResult<u64> {
        let this = self.0.get();
        let give_back = this.give_back()?;
        calls.start_taking(this.acquire_call(resource, ttl, wait)?, give_back, None)
    }

    #[pyo3(signature = (calls, resource, ttl = 30.0))]
    fn start_try_acquire(&self, calls: &Completions, resource: String, ttl: f64) -> PyResult<u64> {
        let this = self.0.get();
        let give_back = this.give_back()?;
        calls.start_taking(
            this.try_acquire_call(resource, ttl)?,
            Box::new(move |taken: Option<Lease>| match taken {
                Some(lease) => give_back(lease),
                None => Box::pin(async {}),
            }),
            None,
        )
    }

    fn start_renew(&self, calls: &Completions, lease: &Lease) -> PyResult<u64> {
        let this = self.0.get();
        calls.start(this.renew_call(lease)?)
    }

    fn start_release(&self, calls: &Completions, lease: &Lease) -> PyResult<u64> {
        let this = self.0.get();
        calls.start_detached(this.release_call(lease)?)
    }

    fn start_holder(&self, calls: &Completions, resource: String) -> PyResult<u64> {
        let this = self.0.get();
        calls.start(this.holder_call(resource)?)
    }

    fn start_raise_floor(
        &self,
        calls: &Completions,
        resource: String,
        floor: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let this = self.0.get();
        calls.start(this.raise_floor_call(resource, floor)?)
    }

    fn start_remove_idle(&self, calls: &Completions, resource: String, idle: f64) -> PyResult<u64> {
        let this = self.0.get();
        calls.start(this.remove_idle_call(resource, idle)?)
    }
}
