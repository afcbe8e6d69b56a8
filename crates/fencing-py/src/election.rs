//! `issuer.election(...)`: the Rust `Election`, whose campaign is a `Lock`
//! (`with election.campaign() as term:`), so a term has every rule a lock
//! has: renewed in the background, its keys fenced before the block runs,
//! its loss raised as `LeaseLost`, resigned at the block's end.

use std::sync::Arc;
use std::time::Duration;

use fencing_tokens::Result;
use fencing_tokens::election::{Election as RustElection, Leader as RustLeader};
use pyo3::prelude::*;

use crate::aio::Completions;
use crate::errors;
use crate::lock::Lock;
use crate::runtime::{InProcess, seconds, wait_for};

/// One candidate's view of an election: what `Issuer.election` returns.
#[pyclass(frozen, module = "fencing")]
pub(crate) struct Election {
    inner: InProcess<RustElection>,
    issuer: InProcess<Arc<dyn fencing_tokens::TokenIssuer>>,
}

impl Election {
    pub(crate) fn new(
        election: RustElection,
        issuer: Arc<dyn fencing_tokens::TokenIssuer>,
    ) -> Self {
        Self {
            inner: InProcess::new(election),
            issuer: InProcess::new(issuer),
        }
    }

    fn leader_call(
        &self,
    ) -> PyResult<impl Future<Output = Result<Option<Leader>>> + Send + 'static> {
        let election = self.inner.get("election")?.clone();
        Ok(async move { Ok(election.leader().await?.map(Leader::from)) })
    }
}

#[pymethods]
impl Election {
    /// The resource the terms are leases on.
    #[getter]
    fn resource(&self) -> PyResult<String> {
        Ok(self.inner.get("election")?.resource().to_owned())
    }

    /// This candidate's id.
    #[getter]
    fn candidate(&self) -> PyResult<String> {
        Ok(self.inner.get("election")?.candidate().to_owned())
    }

    /// A term's TTL, in seconds.
    #[getter]
    fn ttl(&self) -> PyResult<f64> {
        Ok(self.inner.get("election")?.ttl().as_secs_f64())
    }

    /// The campaign, as a lock: `with election.campaign() as term:` waits
    /// until this candidate leads (up to `wait` seconds, then `Timeout`;
    /// as long as it takes if None), fences the election's keys with the
    /// term's token, and runs the block as leader; the term is renewed in
    /// the background, `term.token` raises `LeaseLost` once it is lost (and
    /// `async with` cancels the block), and the block's end resigns, so
    /// the next candidate leads at once. `acquire()` / `release()` too.
    /// Every campaign holds under a fresh holder id (`candidate#<random>`).
    #[pyo3(signature = (*, wait = None))]
    fn campaign(&self, wait: Option<f64>) -> PyResult<Lock> {
        let election = self.inner.get("election")?;
        let mut lock = election.lock().map_err(|e| errors::to_py(&e))?;
        if let Some(wait) = wait {
            lock = lock.wait(seconds("wait", wait)?);
        }
        Ok(Lock::of(
            lock,
            self.issuer.get("election")?.clone(),
            election.resource().to_owned(),
        ))
    }

    /// Who leads now, if anyone (one question to the issuer).
    fn leader(&self, py: Python<'_>) -> PyResult<Option<Leader>> {
        wait_for(py, self.leader_call()?)
    }

    fn __repr__(&self) -> String {
        match self.inner.get("election") {
            Ok(e) => format!(
                "Election({:?}, candidate={:?}, ttl={})",
                e.resource(),
                e.candidate(),
                e.ttl().as_secs_f64()
            ),
            Err(_) => "Election(of another process)".to_owned(),
        }
    }
}

/// Who leads a term.
#[pyclass(frozen, get_all, module = "fencing")]
pub(crate) struct Leader {
    /// The candidate id the leader campaigned with (the whole holder id
    /// for a lease not taken by an election).
    candidate: String,
    /// The term's holder id on the issuer.
    holder: String,
    /// The term's fencing token.
    token: u64,
}

impl From<RustLeader> for Leader {
    fn from(leader: RustLeader) -> Self {
        Self {
            candidate: leader.candidate,
            holder: leader.holder.as_str().to_owned(),
            token: leader.token.get(),
        }
    }
}

#[pymethods]
impl Leader {
    fn __repr__(&self) -> String {
        format!(
            "Leader(candidate={:?}, token={})",
            self.candidate, self.token
        )
    }
}

/// An election on `resource` of `issuer` for `candidate`, with terms of
/// `ttl` and its takeover fences.
pub(crate) fn election(
    issuer: Arc<dyn fencing_tokens::TokenIssuer>,
    resource: String,
    candidate: String,
    ttl: Duration,
    fences: Vec<(Arc<dyn fencing_tokens::FencedStore>, String)>,
) -> Election {
    let mut election = RustElection::new(issuer.clone(), resource, candidate, ttl);
    for (store, key) in fences {
        election = election.fence_on_takeover(store, key);
    }
    Election::new(election, issuer)
}

/// `fencing.aio`'s way into a [`Election`]: its calls started on the runtime
/// (`_native._calls_of(obj)`), kept off the public class.
#[pyclass(frozen, module = "fencing._native", name = "_ElectionCalls")]
pub(crate) struct ElectionCalls(pub(crate) Py<Election>);

#[pymethods]
impl ElectionCalls {
    fn start_leader(&self, calls: &Completions) -> PyResult<u64> {
        let this = self.0.get();
        calls.start(this.leader_call()?)
    }
}
