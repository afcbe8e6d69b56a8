//! What a waiter remembers stays bounded.

use std::time::Duration;

use fencing_core::{LeaseRequest, TokenIssuer};
use fencing_harness::env::DYNAMODB;
use fencing_harness::object_store::set_up;
use fencing_testkit::unique_name;

use super::DynamoIssuer;

async fn issuer() -> Option<DynamoIssuer> {
    set_up(&DYNAMODB, "dynamodb", async |endpoint, table| {
        crate::DynamoConfig::from_url(&format!(
            "dynamodb://{table}?endpoint={endpoint}&emulator=true&create_table=true"
        ))?
        .connect_issuer()
        .await
    })
    .await
}

/// A waiter that meets 30 held resources keeps at most its cap of
/// records in memory, and still takes over the dead lease it keeps polling:
/// what it timed is not forgotten for the others.
#[tokio::test]
async fn sightings_stay_bounded_and_a_polled_dead_lease_is_still_taken_over() {
    const TTL: Duration = Duration::from_secs(2);
    let (Some(holder), Some(waiter)) = (issuer().await, issuer().await) else {
        return;
    };
    let waiter = waiter.with_memory_cap(8);
    let dead = unique_name("dead");
    let request = LeaseRequest::new(&dead, TTL);
    let gone = holder.try_acquire(&request).await.unwrap().expect("free");
    let live: Vec<_> = (0..30)
        .map(|i| LeaseRequest::new(unique_name(&format!("live-{i}")), Duration::from_secs(30)))
        .collect();
    // Together: each new item's first grant waits out DynamoDB's clock.
    let mut grants = tokio::task::JoinSet::new();
    for request in live.clone() {
        let holder = holder.clone();
        grants.spawn(async move { holder.try_acquire(&request).await });
    }
    while let Some(granted) = grants.join_next().await {
        granted.unwrap().unwrap().expect("free");
    }
    let request = LeaseRequest::new(&dead, TTL);
    assert!(waiter.try_acquire(&request).await.unwrap().is_none());
    let first_seen = tokio::time::Instant::now();
    let mut taken = None;
    for (i, other) in live.iter().enumerate() {
        assert!(waiter.try_acquire(other).await.unwrap().is_none());
        if i % 5 == 4 && taken.is_none() {
            // On a slow machine the TTL may pass within this loop.
            taken = waiter.try_acquire(&request).await.unwrap();
            if taken.is_some() {
                assert!(first_seen.elapsed() >= TTL, "taken over early");
            }
        }
        // A waiter that forgot its first sighting would time the dead
        // lease from a later poll, past this pause, and not take over
        // below.
        if i == 15 {
            tokio::time::sleep(TTL / 2).await;
        }
    }
    let tracked = waiter.leases.remembered();
    assert!(
        tracked <= 8,
        "the waiter keeps {tracked} sightings, above its cap of 8"
    );
    if taken.is_none() {
        tokio::time::sleep_until(first_seen + TTL + Duration::from_millis(100)).await;
        taken = waiter.try_acquire(&request).await.unwrap();
    }
    let taken = taken.expect("the dead lease it kept polling is taken over");
    assert!(taken.token() > gone.token());
}
