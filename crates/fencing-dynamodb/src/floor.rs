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
//!
//! The floor is kept in [`FLOOR_SHARDS`] items, each key's first writes
//! checking the one its name hashes to: first writes of different keys
//! running at once share a floor item only one time in sixteen (DynamoDB
//! cancels one of two transactions on one item, and a partition takes
//! some 1,000 writes a second), and a raise sets every one of them before
//! it returns. The floor is the lowest of them: one a raise has not
//! reached yet (an interrupted raise) holds it down until a raise does.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ConditionCheck, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem,
};
use fencing_core::adapter::Call;
use std::time::Duration;

use fencing_core::{Error, FencingToken, Limits, Result};

use crate::error::{NAME, map_error};
use crate::store::{PK, VALUE};
use crate::update::{Attributes, read_consistent, send_conditional};

/// The floor items' keys start with this, then `/` and the shard's
/// number. Every store refuses a key holding NUL ([`Limits::check_key`]),
/// so no key and no fence name is a floor item.
pub const FLOOR_PK: &str = "\0floor";
/// How many items keep the floor.
pub const FLOOR_SHARDS: u32 = 16;
/// A floor item's floor (N).
pub const FLOOR: &str = "floor";

/// How often a raise tries one floor item again while first writes hold
/// it (a canceled try writes nothing).
const RAISE_TRIES: u32 = 10;

/// The key of the floor item that `key`'s first writes check: FNV-1a of
/// its bytes, which no release may change (every process must pick the
/// same item for a key).
pub fn floor_item_of(key: &str) -> String {
    let hash = key.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    shard_key(hash % FLOOR_SHARDS)
}

fn shard_key(shard: u32) -> String {
    format!("{FLOOR_PK}/{shard}")
}

/// What a write to an item with a mark is conditioned on: the item has a
/// mark, at most the presented token. Refused with no item sent back,
/// the key has none, and the write goes again with the floor's check.
pub(crate) const MARKED: &str = "attribute_exists(pk) AND lock_token <= :t";

/// The `ConditionCheck` a write to `key` that finds no mark sends first:
/// no floor in `key`'s floor item, or one below `token`; refused, it sends
/// the floor item back.
pub(crate) fn check(table: &str, key: &str, token: FencingToken) -> Result<TransactWriteItem> {
    let check = ConditionCheck::builder()
        .table_name(table)
        .key(PK, AttributeValue::S(floor_item_of(key)))
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
                "a floor item (key \"\\0floor/…\") of table {table} has no numeric {FLOOR}: \
                 it was edited by hand; raise the floor again to the floor it held"
            ),
        )),
    }
}

/// The table's floor, strongly consistent: the lowest of its floor
/// items; `None` if a floor item has none (no raise reached it yet).
pub(crate) async fn read(client: &Client, table: &str) -> Result<Option<FencingToken>> {
    let call = format!("read the floor of table {table}");
    let mut lowest: Option<FencingToken> = None;
    for shard in 0..FLOOR_SHARDS {
        let item = read_consistent(client, table, &shard_key(shard), Call::read(&call)).await?;
        let Some(item) = item else {
            return Ok(None);
        };
        let floor = floor_of(table, &item)?;
        lowest = Some(lowest.map_or(floor, |lowest| lowest.min(floor)));
    }
    Ok(lowest)
}

/// Raises the table's floor to `floor`: each floor item set to it, on the
/// condition that it is not above it (one a raise to a higher floor
/// already reached keeps that). A first write that read an item's old
/// floor in its transaction either committed before the item's update or
/// cancels it (DynamoDB does not let an update and a transaction that
/// holds the item interleave): the update is tried again. Once this
/// returns, every write that finds no mark is judged by the new floor.
pub(crate) async fn raise(
    client: &Client,
    table: &str,
    limits: Limits,
    floor: FencingToken,
) -> Result<FencingToken> {
    limits.check_floor(floor)?;
    if let Some(current) = read(client, table).await?
        && current > floor
    {
        return Err(Error::floor_lowered(current, floor));
    }
    for shard in 0..FLOOR_SHARDS {
        raise_item(client, table, &shard_key(shard), floor).await?;
    }
    Ok(floor)
}

/// Sets one floor item to `floor` unless it is above it.
async fn raise_item(client: &Client, table: &str, item: &str, floor: FencingToken) -> Result<()> {
    let call = format!("raise the floor of table {table} to {floor}");
    let mut tries = 0;
    loop {
        tries += 1;
        let request = client
            .update_item()
            .table_name(table)
            .key(PK, AttributeValue::S(item.to_owned()))
            .update_expression("SET #floor = :f")
            .condition_expression("attribute_not_exists(pk) OR #floor <= :f")
            .expression_attribute_names("#floor", FLOOR)
            .expression_attribute_values(":f", AttributeValue::N(floor.get().to_string()));
        // Setting a floor again changes nothing: a lost answer is retried
        // as a conflict is. Refused, a raise to a higher floor reached the
        // item first, and it keeps that.
        match send_conditional(request, Call::idempotent(&call)).await {
            Ok(_) => return Ok(()),
            Err(e) if e.is_retryable() && tries < RAISE_TRIES => {
                tokio::time::sleep(backoff(tries)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The pause before try `tries + 1` after a conflict: 20 ms doubling, up
/// to a second, and up to half again at random, so that writers that met
/// do not meet again.
pub(crate) fn backoff(tries: u32) -> Duration {
    let base = Duration::from_millis(20 << tries.min(6)).min(Duration::from_secs(1));
    base + base.mul_f64(rand::random::<f64>() / 2.0)
}

/// Removes up to `most` items the floor covers: a mark at or below it and
/// no value. A `Scan` of the table from its start (filtered on the server,
/// so only the keys come back) until `most` went or the table ended, and
/// one `DeleteItem` per item on the same condition, so an item written
/// meanwhile is kept. The count may miss a delete whose first answer was
/// lost (the SDK's retry then finds it gone).
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
                // Written since the scan (kept), or held by a transaction
                // (the next call sees it again).
                Err(SdkError::ServiceError(e))
                    if e.err().is_conditional_check_failed_exception()
                        || e.err().is_transaction_conflict_exception() => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Which floor item a key checks is part of the table's layout: every
    /// process, of every release, must pick the same one.
    #[test]
    fn the_floor_item_of_a_key_never_changes_and_all_are_used() {
        assert_eq!(floor_item_of("orders"), "\0floor/12");
        assert_eq!(floor_item_of("task-1"), "\0floor/6");
        let used: std::collections::BTreeSet<String> = (0..1000)
            .map(|i| floor_item_of(&format!("task-{i}")))
            .collect();
        assert_eq!(used.len(), FLOOR_SHARDS as usize, "{used:?}");
    }
}
