//! The issuer suite: the [`TokenIssuer`] contract, one function per clause.
//!
//! Each function takes the issuer under test and an [`IssuerProfile`] and
//! panics with a message on any breach. Run them all with
//! [`issuer_conformance!`](crate::issuer_conformance).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fencing_core::memory::MemoryStore;
use fencing_core::{Error, FencingToken, HolderId, Lease, LeaseRequest, Result, TokenIssuer};

use crate::history::{HistoryReport, quick_check};
use crate::unique_name;

/// How to exercise an issuer.
#[derive(Clone, Copy, Debug)]
pub struct IssuerProfile {
    /// A short TTL the issuer honours, for the expiry tests.
    pub ttl: Duration,
    /// A TTL that no test outlives.
    pub long_ttl: Duration,
    /// How long after the TTL the issuer may take to free the resource
    /// (e.g. a ZooKeeper session expiring on the server's tick).
    pub expiry_slack: Duration,
}

impl IssuerProfile {
    /// A profile with a given short TTL, a long TTL of 60 s and a slack of
    /// twice the TTL.
    pub fn with_ttl(ttl: Duration) -> Self {
        Self {
            ttl,
            long_ttl: Duration::from_secs(60),
            expiry_slack: ttl * 2,
        }
    }
}

const WAIT: Duration = Duration::from_secs(10);

/// Acquires `resource` for `ttl`, waiting up to 10 s, or panics.
pub async fn grant(issuer: &dyn TokenIssuer, resource: &str, ttl: Duration) -> Lease {
    let lease = issuer
        .acquire(&LeaseRequest::new(resource, ttl), WAIT)
        .await;
    lease.unwrap_or_else(|e| panic!("acquire {resource}: {e}"))
}

/// Acquires `resource` for `ttl` without waiting: it must be free.
pub async fn grant_now(issuer: &dyn TokenIssuer, resource: &str, ttl: Duration) -> Lease {
    let lease = issuer.try_acquire(&LeaseRequest::new(resource, ttl)).await;
    let lease = lease.unwrap_or_else(|e| panic!("try_acquire {resource}: {e}"));
    lease.unwrap_or_else(|| panic!("{resource} is not free"))
}

/// Panics unless `result` is `LeaseLost`; `what` names the call.
pub fn assert_lease_lost<T: std::fmt::Debug>(result: Result<T>, what: &str) {
    match result {
        Err(Error::LeaseLost { .. }) => {}
        other => panic!("{what} must fail with LeaseLost, got {other:?}"),
    }
}

/// Panics unless `resource` is held: someone else's `try_acquire` (for
/// `ttl`) gets nothing. `what` says what was granted if it does.
pub async fn assert_held(issuer: &dyn TokenIssuer, resource: &str, ttl: Duration, what: &str) {
    let other = issuer.try_acquire(&LeaseRequest::new(resource, ttl)).await;
    let other = other.expect("try_acquire");
    assert!(other.is_none(), "{what}: {other:?}");
}

/// The token `resource`'s holder holds, or a panic if nobody does.
async fn held_token(issuer: &dyn TokenIssuer, resource: &str) -> FencingToken {
    let holding = issuer.holder(resource).await.expect("holder");
    holding
        .unwrap_or_else(|| panic!("nobody holds {resource}"))
        .token
}

/// A lease with the short TTL left to expire, and the next holder's lease
/// (granted once it has): the zombie and its successor.
async fn lose(issuer: &dyn TokenIssuer, p: &IssuerProfile, name: &str) -> (String, Lease, Lease) {
    let resource = unique_name(name);
    let zombie = grant(issuer, &resource, p.ttl).await;
    let request = LeaseRequest::new(&resource, p.long_ttl);
    let next = issuer
        .acquire(&request, p.ttl + p.expiry_slack + WAIT)
        .await;
    let next = next.expect("the resource is free once the TTL has passed");
    (resource, zombie, next)
}

/// Grants on one resource carry strictly increasing tokens.
pub async fn tokens_strictly_increase(issuer: &dyn TokenIssuer, p: &IssuerProfile) {
    let resource = unique_name("increase");
    let mut last = None;
    for i in 0..10 {
        let lease = grant(issuer, &resource, p.long_ttl).await;
        if let Some(prev) = last {
            assert!(
                lease.token() > prev,
                "grant #{i} got token {} after {prev}",
                lease.token()
            );
        }
        last = Some(lease.token());
        issuer.release(&lease).await.expect("release");
    }
}

/// While a lease is live, nobody else gets it, and `holder` names the holder.
pub async fn one_live_holder(issuer: &dyn TokenIssuer, p: &IssuerProfile) {
    let resource = unique_name("exclusive");
    let a = grant_now(issuer, &resource, p.long_ttl).await;
    let what = "a second holder was granted a live lease";
    assert_held(issuer, &resource, p.long_ttl, what).await;
    let holding = issuer
        .holder(&resource)
        .await
        .expect("holder")
        .expect("someone holds it");
    assert_eq!(holding.holder, *a.holder());
    assert_eq!(holding.token, a.token());
    issuer.release(&a).await.expect("release");
    assert_eq!(issuer.holder(&resource).await.expect("holder"), None);
}

/// A holder that stops renewing loses the lease after its TTL; the next
/// acquire gets a higher token.
pub async fn expiry_frees_the_resource(issuer: &dyn TokenIssuer, p: &IssuerProfile) {
    let (_, first, second) = lose(issuer, p, "expiry").await;
    assert!(
        second.token() > first.token(),
        "{} after {}",
        second.token(),
        first.token()
    );
    // The first lease cannot have expired before its deadline, which counts
    // from before its request was sent.
    assert!(
        Instant::now() + Duration::from_millis(50) >= first.deadline(),
        "granted again {:?} before the first lease's TTL could have passed",
        first.deadline() - Instant::now()
    );
    issuer.release(&second).await.expect("release");
}

/// Renewing keeps the token and extends the lease past its first TTL.
pub async fn renew_keeps_token_and_extends(issuer: &dyn TokenIssuer, p: &IssuerProfile) {
    let resource = unique_name("renew");
    let lease = grant(issuer, &resource, p.ttl).await;
    let mut current = lease.clone();
    // Renew at 40% of the TTL for 2.5 TTLs: without renewal it would expire.
    let until = Instant::now() + p.ttl * 5 / 2;
    while Instant::now() < until {
        tokio::time::sleep(p.ttl * 2 / 5).await;
        current = issuer.renew(&current).await.expect("renew of a live lease");
        assert_eq!(current.token(), lease.token(), "renew changed the token");
        assert!(
            current.deadline() > lease.deadline(),
            "renew did not move the deadline"
        );
    }
    let what = "a renewed lease was granted to someone else";
    assert_held(issuer, &resource, p.long_ttl, what).await;
    issuer.release(&current).await.expect("release");
}

/// Renewing a lease that expired and was taken fails with `LeaseLost`.
pub async fn renew_after_loss_fails(issuer: &dyn TokenIssuer, p: &IssuerProfile) {
    let (resource, zombie, next) = lose(issuer, p, "renew-lost").await;
    match issuer.renew(&zombie).await {
        Err(Error::LeaseLost { token, .. }) => assert_eq!(token, zombie.token()),
        other => panic!("renewing a lost lease must fail with LeaseLost, got {other:?}"),
    }
    let holding = held_token(issuer, &resource).await;
    assert_eq!(
        holding,
        next.token(),
        "the zombie's renew disturbed the new holder"
    );
    issuer.release(&next).await.expect("release");
}

/// Release lets the next holder in at once (not after the TTL).
pub async fn release_lets_next_in_at_once(issuer: &dyn TokenIssuer, p: &IssuerProfile) {
    let resource = unique_name("release");
    let a = grant(issuer, &resource, p.long_ttl).await;
    issuer.release(&a).await.expect("release");
    // A released resource is free at once.
    let b = grant_now(issuer, &resource, p.long_ttl).await;
    assert!(b.token() > a.token());
    issuer.release(&b).await.expect("release");
}

/// Releasing a lost lease fails with `LeaseLost` and leaves the new holder.
pub async fn release_after_loss_keeps_new_holder(issuer: &dyn TokenIssuer, p: &IssuerProfile) {
    let (resource, zombie, next) = lose(issuer, p, "release-lost").await;
    assert_lease_lost(issuer.release(&zombie).await, "releasing a lost lease");
    assert_eq!(held_token(issuer, &resource).await, next.token());
    issuer.release(&next).await.expect("release");
}

/// `acquire` gives up with `Timeout` after its wait while the lease is held.
pub async fn acquire_times_out_while_held(issuer: &dyn TokenIssuer, p: &IssuerProfile) {
    let resource = unique_name("timeout");
    let a = grant(issuer, &resource, p.long_ttl).await;
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    match issuer
        .acquire(&LeaseRequest::new(&resource, p.long_ttl), wait)
        .await
    {
        Err(Error::Timeout { .. }) => {
            let took = started.elapsed();
            assert!(took >= wait, "gave up early, after {took:?}");
            assert!(
                took < wait + Duration::from_secs(5),
                "gave up late, after {took:?}"
            );
        }
        other => panic!("expected Timeout while held, got {other:?}"),
    }
    issuer.release(&a).await.expect("release");
}

/// Resources are independent, nested names included: a holder of `a` does
/// not hold `a/b`, nor the other way round (a hazard where names become
/// key prefixes or tree paths, as in etcd and ZooKeeper).
pub async fn nested_resource_names_are_independent(issuer: &dyn TokenIssuer, p: &IssuerProfile) {
    let parent = unique_name("a");
    let child = format!("{parent}/b");
    let parent_lease = grant_now(issuer, &parent, p.long_ttl).await;
    // The child is not locked by its parent.
    let child_lease = grant_now(issuer, &child, p.long_ttl).await;
    assert_eq!(held_token(issuer, &parent).await, parent_lease.token());
    assert_eq!(held_token(issuer, &child).await, child_lease.token());
    issuer.release(&parent_lease).await.expect("release");
    assert_eq!(
        held_token(issuer, &child).await,
        child_lease.token(),
        "releasing the parent disturbed the child"
    );
    issuer.release(&child_lease).await.expect("release");
}

/// Many tasks acquiring at once: at most one holds at any moment, and every
/// grant's token is distinct and increasing in grant order.
pub async fn concurrent_acquirers_hold_one_at_a_time(
    issuer: Arc<dyn TokenIssuer>,
    p: &IssuerProfile,
) {
    let resource = unique_name("concurrent");
    let inside = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (issuer, inside, tokens, resource) = (
            issuer.clone(),
            inside.clone(),
            tokens.clone(),
            resource.clone(),
        );
        let ttl = p.long_ttl;
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let lease = issuer
                    .acquire(&LeaseRequest::new(&resource, ttl), Duration::from_secs(60))
                    .await
                    .expect("acquire under contention");
                let now_inside = inside.fetch_add(1, Ordering::SeqCst) + 1;
                assert_eq!(now_inside, 1, "{now_inside} holders at once");
                tokens.lock().expect("poisoned").push(lease.token());
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                issuer.release(&lease).await.expect("release");
            }
        }));
    }
    for t in tasks {
        t.await.expect("acquirer panicked");
    }
    let tokens = tokens.lock().expect("poisoned").clone();
    assert_eq!(tokens.len(), 32);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens in grant order are not strictly increasing: {tokens:?}"
    );
}

/// The same holder acquiring again never gets a new token while it holds
/// the lease; a re-entrant issuer gives the same token back.
pub async fn same_holder_keeps_its_token(issuer: &dyn TokenIssuer, p: &IssuerProfile) {
    let resource = unique_name("reentrant");
    let holder = HolderId::unique();
    let request = LeaseRequest::new(&resource, p.long_ttl).with_holder(holder);
    let first = issuer.try_acquire(&request).await.expect("try_acquire");
    let first = first.expect("free");
    let again = issuer
        .try_acquire(&request)
        .await
        .expect("try_acquire again");
    match (issuer.reentrant(), again) {
        (true, Some(again)) => assert_eq!(
            again.token(),
            first.token(),
            "re-entrant acquire changed the token"
        ),
        (true, None) => panic!("issuer says it is re-entrant but refused its own holder"),
        (false, Some(again)) => panic!(
            "non-re-entrant issuer granted a held lease again with token {}",
            again.token()
        ),
        (false, None) => {}
    }
    issuer.release(&first).await.expect("release");
}

/// A lease's local deadline is counted from before the request was sent.
pub async fn deadline_is_conservative(issuer: &dyn TokenIssuer, p: &IssuerProfile) {
    let resource = unique_name("deadline");
    let before = Instant::now();
    let lease = grant(issuer, &resource, p.long_ttl).await;
    let after = Instant::now();
    assert!(
        lease.deadline() >= before + p.long_ttl,
        "deadline earlier than the request"
    );
    assert!(
        lease.deadline() <= after + p.long_ttl,
        "deadline counted from after the grant"
    );
    issuer.release(&lease).await.expect("release");
}

/// Bad requests are refused with `InvalidInput` before anything is granted.
pub async fn bad_requests_are_refused(issuer: &dyn TokenIssuer, p: &IssuerProfile) {
    for (what, request) in [
        ("an empty resource", LeaseRequest::new("", p.long_ttl)),
        ("a resource with NUL", LeaseRequest::new("a\0b", p.long_ttl)),
        (
            "an oversize resource",
            LeaseRequest::new("r".repeat(LeaseRequest::MAX_RESOURCE_LEN + 1), p.long_ttl),
        ),
        (
            "a zero TTL",
            LeaseRequest::new(unique_name("zero-ttl"), Duration::ZERO),
        ),
        (
            // `Instant + ttl` would overflow: a typed error, never a panic.
            "a TTL of Duration::MAX",
            LeaseRequest::new(unique_name("max-ttl"), Duration::MAX),
        ),
        (
            "a TTL above LeaseRequest::MAX_TTL",
            LeaseRequest::new(
                unique_name("huge-ttl"),
                LeaseRequest::MAX_TTL + Duration::from_secs(1),
            ),
        ),
    ] {
        match issuer.try_acquire(&request).await {
            Err(Error::InvalidInput { .. }) => {}
            other => panic!("{what} must be refused with InvalidInput, got {other:?}"),
        }
        match issuer.acquire(&request, Duration::from_millis(100)).await {
            Err(Error::InvalidInput { .. }) => {}
            other => panic!("{what}: acquire must refuse it with InvalidInput, got {other:?}"),
        }
    }
}

/// A `Lease` with the holder's token but another holder id (rebuilt, or
/// forged) cannot renew or release the real holder's lease: `LeaseLost`,
/// and the holder keeps it.
pub async fn another_holders_lease_cannot_renew_or_release(
    issuer: &dyn TokenIssuer,
    p: &IssuerProfile,
) {
    let resource = unique_name("impostor");
    let request = LeaseRequest::new(&resource, p.long_ttl);
    let lease = issuer.acquire(&request, WAIT).await.expect("acquire");
    let impostor = fencing_core::Lease::new(
        &LeaseRequest::new(&resource, p.long_ttl),
        lease.token(),
        std::time::Instant::now(),
    );
    let what = "renewing another holder's lease";
    assert_lease_lost(issuer.renew(&impostor).await, what);
    let what = "releasing another holder's lease";
    assert_lease_lost(issuer.release(&impostor).await, what);
    let holding = issuer.holder(&resource).await.expect("holder");
    assert_eq!(
        holding.map(|h| (h.holder, h.token)),
        Some((lease.holder().clone(), lease.token())),
        "the real holder keeps the lease"
    );
    issuer
        .renew(&lease)
        .await
        .expect("the real holder still renews");
    issuer.release(&lease).await.expect("release");
}

/// A floor that leaves no room for a token above it is refused with
/// `TokenOutOfRange`, and the resource still grants afterwards.
pub async fn floor_without_room_is_refused(issuer: &dyn TokenIssuer, p: &IssuerProfile) {
    let resource = unique_name("floor-top");
    match issuer
        .raise_floor(&resource, FencingToken::new(u64::MAX))
        .await
    {
        Err(Error::TokenOutOfRange { .. }) => {}
        other => panic!("a floor of u64::MAX must be refused with TokenOutOfRange, got {other:?}"),
    }
    // The refused floor changed nothing.
    let lease = grant(issuer, &resource, p.long_ttl).await;
    issuer.release(&lease).await.expect("release");
}

/// After `raise_floor`, grants are above the floor; a lower floor changes
/// nothing; tokens keep rising.
pub async fn floor_puts_later_tokens_above_it(issuer: &dyn TokenIssuer, p: &IssuerProfile) {
    let resource = unique_name("floor");
    let first = grant(issuer, &resource, p.long_ttl).await;
    issuer.release(&first).await.expect("release");
    let floor = FencingToken::new(first.token().get() + 1_000_000);
    issuer
        .raise_floor(&resource, floor)
        .await
        .expect("raise_floor on a free resource");
    issuer
        .raise_floor(&resource, first.token())
        .await
        .expect("a lower floor is accepted and changes nothing");
    let next = grant(issuer, &resource, p.long_ttl).await;
    assert!(
        next.token() > floor,
        "token {} after a floor of {floor}",
        next.token()
    );
    issuer.release(&next).await.expect("release");
    let after = grant(issuer, &resource, p.long_ttl).await;
    assert!(after.token() > next.token());
    issuer.release(&after).await.expect("release");
}

/// [`TokenIssuer::remove_idle`]: a live lease, or one the idle time has
/// not passed over, is never removed (a grant racing the removal still
/// holds after it); a holder paused past its TTL and the idle time, whose
/// record is removed meanwhile, finds its lease lost, the next grant is
/// above its token and the store refuses its write; a record a floor put
/// above the backend's clock is kept. An issuer that cannot remove its
/// records must refuse by name ([`Error::Unsupported`] or
/// [`Error::UnsafeConfiguration`]).
pub async fn idle_records_are_removed_without_a_token_going_back(
    issuer: &dyn TokenIssuer,
    p: &IssuerProfile,
) {
    use fencing_core::{FencedStore, Removal};
    use tokio::time::sleep;

    // A flat name: ZooKeeper removes only names directly under its prefix.
    let resource = unique_name("idle").replace('/', "-");
    // Whole seconds: Redis counts idle time in them.
    let idle = Duration::from_secs(1);
    match issuer.remove_idle(&resource, idle).await {
        Ok(Removal::Absent) => {}
        Err(Error::Unsupported { backend, operation }) => {
            assert_eq!((backend, operation), (issuer.name(), "remove_idle"));
            return;
        }
        Err(Error::UnsafeConfiguration { reason, .. }) => {
            assert!(reason.contains(&resource), "{reason}");
            return;
        }
        other => panic!("a name never used keeps nothing to remove, got {other:?}"),
    }

    match issuer.remove_idle(&resource, Duration::ZERO).await {
        Err(Error::InvalidInput { .. }) => {}
        other => {
            panic!("an idle time of 0 (no margin below the clock) must be refused, got {other:?}")
        }
    }
    let held = grant(issuer, &resource, p.long_ttl).await;
    assert_eq!(
        issuer
            .remove_idle(&resource, idle)
            .await
            .expect("remove_idle"),
        Removal::InUse,
        "a live lease was removed"
    );
    issuer.release(&held).await.expect("release");
    // A grant while the removal judges the released record: whichever way
    // it is judged, the lease granted stays held.
    let (removal, racing) = tokio::join!(issuer.remove_idle(&resource, idle), async {
        sleep(idle / 4).await;
        grant(issuer, &resource, p.long_ttl).await
    });
    let removal = removal.expect("remove_idle racing a grant");
    assert_eq!(
        removal,
        Removal::InUse,
        "a record granted within the idle time was removed"
    );
    let holding = issuer.holder(&resource).await.expect("holder");
    assert_eq!(
        holding.map(|h| h.token),
        Some(racing.token()),
        "the grant that raced the removal no longer holds"
    );
    issuer.release(&racing).await.expect("release");

    // The paused holder.
    let store = MemoryStore::new();
    let zombie = grant(issuer, &resource, p.ttl).await;
    store
        .put("idle/account", "zombie's first".into(), zombie.token())
        .await
        .expect("the holder writes while its lease is live");
    let granted_at = Instant::now();
    sleep(p.ttl + p.expiry_slack + Duration::from_secs(3)).await;
    if !issuer.expiry_needs_watching() {
        // A sweep that keeps the record (its idle time not reached) must
        // not restart the record's idleness: the next one, with a shorter
        // idle time, still counts from the grant.
        let kept = issuer
            .remove_idle(&resource, Duration::from_secs(3600))
            .await
            .expect("remove_idle");
        assert!(
            matches!(kept, Removal::InUse | Removal::Floored),
            "a record granted {:?} ago was removed as idle for an hour: {kept:?}",
            granted_at.elapsed()
        );
        sleep(Duration::from_millis(1200)).await;
    }
    assert_eq!(
        issuer
            .remove_idle(&resource, 2 * idle)
            .await
            .expect("remove_idle"),
        Removal::Removed,
        "the record of a lease dead for {:?}, past the idle time of {:?}, was kept",
        granted_at.elapsed(),
        2 * idle
    );
    assert_lease_lost(issuer.renew(&zombie).await, "renew after the removal");
    let next = grant(issuer, &resource, p.long_ttl).await;
    assert!(
        next.token() > zombie.token(),
        "token {} granted after the removal is not above {} granted before it",
        next.token(),
        zombie.token()
    );
    store
        .put("idle/account", "next".into(), next.token())
        .await
        .expect("the next holder writes");
    match store
        .put("idle/account", "zombie's late".into(), zombie.token())
        .await
    {
        Err(Error::StaleToken { .. }) => {}
        other => panic!("the paused holder's write after the removal: {other:?}"),
    }
    issuer.release(&next).await.expect("release");

    // A floor above the clock keeps the record.
    let floor = FencingToken::new(1 << 62);
    issuer
        .raise_floor(&resource, floor)
        .await
        .expect("raise_floor");
    sleep(idle + Duration::from_millis(2100)).await;
    assert_eq!(
        issuer
            .remove_idle(&resource, idle)
            .await
            .expect("remove_idle"),
        Removal::Floored,
        "a record a floor put above the clock was removed"
    );
    let after = grant(issuer, &resource, p.long_ttl).await;
    assert!(
        after.token() > floor,
        "token {} after floor {floor}",
        after.token()
    );
    issuer.release(&after).await.expect("release");
}

/// The Figure 9-6 zombie, with this issuer's short TTL and an in-memory
/// store (so only the issuer is under test), with and without fencing on
/// acquire. See [`zombie::zombie_is_refused`](crate::zombie::zombie_is_refused).
pub async fn zombie_is_refused(issuer: &dyn TokenIssuer, p: &IssuerProfile) {
    crate::zombie::zombie_is_refused(issuer, &MemoryStore::new(), p.ttl).await;
}

/// The randomized history checker with this issuer's short TTL and an
/// in-memory store: no stale write accepted, every refusal truly stale.
/// See [`quick_check`].
pub async fn history_checker_finds_no_stale_accept(
    issuer: Arc<dyn TokenIssuer>,
    p: &IssuerProfile,
) -> HistoryReport {
    quick_check(issuer, Arc::new(MemoryStore::new()), p.ttl).await
}
