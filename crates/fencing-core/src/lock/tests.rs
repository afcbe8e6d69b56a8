use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::memory::{MemoryIssuer, MemoryStore};

const TTL: Duration = Duration::from_millis(300);

#[tokio::test]
async fn every_issuer_shape_has_lock() {
    let concrete = MemoryIssuer::new();
    let shared = Arc::new(concrete.clone());
    let dynamic: Arc<dyn TokenIssuer> = shared.clone();
    for held in [
        concrete.lock("a").ttl(TTL).await.expect("concrete"),
        shared.lock("b").ttl(TTL).await.expect("Arc<I>"),
        dynamic.lock("c").ttl(TTL).await.expect("Arc<dyn>"),
    ] {
        assert!(!held.is_lost());
        held.release().await.expect("release");
    }
}

#[tokio::test]
async fn a_lost_lease_ends_run_and_lost() {
    let issuer: Arc<dyn TokenIssuer> = Arc::new(MemoryIssuer::new());
    let held = issuer.lock("jobs/a").ttl(TTL).await.expect("free");
    // Taken away behind the guard's back: the next renewal is refused.
    issuer.release(&held.lease()).await.expect("release");
    let ran = tokio::time::timeout(TTL * 2, held.run(std::future::pending::<Result<()>>()))
        .await
        .expect("run ends once the lease is lost");
    assert!(matches!(ran, Err(Error::LeaseLost { .. })), "{ran:?}");
    assert!(held.is_lost());
    let again = held.run(async { Ok::<_, Error>(()) }).await;
    assert!(matches!(again, Err(Error::LeaseLost { .. })), "{again:?}");
}

#[tokio::test]
async fn drop_releases_in_the_background() {
    let issuer: Arc<dyn TokenIssuer> = Arc::new(MemoryIssuer::new());
    let first = issuer
        .lock("jobs/b")
        .ttl(Duration::from_secs(30))
        .await
        .expect("free");
    let old = first.token();
    drop(first);
    let next = issuer
        .lock("jobs/b")
        .wait(Duration::from_secs(5))
        .await
        .expect("freed well before its 30 s TTL");
    assert!(next.token() > old);
}

#[tokio::test]
async fn a_held_resource_times_out_after_the_wait() {
    let issuer: Arc<dyn TokenIssuer> = Arc::new(MemoryIssuer::new());
    let _held = issuer
        .lock("jobs/c")
        .ttl(Duration::from_secs(30))
        .await
        .expect("free");
    let tried = issuer.lock("jobs/c").wait(Duration::ZERO).await;
    assert!(matches!(tried, Err(Error::Timeout { .. })), "{tried:?}");
    let waited = issuer.lock("jobs/c").wait(TTL).await;
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
}

#[tokio::test]
async fn fencing_on_acquire_refuses_the_former_holder_before_any_write() {
    let issuer: Arc<dyn TokenIssuer> = Arc::new(MemoryIssuer::new());
    let store = MemoryStore::new();
    let zombie = issuer.lock("jobs/d").ttl(TTL).await.expect("free");
    let old = zombie.token();
    store
        .put("out/d", "first".into(), old)
        .await
        .expect("first write");
    zombie.release().await.expect("release");
    let next = issuer
        .lock("jobs/d")
        .fence(&store, ["out/d", "out/e"])
        .await
        .expect("free");
    for key in ["out/d", "out/e"] {
        let late = store.put(key, "late".into(), old).await;
        assert!(
            matches!(late, Err(Error::StaleToken { .. })),
            "{key}: {late:?}"
        );
    }
    next.run(store.put("out/d", "second".into(), next.token()))
        .await
        .expect("the new holder writes");
}

#[tokio::test]
async fn a_store_above_the_new_token_fails_the_lock_and_releases_it() {
    let issuer: Arc<dyn TokenIssuer> = Arc::new(MemoryIssuer::new());
    let store = MemoryStore::new();
    store
        .fence("out/f", FencingToken::new(u64::MAX / 2))
        .await
        .expect("a mark from another issuer");
    let refused = issuer.lock("jobs/f").fence(&store, ["out/f"]).await;
    assert!(
        matches!(refused, Err(Error::StaleToken { .. })),
        "{refused:?}"
    );
    assert!(
        issuer.holder("jobs/f").await.expect("holder").is_none(),
        "released"
    );
}

#[tokio::test]
async fn a_bad_ttl_is_refused_before_anything_is_sent() {
    let issuer = MemoryIssuer::new();
    let bad = issuer.lock("jobs/g").ttl(Duration::ZERO).await;
    assert!(matches!(bad, Err(Error::InvalidInput { .. })), "{bad:?}");
}
