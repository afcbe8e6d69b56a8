//! `FencedTransaction`, the guard for the caller's own items, against moto's
//! DynamoDB at `FENCING_DYNAMODB_ENDPOINT` (`integration/services.sh up
//! dynamodb`): accepted at an equal or higher token, refused below with
//! nothing applied, one mark with `DynamoStore::fence`, a refusal of the
//! caller's own item named, and 8 racing transactions.

use std::sync::Arc;

use aws_sdk_dynamodb::types::builders::{PutBuilder, UpdateBuilder};
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, Put, TransactWriteItem, Update,
};
use fencing_core::{Error, FencedStore, FencingToken};
use fencing_dynamodb::{DynamoStore, FencedTransaction, ItemRefused, emulator};
use fencing_harness::env::DYNAMODB;
use fencing_harness::object_store::set_up;
use fencing_testkit::unique_name;

async fn dynamo() -> Option<DynamoStore> {
    set_up(&DYNAMODB, "dynamodb", emulator::store).await
}

fn t(n: u64) -> FencingToken {
    FencingToken::new(n)
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// A caller's item in the store's table: `pk` and a `status`.
fn put(store: &DynamoStore, pk: &str, status: &str) -> PutBuilder {
    Put::builder()
        .table_name(store.table())
        .item("pk", s(pk))
        .item("status", s(status))
}

/// Sets the caller's item's `status`.
fn set_status(store: &DynamoStore, pk: &str, status: &str) -> UpdateBuilder {
    Update::builder()
        .table_name(store.table())
        .key("pk", s(pk))
        .update_expression("SET #s = :s")
        .expression_attribute_names("#s", "status")
        .expression_attribute_values(":s", s(status))
}

/// The caller's item, read with the raw client (strongly consistent).
async fn raw(
    store: &DynamoStore,
    pk: &str,
) -> Option<std::collections::HashMap<String, AttributeValue>> {
    store
        .client()
        .get_item()
        .table_name(store.table())
        .key("pk", s(pk))
        .consistent_read(true)
        .send()
        .await
        .expect("raw get")
        .item
}

async fn status(store: &DynamoStore, pk: &str) -> Option<String> {
    match raw(store, pk).await?.remove("status") {
        Some(AttributeValue::S(v)) => Some(v),
        other => panic!("status of {pk} is {other:?}"),
    }
}

/// The fence item's `version`: how many writes it accepted.
async fn version(store: &DynamoStore, pk: &str) -> Option<u64> {
    match raw(store, pk).await?.remove("version") {
        Some(AttributeValue::N(n)) => Some(n.parse().expect("a count")),
        other => panic!("version of {pk} is {other:?}"),
    }
}

/// Asserts `e` is a StaleToken on `name` naming both tokens.
fn assert_stale(e: &Error, name: &str, presented: u64, current: u64) {
    match e {
        Error::StaleToken {
            key,
            presented: p,
            current: c,
        } => assert_eq!(
            (key.as_str(), *p, *c),
            (name, t(presented), t(current)),
            "{e}"
        ),
        other => panic!("expected StaleToken, got {other:?}"),
    }
    let shown = e.to_string();
    assert!(
        shown.contains(&format!("presented {presented}"))
            && shown.contains(&format!("accepted {current}")),
        "{shown}"
    );
}

/// A new name starts at any token; the same token and a higher one are
/// accepted; each writes the caller's items and advances the mark.
#[tokio::test]
async fn accepted_at_an_equal_and_a_higher_token() {
    let Some(store) = dynamo().await else { return };
    let name = unique_name("tx-accept");
    let (a, b) = (unique_name("tx-accept-a"), unique_name("tx-accept-b"));
    FencedTransaction::new(&store, &name, t(5))
        .put(put(&store, &a, "new"))
        .put(put(&store, &b, "new"))
        .send()
        .await
        .expect("a new name at 5");
    assert_eq!(store.mark(&name).await.unwrap(), Some(t(5)));
    // Equal: a holder writes many times with its token.
    FencedTransaction::new(&store, &name, t(5))
        .update(set_status(&store, &a, "paid"))
        .send()
        .await
        .expect("the same token again");
    FencedTransaction::new(&store, &name, t(9))
        .update(set_status(&store, &b, "shipped"))
        .delete(Delete::builder().table_name(store.table()).key("pk", s(&a)))
        .send()
        .await
        .expect("a higher token");
    assert_eq!(store.mark(&name).await.unwrap(), Some(t(9)));
    assert_eq!(status(&store, &a).await, None, "deleted at 9");
    assert_eq!(status(&store, &b).await.as_deref(), Some("shipped"));
    assert_eq!(version(&store, &name).await, Some(3), "three fence writes");
    // The fence item has a mark and no value: the store reads it as absent.
    assert_eq!(store.get(&name).await.unwrap(), None);
}

/// A lower token is StaleToken naming both tokens, and nothing of the
/// transaction is applied: not the put, not the update, not the delete,
/// not the mark.
#[tokio::test]
async fn a_lower_token_is_refused_and_nothing_is_applied() {
    let Some(store) = dynamo().await else { return };
    let name = unique_name("tx-stale");
    let (kept, gone, fresh) = (
        unique_name("tx-stale-kept"),
        unique_name("tx-stale-gone"),
        unique_name("tx-stale-fresh"),
    );
    FencedTransaction::new(&store, &name, t(8))
        .put(put(&store, &kept, "by 8"))
        .put(put(&store, &gone, "by 8"))
        .send()
        .await
        .unwrap();
    let e = FencedTransaction::new(&store, &name, t(7))
        .update(set_status(&store, &kept, "by 7"))
        .delete(
            Delete::builder()
                .table_name(store.table())
                .key("pk", s(&gone)),
        )
        .put(put(&store, &fresh, "by 7"))
        .send()
        .await
        .unwrap_err();
    assert_stale(&e, &name, 7, 8);
    assert!(!e.is_retryable());
    assert_eq!(status(&store, &kept).await.as_deref(), Some("by 8"));
    assert_eq!(status(&store, &gone).await.as_deref(), Some("by 8"));
    assert_eq!(raw(&store, &fresh).await, None);
    assert_eq!(store.mark(&name).await.unwrap(), Some(t(8)));
    assert_eq!(version(&store, &name).await, Some(1));
}

/// One name, one mark: `store.fence` refuses a guard's lower token, and a
/// guard refuses the store's lower writes; the guard leaves the value.
#[tokio::test]
async fn the_guard_and_the_store_refuse_each_others_lower_tokens() {
    let Some(store) = dynamo().await else { return };
    let name = unique_name("tx-one-mark");
    let item = unique_name("tx-one-mark-item");
    store
        .put(&name, "the store's value".into(), t(3))
        .await
        .unwrap();
    store.fence(&name, t(6)).await.unwrap();
    let e = FencedTransaction::new(&store, &name, t(5))
        .put(put(&store, &item, "by 5"))
        .send()
        .await
        .unwrap_err();
    assert_stale(&e, &name, 5, 6);
    assert_eq!(raw(&store, &item).await, None);

    FencedTransaction::new(&store, &name, t(7))
        .put(put(&store, &item, "by 7"))
        .send()
        .await
        .unwrap();
    for refused in [
        store.put(&name, "by 6".into(), t(6)).await,
        store.fence(&name, t(6)).await.map(drop),
        store.delete(&name, t(6)).await,
    ] {
        assert_stale(&refused.unwrap_err(), &name, 6, 7);
    }
    let got = store.get(&name).await.unwrap().expect("the value stays");
    assert_eq!(
        (got.token, &got.value[..]),
        (t(7), &b"the store's value"[..])
    );
    // And the store's higher fence shuts the guard out again.
    store.fence(&name, t(10)).await.unwrap();
    let e = FencedTransaction::new(&store, &name, t(7))
        .update(set_status(&store, &item, "by 7 again"))
        .send()
        .await
        .unwrap_err();
    assert_stale(&e, &name, 7, 10);
    assert_eq!(status(&store, &item).await.as_deref(), Some("by 7"));
}

/// The caller's own condition failing cancels the transaction: a
/// non-retryable backend error naming the item (not StaleToken), the mark
/// not advanced, the other items not written.
#[tokio::test]
async fn a_refused_item_of_the_callers_is_named_and_nothing_is_applied() {
    let Some(store) = dynamo().await else { return };
    let name = unique_name("tx-own");
    let (other, taken) = (unique_name("tx-own-other"), unique_name("tx-own-taken"));
    FencedTransaction::new(&store, &name, t(2))
        .put(put(&store, &taken, "first"))
        .send()
        .await
        .unwrap();
    let e = FencedTransaction::new(&store, &name, t(4))
        .put(put(&store, &other, "by 4"))
        .put(put(&store, &taken, "by 4").condition_expression("attribute_not_exists(pk)"))
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Backend {
                backend: "dynamodb",
                retryable: false,
                ..
            }
        ),
        "{e:?}"
    );
    let refused = std::error::Error::source(&e)
        .and_then(|s| s.downcast_ref::<ItemRefused>())
        .unwrap_or_else(|| panic!("no ItemRefused in {e:?}"));
    assert_eq!(
        (refused.index, refused.code.as_str()),
        (Some(1), "ConditionalCheckFailed")
    );
    let chain = e.chain();
    assert!(
        chain.contains(&format!("item 1 (Put on table {})", store.table())),
        "{chain}"
    );
    assert_eq!(store.mark(&name).await.unwrap(), Some(t(2)), "not advanced");
    assert_eq!(raw(&store, &other).await, None);
    assert_eq!(status(&store, &taken).await.as_deref(), Some("first"));

    // A ConditionCheck and an Update name their key.
    let e = FencedTransaction::new(&store, &name, t(4))
        .condition_check(
            ConditionCheck::builder()
                .table_name(store.table())
                .key("pk", s(&taken))
                .condition_expression("#s = :s")
                .expression_attribute_names("#s", "status")
                .expression_attribute_values(":s", s("second")),
        )
        .send()
        .await
        .unwrap_err();
    let chain = e.chain();
    assert!(
        chain.contains(&format!(
            "item 0 (ConditionCheck on table {}, key {{pk: S({taken:?})}})",
            store.table()
        )) && chain.contains("ConditionalCheckFailed"),
        "{chain}"
    );
    assert_eq!(store.mark(&name).await.unwrap(), Some(t(2)));
}

/// Refused before anything is sent: no items, too many, a missing field,
/// an item on the fence item itself, an empty name.
#[tokio::test]
async fn bad_transactions_are_invalid_input_and_send_nothing() {
    let Some(store) = dynamo().await else { return };
    let name = unique_name("tx-bad");
    let item = unique_name("tx-bad-item");
    let many: Vec<TransactWriteItem> = (0..=FencedTransaction::MAX_ITEMS)
        .map(|i| {
            let put = put(&store, &format!("{item}-{i}"), "x").build().unwrap();
            TransactWriteItem::builder().put(put).build()
        })
        .collect();
    let cases = [
        (FencedTransaction::new(&store, &name, t(1)), "1 to 98 items"),
        (
            FencedTransaction::new(&store, &name, t(1)).items(many),
            "got 99",
        ),
        (
            FencedTransaction::new(&store, &name, t(1))
                .put(put(&store, &item, "x"))
                .update(Update::builder().table_name(store.table())),
            "item 1 of the fenced transaction",
        ),
        (
            FencedTransaction::new(&store, &name, t(1)).put(put(&store, &name, "x")),
            "is the fence item",
        ),
        (
            FencedTransaction::new(&store, &name, t(1)).update(set_status(&store, &name, "x")),
            "is the fence item",
        ),
        (
            FencedTransaction::new(&store, &name, t(1)).put(put(
                &store,
                &fencing_dynamodb::floor_item_of(&name),
                "x",
            )),
            "one of the store's floor items",
        ),
        (
            FencedTransaction::new(&store, &name, t(1)).item(TransactWriteItem::builder().build()),
            "has no Put, Update, Delete or ConditionCheck",
        ),
        (
            FencedTransaction::new(&store, "", t(1)).put(put(&store, &item, "x")),
            "",
        ),
    ];
    for (tx, want) in cases {
        let e = tx.send().await.unwrap_err();
        assert!(
            matches!(&e, Error::InvalidInput { message } if message.contains(want)),
            "{want:?}: {e:?}"
        );
    }
    assert_eq!(raw(&store, &name).await, None, "no fence item");
    assert_eq!(raw(&store, &item).await, None);
    assert_eq!(raw(&store, &format!("{item}-0")).await, None);
}

/// 8 guarded transactions with random tokens start together, 6 rounds:
/// each appends its token to a log item and sets `last`. The mark ends at
/// the highest token, every refusal is StaleToken below a higher mark, the
/// log holds exactly the accepted tokens, in non-decreasing order (no
/// write with a lower token landed after a higher one), and `last` is the
/// highest token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_racing_transactions_end_at_the_highest_token() {
    let Some(store) = dynamo().await else { return };
    let store = Arc::new(store);
    let mut refused_total = 0;
    for round in 0..6 {
        let name = unique_name(&format!("tx-race-{round}"));
        let log = unique_name(&format!("tx-race-log-{round}"));
        let tokens: Vec<u64> = (0..8).map(|_| rand::random_range(1..=20)).collect();
        let barrier = Arc::new(tokio::sync::Barrier::new(tokens.len()));
        let mut tasks = Vec::new();
        for &token in &tokens {
            let (store, name, log, barrier) =
                (store.clone(), name.clone(), log.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                let append = Update::builder()
                    .table_name(store.table())
                    .key("pk", s(&log))
                    .update_expression(
                        "SET tokens = list_append(if_not_exists(tokens, :empty), :mine), #last = :t",
                    )
                    .expression_attribute_names("#last", "last")
                    .expression_attribute_values(":empty", AttributeValue::L(vec![]))
                    .expression_attribute_values(
                        ":mine",
                        AttributeValue::L(vec![AttributeValue::N(token.to_string())]),
                    )
                    .expression_attribute_values(":t", AttributeValue::N(token.to_string()));
                barrier.wait().await;
                match FencedTransaction::new(&store, &name, t(token))
                    .update(append)
                    .send()
                    .await
                {
                    Ok(()) => Some(token),
                    Err(Error::StaleToken {
                        presented, current, ..
                    }) => {
                        assert!(current > presented, "refused {presented} at {current}");
                        None
                    }
                    Err(e) => panic!("token {token}: {}", e.chain()),
                }
            }));
        }
        let mut accepted = Vec::new();
        for task in tasks {
            match task.await.expect("no panic") {
                Some(token) => accepted.push(token),
                None => refused_total += 1,
            }
        }
        let max = *tokens.iter().max().unwrap();
        assert_eq!(store.mark(&name).await.unwrap(), Some(t(max)), "{tokens:?}");
        let item = raw(&store, &log).await.expect("the log");
        let logged: Vec<u64> = match item.get("tokens") {
            Some(AttributeValue::L(l)) => l
                .iter()
                .map(|v| v.as_n().expect("N").parse().expect("u64"))
                .collect(),
            other => panic!("tokens is {other:?}"),
        };
        assert!(
            logged.windows(2).all(|w| w[0] <= w[1]),
            "a lower token landed after a higher one: {logged:?}"
        );
        let (mut sorted_logged, mut sorted_accepted) = (logged.clone(), accepted.clone());
        sorted_logged.sort_unstable();
        sorted_accepted.sort_unstable();
        assert_eq!(sorted_logged, sorted_accepted, "tokens {tokens:?}");
        assert_eq!(item.get("last"), Some(&AttributeValue::N(max.to_string())));
        assert_eq!(
            version(&store, &name).await,
            Some(accepted.len() as u64),
            "one fence write per accepted transaction"
        );
    }
    println!("8 transactions x 6 rounds: {refused_total} refused as stale");
    assert!(refused_total > 0, "the race proved nothing");
}

/// A fence item written without fencing (no `lock_token`): its mark is
/// unknown, so the transaction is refused as the store refuses it, and
/// nothing is written.
#[tokio::test]
async fn a_foreign_fence_item_refuses_the_transaction() {
    let Some(store) = dynamo().await else { return };
    let name = unique_name("tx-foreign");
    let item = unique_name("tx-foreign-item");
    store
        .client()
        .put_item()
        .table_name(store.table())
        .item("pk", s(&name))
        .item("value", s("not ours"))
        .send()
        .await
        .expect("raw put");
    let e = FencedTransaction::new(&store, &name, t(1))
        .put(put(&store, &item, "x"))
        .send()
        .await
        .unwrap_err();
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
    assert_eq!(raw(&store, &item).await, None);
    assert_eq!(
        raw(&store, &name)
            .await
            .and_then(|mut i| i.remove("lock_token")),
        None
    );
}

/// A store of its own table, for the floor.
async fn table_of_its_own(what: &str) -> Option<DynamoStore> {
    set_up(&DYNAMODB, what, emulator::store).await
}

/// Clause 15 in a guarded transaction: a name with no mark (never fenced,
/// or its mark removed under the floor) refuses a token at or below the
/// floor, with nothing applied; a name with a mark is judged by its mark;
/// above the floor the transaction goes through.
#[tokio::test]
async fn the_floor_refuses_a_transaction_on_a_name_without_a_mark() {
    let Some(store) = table_of_its_own("tx-floor").await else {
        return;
    };
    let (fresh, removed, marked) = ("fresh", "removed", "marked");
    store.fence(removed, t(20)).await.expect("fence");
    store.fence(marked, t(60)).await.expect("fence");
    store.raise_floor(t(50)).await.expect("raise");
    assert_eq!(store.remove_floored_marks(10).await.expect("remove"), 1);
    for (name, token, current) in [(fresh, 3, 51), (removed, 20, 51), (marked, 55, 60)] {
        let e = FencedTransaction::new(&store, name, t(token))
            .put(put(&store, "item", name))
            .send()
            .await
            .expect_err("refused");
        assert_stale(&e, name, token, current);
    }
    assert_eq!(raw(&store, "item").await, None, "nothing applied");
    assert_eq!(raw(&store, fresh).await, None);
    FencedTransaction::new(&store, fresh, t(51))
        .put(put(&store, "item", "above"))
        .send()
        .await
        .expect("above the floor");
    assert_eq!(status(&store, "item").await.as_deref(), Some("above"));
    assert_eq!(store.mark(fresh).await.unwrap(), Some(t(51)));
    FencedTransaction::new(&store, marked, t(60))
        .put(put(&store, "item", "marked"))
        .send()
        .await
        .expect("at the mark");
    assert_eq!(status(&store, "item").await.as_deref(), Some("marked"));
}
