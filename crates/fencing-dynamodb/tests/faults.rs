//! Faults against moto's DynamoDB (`FENCING_DYNAMODB_ENDPOINT`): a write
//! applied by the server whose answer never came back is
//! `Error::OutcomeUnknown`, never "nothing written", for the store's
//! `UpdateItem` and for a `FencedTransaction`'s `TransactWriteItems`.
//! The answer is lost by `fencing_harness::proxy::AnswerDroppingProxy`;
//! what the server applied is read directly, past the proxy.

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Put};
use fencing_core::{Error, FencedStore, FencingToken};
use fencing_dynamodb::{DynamoStore, FencedTransaction, emulator};
use fencing_harness::env::DYNAMODB;
use fencing_harness::object_store::set_up;
use fencing_harness::proxy::AnswerDroppingProxy;
use fencing_testkit::unique_name;

/// Every DynamoDB call is a `POST /`; the client through the proxy sends
/// only the one write, so the next request is the one whose answer is lost.
const WRITE: &[u8] = b"POST ";

fn t(n: u64) -> FencingToken {
    FencingToken::new(n)
}

/// This run's table directly, and the same table through a proxy that can
/// lose answers.
async fn direct_and_proxied() -> Option<(DynamoStore, DynamoStore, AnswerDroppingProxy)> {
    let direct = set_up(&DYNAMODB, "dynamodb", emulator::store).await?;
    let (proxy, proxied) = AnswerDroppingProxy::in_front_of(&DYNAMODB.endpoint()).await;
    let through = DynamoStore::new(emulator::client(&proxied), direct.table());
    Some((direct, through, proxy))
}

/// Waits for the armed answer to be lost; asserts the server applied the
/// request (a 200); returns the status line.
async fn lost(proxy: &AnswerDroppingProxy) -> String {
    let lost = proxy.wait_dropped(1, Duration::from_secs(30)).await;
    assert!(
        lost[0].contains(" 200"),
        "the server should have applied the write whose answer was lost: {lost:?}"
    );
    lost[0].clone()
}

/// Asserts `result` is OutcomeUnknown from dynamodb.
fn assert_unknown(result: fencing_core::Result<()>, what: &str) {
    match result {
        Err(e @ Error::OutcomeUnknown { .. }) => {
            assert!(e.to_string().contains("may have been applied"), "{e}");
            assert!(!e.is_retryable(), "{what}: {e:?}");
        }
        other => panic!(
            "{what} was applied but its answer lost: it must be OutcomeUnknown, got {other:?}"
        ),
    }
}

#[tokio::test]
async fn a_put_whose_answer_is_lost_is_an_unknown_outcome() {
    let Some((direct, through, proxy)) = direct_and_proxied().await else {
        return;
    };
    let key = unique_name("lost-put");
    direct.put(&key, "first".into(), t(6)).await.unwrap();
    proxy.drop_answers(WRITE, 1);
    let write = {
        let key = key.clone();
        tokio::spawn(async move { through.put(&key, "ours".into(), t(7)).await })
    };
    let status = lost(&proxy).await;
    // Applied, while the writer still waits for the answer.
    let got = direct.get(&key).await.unwrap().expect("a value");
    assert_eq!(
        (got.token, &got.value[..]),
        (t(7), &b"ours"[..]),
        "{status}"
    );
    proxy.release();
    let result = tokio::time::timeout(Duration::from_secs(60), write)
        .await
        .expect("the write returns")
        .expect("no panic");
    // (A resend by the SDK would have been accepted at the equal mark: Ok.)
    assert_unknown(result, "put");
}

#[tokio::test]
async fn a_fenced_transaction_whose_answer_is_lost_is_an_unknown_outcome() {
    let Some((direct, through, proxy)) = direct_and_proxied().await else {
        return;
    };
    let name = unique_name("lost-tx");
    let item = unique_name("lost-tx-item");
    direct.fence(&name, t(3)).await.unwrap();
    proxy.drop_answers(WRITE, 1);
    let write = {
        let (name, item, table) = (name.clone(), item.clone(), direct.table().to_owned());
        tokio::spawn(async move {
            let put = Put::builder()
                .table_name(table)
                .item("pk", AttributeValue::S(item))
                .item("status", AttributeValue::S("by 4".into()));
            FencedTransaction::new(&through, &name, t(4))
                .put(put)
                .send()
                .await
        })
    };
    let status = lost(&proxy).await;
    // Both the mark and the caller's item were written.
    assert_eq!(direct.mark(&name).await.unwrap(), Some(t(4)), "{status}");
    let written = direct
        .client()
        .get_item()
        .table_name(direct.table())
        .key("pk", AttributeValue::S(item.clone()))
        .consistent_read(true)
        .send()
        .await
        .expect("raw get")
        .item
        .expect("the caller's item was written");
    assert_eq!(
        written.get("status"),
        Some(&AttributeValue::S("by 4".into()))
    );
    proxy.release();
    let result = tokio::time::timeout(Duration::from_secs(60), write)
        .await
        .expect("the transaction returns")
        .expect("no panic");
    assert_unknown(result, "the fenced transaction");
}
