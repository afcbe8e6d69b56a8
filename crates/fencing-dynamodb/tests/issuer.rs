//! The issuer conformance suite of `fencing_testkit` and the DynamoDB-only
//! cases (the counter never restarts, expiry on the waiter's clock),
//! against moto's DynamoDB at `FENCING_DYNAMODB_ENDPOINT` (default:
//! `integration/services.sh`'s on 127.0.0.1:5010). One table per test run.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::{Error, FencedStore, FencingToken, LeaseRequest, TokenIssuer};
use fencing_dynamodb::{DynamoConfig, DynamoIssuer, emulator};
use fencing_harness::env::DYNAMODB;
use fencing_harness::object_store::set_up;
use fencing_testkit::issuer::IssuerProfile;
use fencing_testkit::unique_name;

/// An issuer on this run's table (created if needed), or `None` when the
/// run skips DynamoDB.
async fn dynamo() -> Option<DynamoIssuer> {
    set_up(&DYNAMODB, "dynamodb", async |endpoint, table| {
        emulator::issuer(endpoint, table, None).await
    })
    .await
}

async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
    Some(Arc::new(dynamo().await?))
}

fn profile() -> IssuerProfile {
    IssuerProfile::with_ttl(Duration::from_millis(400))
}

mod suite {
    use super::{issuer, profile};
    fencing_testkit::issuer_conformance!(issuer, profile());
}

const TTL: Duration = Duration::from_millis(300);

/// Release keeps the counter: a new acquire, from this issuer or a fresh
/// one (another process), is above every earlier token.
#[tokio::test]
async fn release_then_acquire_is_higher_and_the_counter_never_restarts() {
    let Some(a) = dynamo().await else { return };
    let resource = unique_name("never-restarts");
    let first = a.try_acquire(&LeaseRequest::new(&resource, TTL)).await;
    let first = first.unwrap().expect("free");
    a.release(&first).await.unwrap();
    assert_eq!(a.holder(&resource).await.unwrap(), None);
    let second = a.try_acquire(&LeaseRequest::new(&resource, TTL)).await;
    let second = second.unwrap().expect("free after release");
    assert!(second.token() > first.token());
    a.release(&second).await.unwrap();
    let fresh = dynamo().await.unwrap();
    let third = fresh.try_acquire(&LeaseRequest::new(&resource, TTL)).await;
    let third = third.unwrap().expect("free");
    assert!(third.token() > second.token(), "{third:?} after {second:?}");
    fresh.release(&third).await.unwrap();
}

/// DynamoDB's clock (the `Date` of its answers) in microseconds, a second
/// ago: a lower bound for where a new item's counter starts.
fn a_second_ago_in_micros() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(since.as_micros()).unwrap() - 1_000_000
}

/// An absent item (a new table, another prefix) starts at DynamoDB's clock
/// in microseconds, not at 1; an item that exists (released, or with a
/// raised floor) goes on from its counter.
#[tokio::test]
async fn an_absent_item_starts_at_the_servers_clock() {
    let Some(issuer) = dynamo().await else { return };
    // A new table: nothing in it, and an issuer that has seen no answer.
    let endpoint = DYNAMODB.endpoint();
    let table = unique_name("new-table").replace('/', "-");
    let url = format!("dynamodb://{table}?endpoint={endpoint}&emulator=true&create_table=true");
    let on_new = DynamoConfig::from_url(&url)
        .unwrap()
        .connect_issuer()
        .await
        .expect("a new table");
    let resource = unique_name("starts");
    let before = a_second_ago_in_micros();
    let lease = on_new.try_acquire(&LeaseRequest::new(&resource, TTL)).await;
    let lease = lease.unwrap().expect("free");
    assert!(
        lease.token().get() > before,
        "a new table's first grant: {lease:?}"
    );
    on_new.release(&lease).await.unwrap();
    let again = on_new.try_acquire(&LeaseRequest::new(&resource, TTL)).await;
    let again = again.unwrap().expect("free");
    assert_eq!(again.token(), lease.token().checked_next().unwrap());
    on_new.release(&again).await.unwrap();
    on_new
        .raise_floor(&resource, FencingToken::new(again.token().get() + 40))
        .await
        .unwrap();
    let lease = on_new.try_acquire(&LeaseRequest::new(&resource, TTL)).await;
    assert_eq!(
        lease.unwrap().expect("free").token().get(),
        again.token().get() + 41,
        "an existing item counts on from its floor"
    );
    // Another prefix on the same table is another item: a low floor on it
    // is raised to the clock.
    let other = issuer.clone().with_prefix("other-prefix:");
    let floored = unique_name("floored");
    other
        .raise_floor(&floored, FencingToken::new(41))
        .await
        .unwrap();
    let lease = other.try_acquire(&LeaseRequest::new(&floored, TTL)).await;
    let lease = lease.unwrap().expect("free");
    assert!(lease.token().get() > before, "{lease:?}");
}

/// An operator's `aws dynamodb delete-item` takes the counter with it: the
/// next grant must still be above every token granted before, and a low
/// floor on the missing item must not bring it back down.
#[tokio::test]
async fn an_item_deleted_by_hand_grants_above_every_earlier_token() {
    let Some(issuer) = dynamo().await else { return };
    let resource = unique_name("deleted");
    let request = LeaseRequest::new(&resource, TTL);
    let mut highest = FencingToken::ZERO;
    for _ in 0..3 {
        let lease = issuer.try_acquire(&request).await.unwrap().expect("free");
        assert!(lease.token() > highest, "{lease:?} after {highest}");
        highest = lease.token();
        issuer.release(&lease).await.unwrap();
    }
    let delete = async || {
        issuer
            .client()
            .delete_item()
            .table_name(issuer.table())
            .key(
                "pk",
                AttributeValue::S(format!("{}{resource}", issuer.prefix())),
            )
            .send()
            .await
            .expect("the operator's delete-item");
    };
    delete().await;
    let lease = issuer.try_acquire(&request).await.unwrap().expect("free");
    assert!(
        lease.token() > highest,
        "after delete-item the next token was {}, below the {highest} granted before",
        lease.token()
    );
    highest = lease.token();
    issuer.release(&lease).await.unwrap();

    delete().await;
    issuer
        .raise_floor(&resource, FencingToken::new(1_000_000))
        .await
        .unwrap();
    let lease = issuer.try_acquire(&request).await.unwrap().expect("free");
    assert!(
        lease.token() > highest,
        "a floor of 1000000 on a deleted item brought the next token down to {} (granted before: {highest})",
        lease.token()
    );
}

/// Two processes whose estimates of DynamoDB's clock trail it by different
/// amounts (each counts from a `Date` truncated to the second): one sees
/// its first `Date` just before a second ticks over, the other just after.
/// The second grants on an item, an operator deletes it, and the first
/// makes it again within that second. Its first token must still be above
/// the deleted item's. Before the record lease waited for the server's
/// clock to pass a new item's first token, the first process started the
/// item again at its own estimate, up to a second behind, below the
/// tokens just granted.
#[tokio::test]
async fn an_item_made_again_within_the_second_by_a_process_whose_clock_trails_starts_above() {
    let Some(ahead) = dynamo().await else { return };
    let behind = dynamo().await.unwrap();
    let resource = unique_name("made-again");
    let request = LeaseRequest::new(&resource, TTL);
    let subsec = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_millis()
    };
    // The emulator runs on this machine: its clock is this one.
    while subsec() < 960 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    behind.holder(&unique_name("clock")).await.unwrap();
    while subsec() > 500 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    ahead.holder(&unique_name("clock")).await.unwrap();
    let mut granted = Vec::new();
    for _ in 0..3 {
        let lease = ahead.try_acquire(&request).await.unwrap().expect("free");
        granted.push(lease.token());
        ahead.release(&lease).await.unwrap();
    }
    ahead
        .client()
        .delete_item()
        .table_name(ahead.table())
        .key(
            "pk",
            AttributeValue::S(format!("{}{resource}", ahead.prefix())),
        )
        .send()
        .await
        .expect("the operator's delete-item");
    let again = behind.try_acquire(&request).await.unwrap().expect("free");
    let highest = *granted.iter().max().unwrap();
    assert!(
        again.token() > highest,
        "made again, the item started at {} below the {highest} it granted before deletion \
         (tokens {granted:?})",
        again.token()
    );
}

/// A maker that crashed between its two writes leaves an item made
/// unseeded: an `rvn` and no counter (so that an issuer of an older
/// release does not read it as a free counter 0 and grant 1). The next
/// grant seeds it at DynamoDB's clock, as it would seed a new item.
#[tokio::test]
async fn an_item_left_unseeded_by_a_crashed_maker_is_seeded_at_the_clock() {
    let Some(issuer) = dynamo().await else { return };
    let resource = unique_name("left-unseeded");
    let key = AttributeValue::S(format!("{}{resource}", issuer.prefix()));
    issuer
        .client()
        .put_item()
        .table_name(issuer.table())
        .item("pk", key)
        .item("rvn", AttributeValue::S(format!("{:032x}", 7u128)))
        .send()
        .await
        .expect("the crashed maker's write");
    let before = a_second_ago_in_micros();
    let lease = issuer.try_acquire(&LeaseRequest::new(&resource, TTL)).await;
    let lease = lease.unwrap().expect("an unseeded item is free");
    assert!(lease.token().get() > before, "{lease:?}");
}

/// A waiter judges expiry on its own clock from when it first saw the
/// record version: a lease that died long ago by the wall clock is still
/// waited out for one TTL, and a renew seen in between restarts the wait.
#[tokio::test]
async fn expiry_is_judged_on_the_waiters_clock() {
    // Seconds, not the suite's 300ms: the renew below must land inside its
    // TTL on a loaded two-core machine.
    const TTL: Duration = Duration::from_secs(2);
    let Some(holder) = dynamo().await else { return };
    let resource = unique_name("waiter-clock");
    let lease = holder.try_acquire(&LeaseRequest::new(&resource, TTL)).await;
    let lease = lease.unwrap().expect("free");
    // A waiter in another process (no memory of the grant).
    let waiter = dynamo().await.unwrap();
    let request = LeaseRequest::new(&resource, TTL);
    assert!(waiter.try_acquire(&request).await.unwrap().is_none());
    tokio::time::sleep(TTL / 3).await;
    let lease = holder.renew(&lease).await.expect("renew");
    tokio::time::sleep(TTL * 2 / 3).await;
    // One TTL since the first sighting, but a renew came in between.
    assert!(waiter.try_acquire(&request).await.unwrap().is_none());
    tokio::time::sleep(TTL + Duration::from_millis(200)).await;
    let taken = waiter.try_acquire(&request).await.unwrap();
    let taken = taken.expect("the same rvn for a whole TTL: taken over");
    assert!(taken.token() > lease.token());
    assert!(holder.renew(&lease).await.is_err(), "the old holder renews");
    waiter.release(&taken).await.unwrap();
}

/// `verify` finds nothing unsafe on the emulator's table.
#[tokio::test]
async fn verify_passes_on_the_emulator() {
    let Some(issuer) = dynamo().await else { return };
    let checks = issuer.verify().await.expect("verify");
    assert!(
        checks
            .iter()
            .all(fencing_core::safety::SafetyCheck::is_safe),
        "{checks:?}"
    );
    let names: Vec<_> = checks.iter().map(|c| c.name.as_str()).collect();
    assert!(
        names.contains(&"item expiry") && names.contains(&"lease clock"),
        "{names:?}"
    );
}

/// A free resource is granted in one request (the grant hands back the
/// item when it is held), up to the top of the range: the grant at
/// `u64::MAX` is the last, and the next is `TokenOutOfRange`, not a wrap.
#[tokio::test]
async fn the_last_token_is_u64_max() {
    let Some(issuer) = dynamo().await else { return };
    let resource = unique_name("top");
    issuer
        .raise_floor(&resource, DynamoIssuer::MAX_FLOOR)
        .await
        .expect("floor");
    let request = LeaseRequest::new(&resource, TTL);
    let last = issuer.try_acquire(&request).await.unwrap().expect("free");
    assert_eq!(last.token(), FencingToken::new(u64::MAX));
    assert!(
        issuer.try_acquire(&request).await.unwrap().is_none(),
        "held"
    );
    issuer.release(&last).await.unwrap();
    match issuer.try_acquire(&request).await {
        Err(Error::TokenOutOfRange { .. }) => {}
        other => panic!("expected TokenOutOfRange after u64::MAX, got {other:?}"),
    }
}

/// A holder granted `u64::MAX` that dies leaves no token for a takeover:
/// the waiter is refused with `TokenOutOfRange`, typed, and the item stays
/// readable (not wedged past the range).
#[tokio::test]
async fn a_dead_holder_at_u64_max_is_not_taken_over_past_the_range() {
    let Some(issuer) = dynamo().await else { return };
    let resource = unique_name("top-dead");
    issuer
        .raise_floor(&resource, DynamoIssuer::MAX_FLOOR)
        .await
        .expect("floor");
    let request = LeaseRequest::new(&resource, TTL);
    let last = issuer.try_acquire(&request).await.unwrap().expect("free");
    assert_eq!(last.token(), FencingToken::new(u64::MAX));
    // The holder dies; a waiter in another process sees the same version
    // for a whole TTL.
    let waiter = dynamo().await.unwrap();
    let request = LeaseRequest::new(&resource, TTL);
    assert!(
        waiter.try_acquire(&request).await.unwrap().is_none(),
        "held"
    );
    tokio::time::sleep(TTL + Duration::from_millis(100)).await;
    match waiter.try_acquire(&request).await {
        Err(Error::TokenOutOfRange { .. }) => {}
        other => panic!("a takeover past u64::MAX must be TokenOutOfRange, got {other:?}"),
    }
    // Readable still (the waiter itself judges the holder dead; an issuer
    // that has timed nothing names it).
    assert_eq!(waiter.holder(&resource).await.expect("readable"), None);
    let fresh = dynamo().await.unwrap();
    let holding = fresh
        .holder(&resource)
        .await
        .expect("the item is still a lease item");
    assert_eq!(holding.map(|h| h.token), Some(FencingToken::new(u64::MAX)));
}

/// A counter edited by hand to a number no token can be (`5.5`, `-3`):
/// DynamoDB itself must refuse the grant and the floor of a long-lived
/// issuer (its clock already set, so it sends no read first), leaving the
/// item as it was, and the error names the item as foreign. Before, `5.5 <
/// :max` let the grant through (counter 6.5, holder set) and the error
/// said that nothing was written.
#[tokio::test]
async fn a_counter_edited_by_hand_to_no_token_is_refused_by_dynamodb() {
    let Some(issuer) = dynamo().await else { return };
    for bad in ["5.5", "-3"] {
        let resource = unique_name("hand-edited");
        let request = LeaseRequest::new(&resource, TTL);
        let lease = issuer.try_acquire(&request).await.unwrap().expect("free");
        issuer.release(&lease).await.unwrap();
        let key = AttributeValue::S(format!("{}{resource}", issuer.prefix()));
        issuer
            .client()
            .update_item()
            .table_name(issuer.table())
            .key("pk", key.clone())
            .update_expression("SET #c = :bad")
            .expression_attribute_names("#c", "counter")
            .expression_attribute_values(":bad", AttributeValue::N(bad.into()))
            .send()
            .await
            .expect("the operator's edit");
        let item = async || {
            let out = issuer.client().get_item().table_name(issuer.table());
            let out = out.key("pk", key.clone()).consistent_read(true).send();
            out.await.expect("read back").item.expect("the item")
        };
        let before = item().await;
        let foreign = |what: &str, got: fencing_core::Result<()>| {
            let err = got.expect_err(what);
            assert!(
                matches!(err, Error::Backend { .. }) && err.chain().contains("not a lease item"),
                "{what} on counter {bad}: {err:?}"
            );
        };
        let granted = issuer.try_acquire(&request).await.map(|_| ());
        foreign("a grant", granted);
        assert_eq!(item().await, before, "a grant on counter {bad} wrote");
        // Another long-lived issuer, which knows no counter of this item.
        let other = dynamo().await.unwrap();
        let elsewhere = LeaseRequest::new(unique_name("clock"), TTL);
        other.try_acquire(&elsewhere).await.unwrap().expect("free");
        let granted = other.try_acquire(&request).await.map(|_| ());
        foreign("another issuer's grant", granted);
        assert_eq!(item().await, before, "a grant on counter {bad} wrote");
        let floor = issuer.raise_floor(&resource, FencingToken::new(100)).await;
        foreign("a floor", floor);
        assert_eq!(item().await, before, "a floor on counter {bad} wrote");
    }
}

/// One table as issuer and store: a store write to a lease item's key is
/// refused (the item carries no `lock_token`, so the store's condition
/// fails), and the lease item is left as it was: the lease goes on.
#[tokio::test]
async fn a_store_on_the_same_table_cannot_write_a_lease_item() {
    let Some(issuer) = dynamo().await else { return };
    let store = set_up(&DYNAMODB, "dynamodb", async |endpoint, table| {
        emulator::store(endpoint, table).await
    })
    .await
    .expect("the issuer's table is there");
    let resource = unique_name("shared-table");
    let request = LeaseRequest::new(&resource, Duration::from_secs(20));
    let lease = issuer.try_acquire(&request).await.unwrap().expect("free");
    let key = format!("{}{resource}", DynamoIssuer::DEFAULT_PREFIX);
    for attempt in [
        store.put(&key, "v".into(), lease.token()).await,
        store.fence(&key, lease.token()).await.map(drop),
        store.delete(&key, lease.token()).await,
    ] {
        assert!(
            attempt.is_err(),
            "a store write to the lease item {key:?}: {attempt:?}"
        );
    }
    let renewed = issuer.renew(&lease).await.expect("the lease goes on");
    issuer.release(&renewed).await.unwrap();
}
