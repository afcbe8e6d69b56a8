//! Leases: what an issuer grants.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

    /// A fresh, unguessable id: `host:pid:` and 128 random bits in hex.
    ///
    /// Host and pid are only there for people reading `holder` output; the
    /// random part makes the id unique. On a re-entrant issuer (Redis, SQL,
    /// memory) an id is a capability: whoever presents it gets the holder's
    /// lease and token back. That is why a restarted process must not reuse
    /// a stable, hand-picked id: it would be handed the token of its paused
    /// predecessor, and both would write with it.
    pub fn unique() -> Self {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".to_owned());
        let random: u128 = rand::random();
        Self(format!("{host}:{}:{random:032x}", std::process::id()))
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

    /// The longest TTL any issuer accepts: one year. Far above any sane
    /// lease, far below where `Instant + ttl` or a server's millisecond
    /// counter could overflow.
    pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 60 * 60);

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
        check_ttl(self.ttl)
    }

    /// The TTL in whole milliseconds, rounded **up**, for a server that
    /// counts in milliseconds (Redis `PX`, SQL intervals): rounding down would
    /// let the server expire the lease before the holder's local deadline.
    pub fn ttl_millis_ceil(&self) -> u64 {
        ttl_millis_ceil(self.ttl)
    }

    /// The TTL in whole seconds, rounded up (etcd leases count in seconds).
    pub fn ttl_secs_ceil(&self) -> u64 {
        self.ttl
            .as_secs()
            .saturating_add(u64::from(self.ttl.subsec_nanos() > 0))
    }
}

/// Refuses a TTL above [`LeaseRequest::MAX_TTL`] (for renewals too).
///
/// # Errors
/// [`Error::InvalidInput`] naming the limit.
pub fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl > LeaseRequest::MAX_TTL {
        return Err(Error::invalid_input(format!(
            "ttl {ttl:?} is above the maximum of {:?} (one year)",
            LeaseRequest::MAX_TTL
        )));
    }
    Ok(())
}

/// The shortest idle time [`TokenIssuer::remove_idle`](crate::TokenIssuer::remove_idle)
/// takes: it is also the margin by which a removed counter must trail the
/// backend's clock.
pub const MIN_IDLE: Duration = Duration::from_secs(1);

/// Refuses an idle time below [`MIN_IDLE`] or above a year (as a TTL).
///
/// # Errors
/// [`Error::InvalidInput`] naming the limits.
pub fn check_idle(idle_for: Duration) -> Result<()> {
    if idle_for < MIN_IDLE || idle_for > LeaseRequest::MAX_TTL {
        return Err(Error::invalid_input(format!(
            "idle time {idle_for:?} is out of range: at least {MIN_IDLE:?} (it is also how far below the \
             backend's clock a removed counter must be) and at most {:?}",
            LeaseRequest::MAX_TTL
        )));
    }
    Ok(())
}

/// `ttl` in whole milliseconds, rounded up, saturating at `u64::MAX`.
pub fn ttl_millis_ceil(ttl: Duration) -> u64 {
    let millis = ttl.as_millis() + u128::from(!ttl.subsec_nanos().is_multiple_of(1_000_000));
    u64::try_from(millis).unwrap_or(u64::MAX)
}

/// When a wait of `wait` begun at `started` gives up: `started + wait`, or,
/// for a wait too long for the clock (`Duration::MAX`, a float of seconds
/// from Python), a century from `started`: as good as never, without the
/// overflow panic of `Instant + Duration`.
pub fn give_up_at(started: Instant, wait: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    started.checked_add(wait.min(CENTURY)).unwrap_or(started)
}

/// `at + ttl`, capped at `at + MAX_TTL` so that no TTL can overflow an
/// `Instant` (validated requests never reach the cap).
fn deadline_after(at: Instant, ttl: Duration) -> Instant {
    at.checked_add(ttl.min(LeaseRequest::MAX_TTL)).unwrap_or(at)
}

/// A granted lease, carrying its fencing token.
///
/// The [`deadline`](Self::deadline) is local: it is measured on this
/// process's monotonic clock from the moment the acquire (or renew) request
/// was *sent*, so the lease cannot have expired at the issuer before it.
/// Stop work that needs the lease before the deadline; but correctness
/// comes from the token, which the store checks, not from the deadline.
///
/// An issuer may attach an opaque **backend handle** to the leases it
/// grants ([`with_handle`](Self::with_handle)): its own record of the grant
/// (etcd's lease id and lock key, ZooKeeper's lock node and session), so
/// that renewing and releasing need no lookup. A lease rebuilt from its
/// parts with [`Lease::new`] (say, from a token saved by another process)
/// has none, and the issuer falls back to finding the grant by its token
/// and holder. Clones share the handle; [`renewed`](Self::renewed) keeps it.
#[derive(Clone)]
pub struct Lease {
    resource: String,
    token: FencingToken,
    holder: HolderId,
    ttl: Duration,
    deadline: Instant,
    handle: Option<Arc<dyn Any + Send + Sync>>,
}

impl Lease {
    /// A lease granted by a request sent at `sent_at`.
    pub fn new(request: &LeaseRequest, token: FencingToken, sent_at: Instant) -> Self {
        Self {
            resource: request.resource.clone(),
            token,
            holder: request.holder.clone(),
            ttl: request.ttl,
            deadline: deadline_after(sent_at, request.ttl),
            handle: None,
        }
    }

    /// The same lease with the issuer's backend `handle` attached (replacing
    /// any earlier one). For issuers: a caller never needs it. Use a type
    /// private to the issuer's crate, so that nobody else can make or read
    /// one.
    #[must_use]
    pub fn with_handle<T: Any + Send + Sync>(mut self, handle: T) -> Self {
        self.handle = Some(Arc::new(handle));
        self
    }

    /// The backend handle, if one of type `T` is attached.
    pub fn handle<T: Any>(&self) -> Option<&T> {
        self.handle.as_deref()?.downcast_ref()
    }

    /// Whether a backend handle is attached.
    pub fn has_handle(&self) -> bool {
        self.handle.is_some()
    }

    /// The same lease, renewed by a request sent at `sent_at`: same token,
    /// new deadline.
    #[must_use]
    pub fn renewed(&self, sent_at: Instant) -> Self {
        Self {
            deadline: deadline_after(sent_at, self.ttl),
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

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("resource", &self.resource)
            .field("token", &self.token)
            .field("holder", &self.holder)
            .field("ttl", &self.ttl)
            .field("deadline", &self.deadline)
            .field("handle", &self.handle.is_some())
            .finish()
    }
}

/// Who holds a resource right now, as the issuer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// The current holder: a lease's holder id, or `foreign:` and the
    /// record of another lock client sharing the lock (`etcdctl lock`,
    /// Curator, kazoo, redis-py).
    pub holder: HolderId,
    /// The token of its lease. For a foreign holder, the token its place
    /// in the issuer's order gives it (safe to present at a store while it
    /// holds), or [`FencingToken::ZERO`] where the issuer cannot read one.
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
    fn a_handle_is_kept_by_clones_and_renewals_and_hidden_from_debug() {
        fn send_sync_clone<T: Send + Sync + Clone>() {}
        send_sync_clone::<Lease>();

        #[derive(Debug, PartialEq)]
        struct Handle(&'static str);
        let req = LeaseRequest::new("r", Duration::from_secs(5));
        let bare = Lease::new(&req, FencingToken::new(3), Instant::now());
        assert!(!bare.has_handle());
        assert_eq!(bare.handle::<Handle>(), None);
        assert!(format!("{bare:?}").contains("handle: false"), "{bare:?}");

        let lease = bare.with_handle(Handle("secret"));
        assert_eq!(lease.handle::<Handle>(), Some(&Handle("secret")));
        assert_eq!(lease.handle::<String>(), None, "another type reads nothing");
        let renewed = lease.clone().renewed(Instant::now());
        assert_eq!(renewed.handle::<Handle>(), Some(&Handle("secret")));
        assert_eq!(renewed.token(), lease.token());
        let shown = format!("{renewed:?}");
        assert!(shown.contains("handle: true"), "{shown}");
        assert!(!shown.contains("secret"), "{shown}");
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
    }

    #[test]
    fn a_ttl_that_would_overflow_an_instant_is_refused_not_a_panic() {
        for ttl in [
            Duration::MAX,
            LeaseRequest::MAX_TTL + Duration::from_nanos(1),
        ] {
            let req = LeaseRequest::new("r", ttl);
            let err = req.validate(Duration::ZERO).unwrap_err();
            assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
            // Building a lease from an unvalidated request must not panic.
            let lease = Lease::new(&req, FencingToken::new(1), Instant::now());
            let _ = lease.renewed(Instant::now());
        }
        LeaseRequest::new("r", LeaseRequest::MAX_TTL)
            .validate(Duration::ZERO)
            .unwrap();
    }

    #[test]
    fn ttls_round_up() {
        let ms = |d| ttl_millis_ceil(d);
        assert_eq!(ms(Duration::from_micros(1500)), 2);
        assert_eq!(ms(Duration::from_nanos(1)), 1);
        assert_eq!(ms(Duration::from_millis(7)), 7);
        assert_eq!(ms(Duration::MAX), u64::MAX);
        let secs = |d| LeaseRequest::new("r", d).ttl_secs_ceil();
        assert_eq!(secs(Duration::from_millis(2001)), 3);
        assert_eq!(secs(Duration::from_secs(2)), 2);
        assert_eq!(secs(Duration::MAX), u64::MAX);
    }

    #[test]
    fn unique_holder_ids_are_random_and_unguessable() {
        let ids: std::collections::HashSet<_> = (0..1000).map(|_| HolderId::unique()).collect();
        assert_eq!(ids.len(), 1000);
        let id = HolderId::unique();
        let random = id.as_str().rsplit(':').next().unwrap();
        assert_eq!(random.len(), 32, "{id}");
        assert!(random.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    }
}
