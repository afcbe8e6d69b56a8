//! Leases: what an issuer grants.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::{Error, FencingToken, Result};

/// Who holds (or asks for) a lease. Opaque to the issuer; the same holder
/// acquiring again may be treated as re-entrant.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HolderId(String);

impl HolderId {
    /// A holder id from any non-empty string of at most 256 bytes.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty or oversize id.
    pub fn new(id: impl Into<String>) -> Result<Self> {
        let id = id.into();
        if id.is_empty() || id.len() > 256 {
            return Err(Error::invalid_input(format!(
                "holder id must be 1..=256 bytes, got {}",
                id.len()
            )));
        }
        Ok(Self(id))
    }

    /// A fresh id, unique to this process and call: `host:pid:n:nanos`.
    pub fn unique() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".to_owned());
        Self(format!("{host}:{}:{n}:{nanos:09}", std::process::id()))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HolderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for HolderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HolderId({:?})", self.0)
    }
}

/// What to acquire: a resource, for a holder, for a time-to-live.
#[derive(Clone, Debug)]
pub struct LeaseRequest {
    /// The resource name, e.g. `"jobs/nightly-report"`.
    pub resource: String,
    /// Who asks. Defaults to [`HolderId::unique`].
    pub holder: HolderId,
    /// How long the lease lives without a renewal.
    pub ttl: Duration,
}

impl LeaseRequest {
    /// The longest resource name any issuer accepts.
    pub const MAX_RESOURCE_LEN: usize = 512;

    /// A request for `resource` with a fresh holder id.
    pub fn new(resource: impl Into<String>, ttl: Duration) -> Self {
        Self {
            resource: resource.into(),
            holder: HolderId::unique(),
            ttl,
        }
    }

    /// Sets the holder (the same holder acquiring again may be re-entrant).
    #[must_use]
    pub fn with_holder(mut self, holder: HolderId) -> Self {
        self.holder = holder;
        self
    }

    /// Checks the request before anything is sent: a resource of
    /// 1..=[`Self::MAX_RESOURCE_LEN`] bytes with no NUL, and a TTL of at
    /// least `min_ttl`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming what is wrong.
    pub fn validate(&self, min_ttl: Duration) -> Result<()> {
        let len = self.resource.len();
        if len == 0 || len > Self::MAX_RESOURCE_LEN {
            return Err(Error::invalid_input(format!(
                "resource name must be 1..={} bytes, got {len}",
                Self::MAX_RESOURCE_LEN
            )));
        }
        if self.resource.contains('\0') {
            return Err(Error::invalid_input("resource name contains a NUL byte"));
        }
        if self.ttl < min_ttl {
            return Err(Error::invalid_input(format!(
                "ttl {:?} is below this issuer's minimum of {min_ttl:?}",
                self.ttl
            )));
        }
        Ok(())
    }
}

/// A granted lease, carrying its fencing token.
///
/// The [`deadline`](Self::deadline) is local: it is measured on this
/// process's monotonic clock from the moment the acquire (or renew) request
/// was *sent*, so the lease cannot have expired at the issuer before it.
/// Stop work that needs the lease before the deadline; but correctness
/// comes from the token, which the store checks, not from the deadline.
#[derive(Clone, Debug)]
pub struct Lease {
    resource: String,
    token: FencingToken,
    holder: HolderId,
    ttl: Duration,
    deadline: Instant,
}

impl Lease {
    /// A lease granted by a request sent at `sent_at`.
    pub fn new(request: &LeaseRequest, token: FencingToken, sent_at: Instant) -> Self {
        Self {
            resource: request.resource.clone(),
            token,
            holder: request.holder.clone(),
            ttl: request.ttl,
            deadline: sent_at + request.ttl,
        }
    }

    /// The same lease, renewed by a request sent at `sent_at`: same token,
    /// new deadline.
    #[must_use]
    pub fn renewed(&self, sent_at: Instant) -> Self {
        Self {
            deadline: sent_at + self.ttl,
            ..self.clone()
        }
    }

    /// The leased resource.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The fencing token: present it with every write.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// Who holds the lease.
    pub fn holder(&self) -> &HolderId {
        &self.holder
    }

    /// The time-to-live the lease was granted with.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The local monotonic instant before which the lease cannot have expired.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left before the local deadline (zero once passed).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Whether the local deadline has passed: the lease may be gone.
    pub fn is_expired(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

/// Who holds a resource right now, as the issuer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// The current holder.
    pub holder: HolderId,
    /// The token of its lease.
    pub token: FencingToken,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_counts_from_the_request() {
        let sent = Instant::now();
        let req = LeaseRequest::new("r", Duration::from_secs(5));
        let lease = Lease::new(&req, FencingToken::new(3), sent);
        assert_eq!(lease.deadline(), sent + Duration::from_secs(5));
        let later = sent + Duration::from_secs(2);
        let renewed = lease.renewed(later);
        assert_eq!(renewed.token(), lease.token());
        assert_eq!(renewed.deadline(), later + Duration::from_secs(5));
        assert!(!lease.is_expired());
    }

    #[test]
    fn requests_are_validated() {
        let ok = LeaseRequest::new("jobs/a", Duration::from_secs(1));
        ok.validate(Duration::from_millis(10)).unwrap();
        assert!(
            LeaseRequest::new("", Duration::from_secs(1))
                .validate(Duration::ZERO)
                .is_err()
        );
        assert!(
            LeaseRequest::new("a\0b", Duration::from_secs(1))
                .validate(Duration::ZERO)
                .is_err()
        );
        assert!(
            LeaseRequest::new("x".repeat(513), Duration::from_secs(1))
                .validate(Duration::ZERO)
                .is_err()
        );
        assert!(ok.validate(Duration::from_secs(2)).is_err());
        assert!(HolderId::new("").is_err());
        assert_ne!(HolderId::unique(), HolderId::unique());
    }
}
