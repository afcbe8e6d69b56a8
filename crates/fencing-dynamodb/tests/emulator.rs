//! The store conformance suite of `fencing_testkit` and the DynamoDB-only
//! cases (16 writers racing on one key, bad input, foreign items), against
//! moto's DynamoDB at `FENCING_DYNAMODB_ENDPOINT` (default:
//! `integration/services.sh`'s on 127.0.0.1:5010). One table per test run,
//! named at random. A server that does not answer fails the test, naming it.

use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use bytes::Bytes;
use fencing_core::{Error, FencedStore, FencingToken};
use fencing_dynamodb::{DynamoConfig, DynamoStore, emulator};
use fencing_harness::env::DYNAMODB;
use fencing_harness::object_store::set_up;
use fencing_testkit::history::History;
use fencing_testkit::unique_name;

/// This run's table (created if needed), or `None` when the run skips
/// DynamoDB.
async fn dynamo() -> Option<DynamoStore> {
    set_up(&DYNAMODB, "dynamodb", emulator::store).await
}

async fn store() -> Option<Arc<dyn FencedStore>> {
    Some(Arc::new(dynamo().await?))
}

mod suite {
    fencing_testkit::store_conformance!(super::store);
}

fn t(n: u64) -> FencingToken {
    FencingToken::new(n)
}

/// The item's `version` attribute, read with the raw client.
async fn version(store: &DynamoStore, key: &str) -> u64 {
    let item = store
        .client()
        .get_item()
        .table_name(store.table())
        .key("pk", AttributeValue::S(key.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("raw get")
        .item
        .expect("an item");
    match item.get("version") {
        Some(AttributeValue::N(n)) => n.parse().expect("a count"),
        other => panic!("version is {other:?}"),
    }
}

/// 16 writers with tokens 1..=16 start together on one key, 20 rounds: the
/// key ends with token 16's value, every refusal is a StaleToken naming a
/// higher mark, no accepted write came after a higher one had completed,
/// and the server counted exactly the writes reported accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_writers_with_distinct_tokens_end_with_the_highest() {
    let Some(store) = dynamo().await else { return };
    let store = Arc::new(store);
    let (mut accepted, mut refused) = (0, 0);
    for round in 0..20 {
        let key = unique_name(&format!("race16-{round}"));
        let history = History::new();
        let barrier = Arc::new(tokio::sync::Barrier::new(16));
        let mut tasks = Vec::new();
        for writer in 1..=16usize {
            let token = writer as u64;
            let (store, history, key, barrier) =
                (store.clone(), history.clone(), key.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let value = Bytes::from(format!("token {token}"));
                match history.put(&*store, writer, &key, value, t(token)).await {
                    Ok(()) => true,
                    Err(Error::StaleToken {
                        presented, current, ..
                    }) => {
                        assert!(current > presented, "refused {presented} at mark {current}");
                        false
                    }
                    Err(e) => panic!("token {token}: {}", e.chain()),
                }
            }));
        }
        let mut round_accepted = 0;
        for task in tasks {
            if task.await.expect("writer panicked") {
                round_accepted += 1;
            } else {
                refused += 1;
            }
        }
        accepted += round_accepted;
        let tally = history.check_final(&*store, &key).await;
        assert!(tally.violations.is_empty(), "{:#?}", tally.violations);
        let got = store.get(&key).await.unwrap().expect("a value");
        assert_eq!((got.token, &got.value[..]), (t(16), &b"token 16"[..]));
        assert_eq!(version(&store, &key).await, round_accepted, "round {round}");
    }
    println!("16 writers x 20 rounds: {accepted} accepted, {refused} refused as stale");
    assert!(refused > 0, "the race proved nothing");
}

/// Bad input is typed and sends nothing: the key stays as it was.
#[tokio::test]
async fn bad_input_is_typed_and_writes_nothing() {
    let Some(store) = dynamo().await else { return };
    let key = unique_name("bad");
    store.put(&key, "kept".into(), t(5)).await.unwrap();
    let long = "k".repeat(DynamoStore::MAX_KEY_LEN + 1);
    for bad in ["", long.as_str()] {
        let e = store.put(bad, "x".into(), t(6)).await.unwrap_err();
        assert!(matches!(e, Error::InvalidInput { .. }), "{e:?}");
        assert!(matches!(
            store.get(bad).await,
            Err(Error::InvalidInput { .. })
        ));
    }
    // A key of exactly the limit is fine.
    let longest = "k".repeat(DynamoStore::MAX_KEY_LEN);
    store.put(&longest, "x".into(), t(1)).await.unwrap();
    // 400 KB is DynamoDB's item limit: refused before sending.
    let huge = Bytes::from(vec![b'x'; 400 * 1024 + 1]);
    let e = store.put(&key, huge, t(6)).await.unwrap_err();
    assert!(matches!(e, Error::InvalidInput { .. }), "{e:?}");
    // (moto counts a binary attribute by its base64 text, 4/3 of its bytes,
    // so a value right at the limit, which AWS takes, is not tried here.)
    let large = Bytes::from(vec![b'y'; 300 * 1024]);
    store.put(&longest, large.clone(), t(1)).await.unwrap();
    assert_eq!(store.get(&longest).await.unwrap().unwrap().value, large);
    let got = store.get(&key).await.unwrap().unwrap();
    assert_eq!((got.token, &got.value[..]), (t(5), &b"kept"[..]));
    assert_eq!(version(&store, &key).await, 1, "nothing else was written");
    // u64::MAX round-trips as a DynamoDB number.
    store.fence(&key, t(u64::MAX)).await.unwrap();
    assert_eq!(store.mark(&key).await.unwrap(), Some(t(u64::MAX)));
}

/// An item written without fencing (no lock_token) is neither read nor
/// overwritten.
#[tokio::test]
async fn a_foreign_item_is_refused() {
    let Some(store) = dynamo().await else { return };
    let key = unique_name("foreign");
    store
        .client()
        .put_item()
        .table_name(store.table())
        .item("pk", AttributeValue::S(key.clone()))
        .item("value", AttributeValue::S("not ours".into()))
        .send()
        .await
        .expect("raw put");
    for result in [
        store.put(&key, "x".into(), t(1)).await.map(drop),
        store.get(&key).await.map(drop),
        store.mark(&key).await.map(drop),
    ] {
        let e = result.unwrap_err();
        assert!(
            matches!(
                e,
                Error::Backend {
                    retryable: false,
                    ..
                }
            ) && e.chain().contains("not written through fencing"),
            "{e:?}"
        );
    }
}

/// A missing table is a non-retryable backend error; `create_table=true`
/// creates it; `verify` flags it missing.
#[tokio::test]
async fn a_missing_table_and_create_table() {
    if DYNAMODB.skipped() {
        return;
    }
    let endpoint = DYNAMODB.endpoint();
    let table = format!("{}-created", fencing_testkit::unique_prefix());
    let url = format!("dynamodb://{table}?endpoint={endpoint}&emulator=true");
    let missing = DynamoConfig::from_url(&url)
        .unwrap()
        .connect_store()
        .await
        .unwrap();
    let e = missing.put("k", "v".into(), t(1)).await.unwrap_err();
    if e.is_retryable() {
        DYNAMODB.unavailable(&e.chain());
    }
    assert!(
        matches!(
            e,
            Error::Backend {
                retryable: false,
                ..
            }
        ),
        "{e:?}"
    );
    let checks = missing.verify().await.unwrap();
    assert!(checks.iter().any(|c| !c.is_safe()), "{checks:#?}");

    let store = DynamoConfig::from_url(&format!("{url}&create_table=true"))
        .unwrap()
        .connect_store()
        .await
        .unwrap();
    store.put("k", "v".into(), t(1)).await.unwrap();
    let checks = store.verify().await.unwrap();
    assert!(checks.iter().all(|c| c.is_safe()), "{checks:#?}");
}

/// Without `emulator=true` the test keys are never used.
#[tokio::test]
async fn emulator_keys_only_when_asked() {
    let c = DynamoConfig::from_url("dynamodb://tab?endpoint=http://127.0.0.1:5010").unwrap();
    assert!(!c.emulator());
}

/// Nothing listening: a retryable backend error (refused, so never sent),
/// even for a write.
#[tokio::test]
async fn an_unreachable_endpoint_is_retryable_and_sends_nothing() {
    let store = DynamoStore::new(emulator::client("http://127.0.0.1:1"), "tab");
    let e = store.put("k", "v".into(), t(1)).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Backend {
                retryable: true,
                ..
            }
        ),
        "{e:?}"
    );
    let e = store.get("k").await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Backend {
                retryable: true,
                ..
            }
        ),
        "{e:?}"
    );
}

/// A store on a table of its own: a floor refuses on the whole table, so
/// no other test may share it.
async fn table_of_its_own(what: &str) -> Option<DynamoStore> {
    set_up(&DYNAMODB, what, emulator::store).await
}

/// Clause 15 where there is no mark: a key never written and a key whose
/// mark the floor let go refuse every token at or below it, and a key with
/// a mark keeps its mark's rule (the floor is read only by the writes that
/// find no mark).
#[tokio::test]
async fn floor_refuses_where_no_mark_is() {
    let Some(store) = table_of_its_own("floor").await else {
        return;
    };
    fencing_testkit::store::floor_refuses_where_no_mark_is(&store).await;
}

/// Zombies at a token between the floor and their keys' marks, while the
/// floor is raised over the marks and the marks are removed: each is
/// refused by its mark and then, once the mark is gone, by the floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn floor_raised_and_marks_removed_under_zombie_writes() {
    let Some(store) = table_of_its_own("floor-race").await else {
        return;
    };
    fencing_testkit::store::floor_raised_and_marks_removed_under_zombie_writes(Arc::new(store))
        .await;
}

/// The floor items are no key's: a write through the store cannot reach
/// them, removing marks leaves them, and one edited by hand is named.
#[tokio::test]
async fn the_floor_item_is_no_keys_and_a_hand_edit_is_named() {
    let Some(store) = table_of_its_own("floor-item").await else {
        return;
    };
    assert!(matches!(
        store
            .put(fencing_dynamodb::FLOOR_PK, "x".into(), t(9))
            .await,
        Err(Error::InvalidInput { .. })
    ));
    store.raise_floor(t(5)).await.expect("raise");
    match store.fence("k", t(3)).await {
        Err(Error::StaleToken {
            presented, current, ..
        }) => assert_eq!((presented, current), (t(3), t(6))),
        other => panic!("a first write below the floor: {other:?}"),
    }
    store.fence("k", t(6)).await.expect("above the floor");
    store.raise_floor(t(10)).await.expect("raise");
    assert_eq!(store.remove_floored_marks(100).await.expect("remove"), 1);
    assert_eq!(store.floor().await.expect("floor"), Some(t(10)), "kept");
    store
        .client()
        .put_item()
        .table_name(store.table())
        .item(
            "pk",
            AttributeValue::S(fencing_dynamodb::floor_item_of("new")),
        )
        .item("note", AttributeValue::S("floor removed by hand".into()))
        .send()
        .await
        .expect("hand edit");
    for e in [
        store.floor().await.expect_err("floor"),
        store.put("new", "v".into(), t(50)).await.expect_err("put"),
    ] {
        assert!(
            matches!(
                &e,
                Error::Backend {
                    retryable: false,
                    ..
                }
            ) && e.chain().contains("edited by hand"),
            "{e:?}"
        );
    }
}
