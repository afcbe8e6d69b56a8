//! The issuer suite through the guard: what `issuer.lock(…)` promises on
//! every issuer (see [`fencing_core::lock`]). Run by
//! [`issuer_conformance!`](crate::issuer_conformance).

use std::sync::Arc;
use std::time::Duration;

use fencing_core::memory::MemoryStore;
use fencing_core::{Error, FencedStore, IssuerExt, TokenIssuer};

use crate::issuer::IssuerProfile;
use crate::unique_name;

/// Once the lease is taken away (released behind the guard's back), the
/// next renewal is refused: [`run`](fencing_core::LeaseGuard::run) drops
/// the work and answers `LeaseLost`, `lost()` resolves, and later work is
/// not started.
pub async fn guard_run_ends_when_the_lease_is_lost(
    issuer: Arc<dyn TokenIssuer>,
    p: &IssuerProfile,
) {
    let resource = unique_name("guard-lost");
    let held = issuer
        .lock(&resource)
        .ttl(p.ttl)
        .wait(Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("lock {resource}: {e}"));
    issuer
        .release(&held.lease())
        .await
        .unwrap_or_else(|e| panic!("release {resource} behind the guard: {e}"));
    // A renewal comes every third of the TTL; it is refused.
    let within = p.ttl + p.expiry_slack;
    let ran = tokio::time::timeout(
        within,
        held.run(std::future::pending::<Result<(), Error>>()),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{}: run still going {within:?} after the lease was released",
            issuer.name()
        )
    });
    assert!(
        matches!(ran, Err(Error::LeaseLost { .. })),
        "{}: run on a lost lease gave {ran:?}, not LeaseLost",
        issuer.name()
    );
    assert!(
        held.is_lost(),
        "{}: lost() resolved but is_lost() is false",
        issuer.name()
    );
    tokio::time::timeout(Duration::from_millis(100), held.lost())
        .await
        .expect("lost() resolves at once once lost");
    let started = held.run(async { Ok::<_, Error>("work") }).await;
    assert!(
        matches!(started, Err(Error::LeaseLost { .. })),
        "{}: work started on a lost lease: {started:?}",
        issuer.name()
    );
}

/// `release()` frees the resource at once, and so does dropping the guard
/// (in the background): the next lock gets in well inside the TTL, with a
/// higher token. The guard's watch (what a store bound to the lease reads)
/// answers `LeaseLost` from the moment it is released or dropped.
pub async fn guard_release_and_drop_free_at_once(issuer: Arc<dyn TokenIssuer>, p: &IssuerProfile) {
    let resource = unique_name("guard-release");
    let lock = |wait| issuer.lock(&resource).ttl(p.long_ttl).wait(wait);
    let first = lock(Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("lock {resource}: {e}"));
    let first_token = first.token();
    let first_watch = first.watch();
    first.release().await.expect("release");
    watch_is_lost(&first_watch, issuer.name(), "released");
    let within = p.long_ttl / 4;
    let second = lock(within).await.unwrap_or_else(|e| {
        panic!(
            "{}: not free {within:?} after release (TTL {:?}): {e}",
            issuer.name(),
            p.long_ttl
        )
    });
    assert!(
        second.token() > first_token,
        "{}: tokens must increase",
        issuer.name()
    );
    let second_token = second.token();
    let second_watch = second.watch();
    drop(second);
    watch_is_lost(&second_watch, issuer.name(), "dropped");
    let third = lock(within).await.unwrap_or_else(|e| {
        panic!(
            "{}: not free {within:?} after the guard was dropped (TTL {:?}): {e}",
            issuer.name(),
            p.long_ttl
        )
    });
    assert!(
        third.token() > second_token,
        "{}: tokens must increase",
        issuer.name()
    );
    // Still lost with the next holder in: what a store bound to a watch
    // reads before it writes.
    watch_is_lost(&first_watch, issuer.name(), "released");
    watch_is_lost(&second_watch, issuer.name(), "dropped");
    third.release().await.expect("release");
}

/// A guard that was released or dropped: its watch hands out no token.
fn watch_is_lost(watch: &fencing_core::keepalive::LeaseWatch, issuer: &str, how: &str) {
    let current = watch.current();
    assert!(
        matches!(current, Err(Error::LeaseLost { .. })) && watch.is_lost(),
        "{issuer}: the watch of a guard {how} still answers {current:?}"
    );
}

/// A process paused past its TTL (the runtime's only thread blocked: a
/// VM freeze, a stop) knows on waking that its lease is lost, before the
/// keep-alive's task has run: `run` answers `LeaseLost` without polling the
/// work (nothing it does before its first `.await` happens), `lost()`
/// resolves on its first poll, `current()` refuses the token. The next
/// holder then gets in.
pub async fn guard_sends_nothing_after_a_pause_past_the_ttl(
    issuer: Arc<dyn TokenIssuer>,
    p: &IssuerProfile,
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let resource = unique_name("guard-paused");
    let held = issuer
        .lock(&resource)
        .ttl(p.ttl)
        .wait(Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("lock {resource}: {e}"));
    let token = held.token();
    // The pause: no await, so nothing of this runtime runs meanwhile.
    std::thread::sleep(p.ttl + Duration::from_millis(100));
    let started = AtomicBool::new(false);
    let ran = poll_once(held.run(async {
        started.store(true, Ordering::SeqCst);
        Ok::<_, Error>(())
    }));
    assert!(
        !started.load(Ordering::SeqCst),
        "{}: work started on a lease past its deadline ({ran:?})",
        issuer.name()
    );
    assert!(
        matches!(ran, Some(Err(Error::LeaseLost { .. }))),
        "{}: run after the pause gave {ran:?}, not LeaseLost at once",
        issuer.name()
    );
    assert!(
        poll_once(held.lost()).is_some(),
        "{}: lost() did not resolve at once after the pause",
        issuer.name()
    );
    assert!(
        matches!(held.current(), Err(Error::LeaseLost { .. })),
        "{}: current() handed out token {token} after the pause",
        issuer.name()
    );
    assert!(held.is_lost());
    let next = issuer
        .lock(&resource)
        .ttl(p.long_ttl)
        .wait(p.ttl + p.expiry_slack + Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("{}: the next holder: {e}", issuer.name()));
    assert!(
        next.token() > token,
        "{}: tokens must increase",
        issuer.name()
    );
    drop(held);
    next.release().await.expect("release");
}

/// Polls `future` once, with no waker to wake: what it answers before
/// anything else of the runtime runs.
fn poll_once<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(future).poll(&mut cx) {
        std::task::Poll::Ready(out) => Some(out),
        std::task::Poll::Pending => None,
    }
}

/// Fence-on-acquire: the new holder's lock raises the mark of the keys it
/// names before it is handed out, so the former holder's late write is
/// refused though the new holder has written nothing yet.
pub async fn guard_fences_before_the_first_write(issuer: Arc<dyn TokenIssuer>, p: &IssuerProfile) {
    let resource = unique_name("guard-fence");
    let store = Arc::new(MemoryStore::new());
    let key = "out/report";
    let zombie = issuer
        .lock(&resource)
        .ttl(p.long_ttl)
        .wait(Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("lock {resource}: {e}"));
    let old = zombie.token();
    store
        .put(key, "from the zombie".into(), old)
        .await
        .expect("first write");
    zombie.release().await.expect("release");
    let next = issuer
        .lock(&resource)
        .ttl(p.long_ttl)
        .wait(Duration::from_secs(10))
        .fence(&store, [key])
        .await
        .unwrap_or_else(|e| panic!("lock {resource} with a fence: {e}"));
    let late = store.put(key, "late from the zombie".into(), old).await;
    assert!(
        matches!(late, Err(Error::StaleToken { .. })),
        "{}: the former holder (token {old}) wrote after the new holder (token {}) was handed its fenced lock: {late:?}",
        issuer.name(),
        next.token()
    );
    next.run(store.put(key, "from the new holder".into(), next.token()))
        .await
        .expect("the new holder writes");
    next.release().await.expect("release");
}
