//! Trust is verified, not assumed: safety checks that prove a deployment
//! enforces what the contract needs.
//!
//! [`FencedStore::verify`] probes a store (does it refuse a lower token? does
//! the server honour the preconditions the object-store loop relies on?) and
//! [`TokenIssuer::verify`] checks an issuer (do tokens rise across grants? is
//! the Redis counter durable and unreplicated?). `fence doctor` prints them.

use std::fmt;

use bytes::Bytes;

use crate::{Error, FencedStore, FencingToken, LeaseRequest, Result, TokenIssuer};

/// The key a store probe writes to. It keeps a mark (as every fenced key
/// does) and a short value saying what wrote it.
pub const PROBE_KEY: &str = "fencing-verify-probe";

/// What the probe's refused write would leave behind if it were applied.
const STALE: &[u8] = b"fencing verify probe: this stale write must be refused";

/// The resource an issuer probe acquires and releases.
pub const PROBE_RESOURCE: &str = "fencing-verify-probe";

/// What one check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    /// The check passed.
    Pass,
    /// Safe, but worth knowing (e.g. a single etcd member: no failover).
    Warn,
    /// The deployment can accept a stale write or re-issue a token.
    Unsafe,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Pass => "pass",
            Self::Warn => "warn",
            Self::Unsafe => "UNSAFE",
        })
    }
}

/// One safety check: what was checked, the verdict, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafetyCheck {
    /// What was checked, e.g. `"refuses a lower token"`.
    pub name: String,
    /// The verdict.
    pub verdict: Verdict,
    /// What was seen, and for an unsafe finding how to fix it.
    pub detail: String,
}

impl SafetyCheck {
    /// A passed check.
    pub fn pass(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(name, Verdict::Pass, detail)
    }

    /// A warning.
    pub fn warn(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(name, Verdict::Warn, detail)
    }

    /// An unsafe finding.
    pub fn unsafe_(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(name, Verdict::Unsafe, detail)
    }

    /// A check with the given verdict.
    pub fn new(name: impl Into<String>, verdict: Verdict, detail: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            verdict,
            detail: detail.into(),
        }
    }

    /// Whether the check found nothing unsafe.
    pub fn is_safe(&self) -> bool {
        self.verdict != Verdict::Unsafe
    }
}

/// Whether none of `checks` is unsafe.
pub fn all_safe(checks: &[SafetyCheck]) -> bool {
    checks.iter().all(SafetyCheck::is_safe)
}

/// The probe every store runs through the [`FencedStore`] trait itself, on
/// [`PROBE_KEY`]: a write above the mark is accepted, a write below it is
/// refused as stale, and the refused write changed nothing.
///
/// A store whose loop checks tokens on the client (the object stores) also
/// needs its server to honour preconditions; `BlobStore::verify` adds those
/// checks.
///
/// # Errors
/// A backend failure that kept the probe from running (unreachable server,
/// bad credentials). A probe that ran and found a hole is an
/// [`Verdict::Unsafe`] check, not an error.
pub async fn probe_store<S: FencedStore + ?Sized>(store: &S) -> Result<Vec<SafetyCheck>> {
    let mark = store.mark(PROBE_KEY).await?.unwrap_or(FencingToken::ZERO);
    // Above the store's floor too (clause 8), where it keeps one: the probe
    // key's mark may have been removed under it, and a probe at or below
    // the floor would only be refused by it.
    let floor = store.floor().await.ok().flatten();
    let mark = mark.max(floor.unwrap_or(FencingToken::ZERO));
    let (Some(low), Some(high)) = (
        mark.checked_next(),
        mark.checked_next().and_then(FencingToken::checked_next),
    ) else {
        return Ok(vec![SafetyCheck::warn(
            "probe",
            format!("the probe key {PROBE_KEY:?} is at mark {mark}: no room to probe above it"),
        )]);
    };
    if store.limits().check_token(high).is_err() {
        return Ok(vec![SafetyCheck::warn(
            "probe",
            format!("the probe key {PROBE_KEY:?} is at mark {mark}, the top of this store's range"),
        )]);
    }
    let mut checks = Vec::new();
    let accepted = Bytes::from(format!("fencing verify probe, token {high}"));
    store.put(PROBE_KEY, accepted.clone(), high).await?;
    checks.push(SafetyCheck::pass(
        "accepts a current token",
        format!("wrote {PROBE_KEY:?} at token {high}"),
    ));
    // Another probe may run at the same time and raise the mark further:
    // a refusal naming a mark at or above ours is a pass.
    match store.put(PROBE_KEY, Bytes::from_static(STALE), low).await {
        Err(Error::StaleToken { current, .. }) if current >= high => {
            checks.push(SafetyCheck::pass(
                "refuses a lower token",
                format!("token {low} refused: the store named its mark {current}"),
            ));
        }
        Err(Error::StaleToken { current, .. }) => checks.push(SafetyCheck::unsafe_(
            "refuses a lower token",
            format!("token {low} refused, but the store named mark {current}, below {high}"),
        )),
        Ok(()) => checks.push(SafetyCheck::unsafe_(
            "refuses a lower token",
            format!("token {low} was ACCEPTED after token {high}: this store does not fence"),
        )),
        Err(e) => return Err(e),
    }
    match store.get(PROBE_KEY).await? {
        Some(read) if read.value != STALE && read.token >= high => {
            checks.push(SafetyCheck::pass(
                "a refusal applies nothing",
                format!("{PROBE_KEY:?} reads back at token {}", read.token),
            ));
        }
        other => checks.push(SafetyCheck::unsafe_(
            "a refusal applies nothing",
            format!("after the refused write {PROBE_KEY:?} reads {other:?}"),
        )),
    }
    Ok(checks)
}

/// The probe every issuer runs through the [`TokenIssuer`] trait itself, on
/// [`PROBE_RESOURCE`]: two grants in a row, the second token above the first.
///
/// # Errors
/// A backend failure that kept the probe from running, or
/// [`Error::Timeout`] if someone else holds the probe resource.
pub async fn probe_issuer<I: TokenIssuer + ?Sized>(issuer: &I) -> Result<Vec<SafetyCheck>> {
    let ttl = issuer.min_ttl().max(std::time::Duration::from_secs(2));
    let wait = ttl * 3;
    let request = LeaseRequest::new(PROBE_RESOURCE, ttl);
    let first = issuer.acquire(&request, wait).await?;
    issuer.release(&first).await?;
    let request = LeaseRequest::new(PROBE_RESOURCE, ttl);
    let second = issuer.acquire(&request, wait).await?;
    issuer.release(&second).await?;
    let (a, b) = (first.token(), second.token());
    Ok(vec![if b > a {
        SafetyCheck::pass("tokens rise", format!("two grants in a row: {a} then {b}"))
    } else {
        SafetyCheck::unsafe_(
            "tokens rise",
            format!("two grants in a row gave {a} then {b}: tokens must strictly increase"),
        )
    }])
}

/// `checks` (a backend's own findings), then [`probe_issuer`]. An unsafe
/// finding (endpoints of two clusters, say) often makes the probe fail too:
/// then the probe's failure is reported as a warning beside the finding
/// rather than hiding it behind an error.
///
/// # Errors
/// The probe's failure when nothing in `checks` is unsafe.
pub async fn then_probe<I: TokenIssuer + ?Sized>(
    issuer: &I,
    mut checks: Vec<SafetyCheck>,
) -> Result<Vec<SafetyCheck>> {
    match probe_issuer(issuer).await {
        Ok(probe) => checks.extend(probe),
        Err(e) if !all_safe(&checks) => checks.push(SafetyCheck::warn(
            "tokens rise",
            format!("the probe could not run: {e}"),
        )),
        Err(e) => return Err(e),
    }
    Ok(checks)
}
