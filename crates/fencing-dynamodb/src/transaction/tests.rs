use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::types::Delete;
use aws_sdk_dynamodb::types::error::TransactionCanceledException;

use super::*;

/// The canceled transaction of `codes` (the fence item's first), on the
/// fence item and one `Delete` of the caller's.
fn cancel(codes: &[&str]) -> Error {
    let delete = Delete::builder()
        .table_name("orders")
        .key("id", AttributeValue::S("o-1".into()))
        .build()
        .unwrap();
    let items = [
        fence_item("t", "name", FencingToken::new(3), CONDITION).unwrap(),
        TransactWriteItem::builder().delete(delete).build(),
    ];
    let reasons: Vec<_> = codes
        .iter()
        .map(|c| CancellationReason::builder().code(*c).build())
        .collect();
    let raw = HttpResponse::new(400.try_into().unwrap(), "".into());
    let err = SdkError::service_error(
        TransactWriteItemsError::TransactionCanceledException(
            TransactionCanceledException::builder().build(),
        ),
        raw,
    );
    canceled_reasons(
        "t",
        "name",
        FencingToken::new(3),
        &items,
        reasons,
        err,
        "tx",
    )
}

fn refused(e: &Error) -> (bool, &ItemRefused) {
    match e {
        Error::Backend {
            retryable, source, ..
        } => (*retryable, source.downcast_ref().expect("ItemRefused")),
        other => panic!("{other:?}"),
    }
}

/// What moto never answers (it runs one request at a time): a
/// conflicting transaction or throttling on an item is retryable, and
/// names the item.
#[test]
fn conflicts_are_retryable_and_name_the_item() {
    let e = cancel(&["None", "TransactionConflict"]);
    let (retryable, item) = refused(&e);
    assert!(retryable);
    assert_eq!(item.index, Some(0));
    assert!(
        item.to_string().starts_with(
            "item 0 (Delete on table orders, key {id: S(\"o-1\")}) of the fenced transaction \
             was refused: TransactionConflict"
        ),
        "{item}"
    );
    let e = cancel(&["TransactionConflict", "None"]);
    let (retryable, item) = refused(&e);
    assert!(retryable && item.index.is_none(), "{item}");
    let e = cancel(&["None", "ValidationError"]);
    assert!(!refused(&e).0);
    // No reason on any item: the SDK's error, not retryable.
    let e = cancel(&["None", "None"]);
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
}

/// A fence item refused without its old item, or with a mark the
/// token passes, is not a StaleToken: the mark is unknown.
#[test]
fn a_fence_refusal_without_a_higher_mark_is_not_stale() {
    let e = cancel(&["ConditionalCheckFailed", "None"]);
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

/// The floor's check refused for another reason than the floor (moto runs
/// one request at a time, so never answers so): a conflict or throttling
/// is retryable and names the floor item; the floor's own refusal is
/// StaleToken naming it + 1.
#[test]
fn a_floor_check_refused_by_a_conflict_is_retryable_and_names_the_floor_item() {
    let reason = |code: &str| CancellationReason::builder().code(code).build();
    for (code, retryable) in [
        ("TransactionConflict", true),
        ("ThrottlingError", true),
        ("ValidationError", false),
    ] {
        let e = floor_refused("t", "orders", FencingToken::new(3), &reason(code));
        let (was_retryable, item) = refused(&e);
        assert_eq!(was_retryable, retryable, "{code}");
        assert_eq!(item.index, None);
        assert!(
            item.item
                .contains(&format!("floor item {:?}", floor::floor_item_of("orders"))),
            "{item:?}"
        );
    }
    let floored = CancellationReason::builder()
        .code("ConditionalCheckFailed")
        .item("floor", AttributeValue::N("7".into()))
        .build();
    match floor_refused("t", "orders", FencingToken::new(3), &floored) {
        Error::StaleToken {
            presented, current, ..
        } => assert_eq!((presented.get(), current.get()), (3, 8)),
        other => panic!("{other:?}"),
    }
}
