//! The store's floor (contract clause 15) on DynamoDB: one item of the
//! store's table, read by the writes that find no mark.
//!
//! Why only those: a write to an item that has a mark is one `UpdateItem`
//! on that item, and its mark refuses every token below it. Checking the
//! floor in it too would make every write a transaction on one shared
//! item, and DynamoDB cancels transactions that share an item while
//! another is in flight: the floor would serialize the whole table. A
//! write that finds no item (a new key, or one whose mark the floor let
//! go) is the one a removed mark would let through, so that write, and
//! only that one, is a `TransactWriteItems` with a `ConditionCheck` of the
//! floor: a key first written costs one transaction more, a key with a
//! mark nothing.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ConditionCheck, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem,
};
use fencing_core::adapter::Call;
use fencing_core::{Error, FencingToken, Limits, Result};

use crate::error::{NAME, map_error};
use crate::store::{PK, VALUE};
use crate::update::{Attributes, read_consistent, send_conditional};

/// The floor item's key. Every store refuses a key holding NUL
/// ([`Limits::check_key`]), so no key and no fence name is this item.
pub const FLOOR_PK: &str = "\0floor";
/// The floor item's floor (N).
pub const FLOOR: &str = "floor";

/// What a write to an item with a mark is conditioned on: the item has a
/// mark, at most the presented token. Refused with no item sent back,
/// the key has none, and the write goes again with the floor's check.
pub(crate) const MARKED: &str = "attribute_exists(pk) AND lock_token <= :t";

/// The `ConditionCheck` a write that finds no mark sends first: no floor,
/// or one below `token`; refused, it sends the floor item back.
pub(crate) fn check(table: &str, token: FencingToken) -> Result<TransactWriteItem> {
    let check = ConditionCheck::builder()
        .table_name(table)
        .key(PK, AttributeValue::S(FLOOR_PK.to_owned()))
        .condition_expression("attribute_not_exists(pk) OR #floor < :t")
        .expression_attribute_names("#floor", FLOOR)
        .expression_attribute_values(":t", AttributeValue::N(token.get().to_string()))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(|e| Error::backend(NAME, false, e))?;
    Ok(TransactWriteItem::builder().condition_check(check).build())
}

/// The refusal of a write to `key` at `token` by the floor's check, from
/// the floor item DynamoDB sent back.
pub(crate) fn refusal(
    table: &str,
    key: &str,
    token: FencingToken,
    old: Option<Attributes>,
) -> Error {
    match old.as_ref().map(|item| floor_of(table, item)) {
        Some(Ok(floor)) if floor >= token => Error::below_floor(key, token, floor),
        Some(Err(e)) => e,
        other => Error::backend(
            NAME,
            false,
            format!(
                "the floor's check refused a write to {key:?} at {token} in table {table}, \
                 but the floor reads {:?}; nothing was written",
                other.and_then(Result::ok)
            ),
        ),
    }
}

/// The floor the floor item holds.
fn floor_of(table: &str, item: &Attributes) -> Result<FencingToken> {
    match item.get(FLOOR) {
        Some(AttributeValue::N(n)) => n.parse().map(FencingToken::new).map_err(|_| {
            Error::backend(
                NAME,
                false,
                format!("the floor item of table {table} holds {n:?}, which is not a token"),
            )
        }),
        _ => Err(Error::backend(
            NAME,
            false,
            format!(
                "the floor item (key \"\\0floor\") of table {table} has no numeric {FLOOR}: \
                 it was edited by hand; set its {FLOOR} to the floor it held"
            ),
        )),
    }
}

/// The table's floor, strongly consistent; `None` if none was raised.
pub(crate) async fn read(client: &Client, table: &str) -> Result<Option<FencingToken>> {
    let call = format!("read the floor of table {table}");
    read_consistent(client, table, FLOOR_PK, Call::read(&call))
        .await?
        .map(|item| floor_of(table, &item))
        .transpose()
}

/// Raises the table's floor to `floor`: one `UpdateItem` on the floor
/// item, on the condition that it is not above `floor`. A write that read
/// the old floor in its transaction either committed before this update
/// or is canceled by it (DynamoDB does not let an update and a
/// transaction that holds the item interleave), so once this returns
/// every write that finds no mark is judged by the new floor.
pub(crate) async fn raise(
    client: &Client,
    table: &str,
    limits: Limits,
    floor: FencingToken,
) -> Result<FencingToken> {
    limits.check_floor(floor)?;
    let call = format!("raise the floor of table {table} to {floor}");
    let request = client
        .update_item()
        .table_name(table)
        .key(PK, AttributeValue::S(FLOOR_PK.to_owned()))
        .update_expression("SET #floor = :f")
        .condition_expression("attribute_not_exists(pk) OR #floor <= :f")
        .expression_attribute_names("#floor", FLOOR)
        .expression_attribute_values(":f", AttributeValue::N(floor.get().to_string()))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
    match send_conditional(request, Call::write(&call)).await? {
        Ok(_) => Ok(floor),
        Err(Some(old)) => Err(Error::floor_lowered(floor_of(table, &old)?, floor)),
        Err(None) => Err(Error::backend(
            NAME,
            false,
            format!("{call} was refused, but no floor item was sent back"),
        )),
    }
}

/// Removes up to `most` items the floor covers: a mark at or below it and
/// no value. One `Scan` of the table (filtered on the server, so only the
/// keys come back), then one `DeleteItem` per item on the same condition,
/// so an item written meanwhile is kept.
pub(crate) async fn remove_covered(client: &Client, table: &str, most: u32) -> Result<u64> {
    let Some(floor) = read(client, table).await? else {
        return Ok(0);
    };
    let floor = AttributeValue::N(floor.get().to_string());
    let covered = "attribute_exists(lock_token) AND lock_token <= :f \
                   AND attribute_not_exists(#value)";
    let call = format!("scan table {table} for marks under its floor");
    let mut removed = 0_u64;
    let mut start = None;
    while removed < u64::from(most) {
        let page = client
            .scan()
            .table_name(table)
            .filter_expression(covered)
            .projection_expression("#pk")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#value", VALUE)
            .expression_attribute_values(":f", floor.clone())
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|e| map_error(e, Call::read(&call)))?;
        for item in page.items() {
            if removed == u64::from(most) {
                break;
            }
            let Some(key) = item.get(PK) else { continue };
            let call = format!("remove the mark of {key:?} under the floor of table {table}");
            let sent = client
                .delete_item()
                .table_name(table)
                .key(PK, key.clone())
                .condition_expression(covered)
                .expression_attribute_names("#value", VALUE)
                .expression_attribute_values(":f", floor.clone())
                .send()
                .await;
            match sent {
                Ok(_) => removed += 1,
                // Written since the scan: kept.
                Err(SdkError::ServiceError(e))
                    if e.err().is_conditional_check_failed_exception() => {}
                // Deleting is idempotent: a lost answer is settled by the
                // next call's scan.
                Err(e) => return Err(map_error(e, Call::read(&call))),
            }
        }
        match page.last_evaluated_key {
            Some(last) => start = Some(last),
            None => break,
        }
    }
    Ok(removed)
}

/// Sends `items` in one `TransactWriteItems`, never retried by the SDK
/// (a resend after a lost answer could apply an `ADD` twice on an
/// emulator that ignores the request token). `Ok(Err(reasons))` when it
/// was canceled, with DynamoDB's reason per item (none when it gave none).
pub(crate) async fn transact(
    client: &Client,
    items: Vec<TransactWriteItem>,
    operation: &str,
) -> Result<std::result::Result<(), Canceled>> {
    let no_retries =
        aws_sdk_dynamodb::config::Builder::default().retry_config(RetryConfig::disabled());
    let sent = client
        .transact_write_items()
        .set_transact_items(Some(items))
        .customize()
        .config_override(no_retries)
        .send()
        .await;
    match sent {
        Ok(_) => Ok(Ok(())),
        Err(SdkError::ServiceError(service))
            if service.err().is_transaction_canceled_exception() =>
        {
            let reasons = match service.err() {
                TransactWriteItemsError::TransactionCanceledException(e) => {
                    e.cancellation_reasons().to_vec()
                }
                _ => Vec::new(),
            };
            Ok(Err(Canceled {
                reasons,
                err: SdkError::ServiceError(service),
            }))
        }
        Err(err) => Err(map_error(err, Call::write(operation))),
    }
}

/// A canceled transaction: nothing was written.
#[derive(Debug)]
pub(crate) struct Canceled {
    /// DynamoDB's reason per item, in the items' order.
    pub(crate) reasons: Vec<CancellationReason>,
    /// The answer, for an error naming a cancellation without reasons.
    pub(crate) err: SdkError<TransactWriteItemsError>,
}

/// Cancellation reasons that mean "nothing applied, the same transaction
/// may go through later".
pub(crate) const RETRYABLE_REASONS: &[&str] = &[
    "TransactionConflict",
    "ProvisionedThroughputExceeded",
    "ThrottlingError",
    "RequestLimitExceeded",
];

/// Whether DynamoDB's `reason` says the item was refused (not "None").
pub(crate) fn failed(reason: &CancellationReason) -> bool {
    reason.code().is_some_and(|c| c != "None")
}
