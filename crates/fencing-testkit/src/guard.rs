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
/// higher token.
pub async fn guard_release_and_drop_free_at_once(issuer: Arc<dyn TokenIssuer>, p: &IssuerProfile) {
    let resource = unique_name("guard-release");
    let lock = |wait| issuer.lock(&resource).ttl(p.long_ttl).wait(wait);
    let first = lock(Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("lock {resource}: {e}"));
    let first_token = first.token();
    first.release().await.expect("release");
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
    drop(second);
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
    third.release().await.expect("release");
}

/// Fence-on-acquire: the new holder's lock raises the mark of the keys it
/// names before it is handed out, so the former holder's late write is
/// refused though the new holder has written nothing yet.
pub async fn guard_fences_before_the_first_write(issuer: Arc<dyn TokenIssuer>, p: &IssuerProfile) {
    let resource = unique_name("guard-fence");
    let store = MemoryStore::new();
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
