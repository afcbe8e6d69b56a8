//! [`FencedTransaction`]: the caller's own items, written in one
//! `TransactWriteItems` with the fence item of a name.

use std::fmt;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::builders::{
    ConditionCheckBuilder, DeleteBuilder, PutBuilder, UpdateBuilder,
};
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
    Update,
};
use fencing_core::{Error, FencingToken, Result};

use crate::error::NAME;
use crate::floor;
use crate::store::{CONDITION, refusal};
use crate::update::Attributes;
use crate::{DynamoStore, LOCK_TOKEN, PK, VERSION};

/// The caller's own items in a guarded transaction, as added.
#[derive(Clone, Debug)]
enum Pending {
    Put(PutBuilder),
    Update(UpdateBuilder),
    Delete(DeleteBuilder),
    ConditionCheck(ConditionCheckBuilder),
    Item(Box<TransactWriteItem>),
}

/// Fences **your own items**: one `TransactWriteItems` that advances the
/// mark of `name` to `token` and writes your `Put`/`Update`/`Delete` items
/// (and `ConditionCheck`s), all or nothing.
///
/// The fence item is the item [`DynamoStore`] keeps for the key `name` in
/// its table, updated as [`fence`](fencing_core::FencedStore::fence)
/// updates it: `SET lock_token = :t ADD version :one` on
/// `attribute_exists(pk) AND lock_token <= :t`, the value left alone. A
/// name with no mark (its first transaction, or its mark removed under the
/// store's floor) is sent again with the floor's `ConditionCheck` first,
/// on `attribute_not_exists(pk) OR lock_token <= :t`.
/// **One name, one mark**: `store.fence("orders", 6)` (an election's
/// takeover fence, `fence lead --fence dynamodb://…#orders`) refuses a
/// transaction guarded with 5, and a transaction guarded with 6 refuses
/// `store.put("orders", …, 5)`. An equal token is accepted, so a holder
/// sends many transactions with its token.
///
/// A builder rather than a function over your `Vec<TransactWriteItem>`: it
/// holds the store, so the fence item is always in the store's table and
/// layout and is always sent; it takes the SDK's own item builders, so a
/// missing field is [`Error::InvalidInput`] naming the item instead of a
/// `BuildError` at every call; and it keeps your items' order, so a refusal
/// names the item you added. [`item`](Self::item) and
/// [`items`](Self::items) take items you built already.
///
/// The SDK never retries the transaction (its generated
/// `ClientRequestToken` would make a resend idempotent on AWS for ten
/// minutes, but DynamoDB emulators ignore it, and a resend after a lost
/// answer could apply an `ADD` twice there): a lost answer is
/// [`Error::OutcomeUnknown`]; read your items back before deciding.
///
/// ```no_run
/// # async fn example(store: fencing_dynamodb::DynamoStore, token: fencing_core::FencingToken) -> Result<(), Box<dyn std::error::Error>> {
/// use fencing_dynamodb::FencedTransaction;
/// use fencing_dynamodb::aws_sdk_dynamodb::types::{AttributeValue, Put, Update};
///
/// FencedTransaction::new(&store, "orders", token)
///     .update(
///         Update::builder()
///             .table_name("orders")
///             .key("id", AttributeValue::S("o-7".into()))
///             .update_expression("SET #s = :s")
///             .expression_attribute_names("#s", "status")
///             .expression_attribute_values(":s", AttributeValue::S("shipped".into())),
///     )
///     .put(
///         Put::builder()
///             .table_name("shipments")
///             .item("id", AttributeValue::S("s-1".into()))
///             .item("order", AttributeValue::S("o-7".into())),
///     )
///     .send()
///     .await?; // StaleToken: a higher token fenced "orders"; nothing was written
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use = "nothing is sent until send()"]
pub struct FencedTransaction<'a> {
    store: &'a DynamoStore,
    name: String,
    token: FencingToken,
    items: Vec<Pending>,
}

impl<'a> FencedTransaction<'a> {
    /// The most items of yours in one transaction: DynamoDB takes 100
    /// actions, and two are the fence item and the store floor's check
    /// (sent when the name has no mark).
    pub const MAX_ITEMS: usize = 98;

    /// A transaction fenced by `name`'s mark in `store`'s table, at `token`.
    pub fn new(store: &'a DynamoStore, name: impl Into<String>, token: FencingToken) -> Self {
        Self {
            store,
            name: name.into(),
            token,
            items: Vec::new(),
        }
    }

    /// Adds a `Put`.
    pub fn put(mut self, put: PutBuilder) -> Self {
        self.items.push(Pending::Put(put));
        self
    }

    /// Adds an `Update`.
    pub fn update(mut self, update: UpdateBuilder) -> Self {
        self.items.push(Pending::Update(update));
        self
    }

    /// Adds a `Delete`.
    pub fn delete(mut self, delete: DeleteBuilder) -> Self {
        self.items.push(Pending::Delete(delete));
        self
    }

    /// Adds a `ConditionCheck`: an item the transaction only reads.
    pub fn condition_check(mut self, check: ConditionCheckBuilder) -> Self {
        self.items.push(Pending::ConditionCheck(check));
        self
    }

    /// Adds an item you built.
    pub fn item(mut self, item: TransactWriteItem) -> Self {
        self.items.push(Pending::Item(Box::new(item)));
        self
    }

    /// Adds items you built, in order.
    pub fn items(mut self, items: impl IntoIterator<Item = TransactWriteItem>) -> Self {
        self.items
            .extend(items.into_iter().map(|item| Pending::Item(Box::new(item))));
        self
    }

    /// Sends the transaction: your items are written and the mark of the
    /// name is `token`, or nothing is written.
    ///
    /// # Errors
    /// - [`Error::StaleToken`] naming the name, `token` and the mark, when
    ///   a higher token has fenced the name; nothing was written.
    /// - [`Error::Backend`] whose source is an [`ItemRefused`] naming your
    ///   item, when one of your items was refused (its own condition failed:
    ///   not retryable; a conflicting transaction or throttling:
    ///   retryable); nothing was written.
    /// - [`Error::InvalidInput`] before anything is sent: an invalid name,
    ///   no item or more than [`MAX_ITEMS`](Self::MAX_ITEMS) of yours, an
    ///   item missing a required field, or one of your items on the fence
    ///   item itself (DynamoDB takes one action per item).
    /// - [`Error::OutcomeUnknown`] when the answer was lost: it may have
    ///   been applied.
    /// - [`Error::Backend`] for a fence item this store did not write (no
    ///   numeric `lock_token`), and as [`DynamoStore`]'s writes otherwise.
    pub async fn send(self) -> Result<()> {
        DynamoStore::limits().check_write(&self.name, self.token, 0)?;
        let table = self.store.table();
        if self.items.is_empty() || self.items.len() > Self::MAX_ITEMS {
            return Err(Error::invalid_input(format!(
                "a fenced transaction takes 1 to {} items of yours, got {}",
                Self::MAX_ITEMS,
                self.items.len()
            )));
        }
        let mut yours = Vec::with_capacity(self.items.len());
        for (index, pending) in self.items.into_iter().enumerate() {
            let item = build(index, pending)?;
            if touches(&item, table, &self.name) {
                return Err(Error::invalid_input(format!(
                    "item {index} of the fenced transaction is the fence item {:?} of table {table} \
                     itself, or one of the store's floor items: DynamoDB takes one action per item; \
                     write the name through the store (and the floor with raise_floor)",
                    self.name
                )));
            }
            yours.push(item);
        }
        let operation = format!(
            "fenced transaction on {:?} with token {} ({} items) in table {table}",
            self.name,
            self.token,
            yours.len()
        );
        let client = self.store.client();
        // The name's mark judges, as in the store's own writes; with no
        // mark, the same transaction goes again with the floor's check.
        let mut items = vec![fence_item(table, &self.name, self.token, floor::MARKED)?];
        items.extend(yours.iter().cloned());
        let canceled = match floor::transact(client, items.clone(), &operation).await? {
            Ok(()) => return Ok(()),
            Err(canceled) => canceled,
        };
        let unmarked = canceled.reasons.first().is_some_and(|fence| {
            fence.code() == Some("ConditionalCheckFailed") && fence.item.is_none()
        });
        if !unmarked {
            return Err(canceled_error(
                table, &self.name, self.token, &items, 0, canceled, &operation,
            ));
        }
        let mut items = vec![
            floor::check(table, &self.name, self.token)?,
            fence_item(table, &self.name, self.token, CONDITION)?,
        ];
        items.extend(yours);
        match floor::transact(client, items.clone(), &operation).await? {
            Ok(()) => Ok(()),
            Err(canceled) => {
                if let Some(floor) = canceled.reasons.first().filter(|r| floor::failed(r)) {
                    return Err(floor_refused(table, &self.name, self.token, floor));
                }
                Err(canceled_error(
                    table, &self.name, self.token, &items, 1, canceled, &operation,
                ))
            }
        }
    }
}

/// The error of a transaction whose floor check (its first item) was
/// refused: [`Error::StaleToken`] at or below the floor, else (a first
/// write of another name on the same floor item, a raise, throttling) an
/// [`ItemRefused`] naming the floor item, retryable as DynamoDB's reason
/// says. Nothing was written.
fn floor_refused(
    table: &str,
    name: &str,
    token: FencingToken,
    floor: &CancellationReason,
) -> Error {
    let code = floor.code().unwrap_or_default().to_owned();
    if code == "ConditionalCheckFailed" {
        return floor::refusal(table, name, token, floor.item.clone());
    }
    Error::backend(
        NAME,
        floor::RETRYABLE_REASONS.contains(&code.as_str()),
        ItemRefused {
            index: None,
            item: format!(
                "the store's floor item {:?} (ConditionCheck on table {table})",
                floor::floor_item_of(name)
            ),
            code,
            message: floor.message.clone(),
        },
    )
}

/// The error of a canceled transaction whose fence item is `items[at]`.
fn canceled_error(
    table: &str,
    name: &str,
    token: FencingToken,
    items: &[TransactWriteItem],
    at: usize,
    canceled: floor::Canceled,
    operation: &str,
) -> Error {
    let reasons = canceled.reasons.into_iter().skip(at).collect();
    canceled_reasons(
        table,
        name,
        token,
        &items[at..],
        reasons,
        canceled.err,
        operation,
    )
}

/// The fence item's update: the store's `fence`, asking for the old item
/// when refused.
fn fence_item(
    table: &str,
    name: &str,
    token: FencingToken,
    condition: &str,
) -> Result<TransactWriteItem> {
    let update = Update::builder()
        .table_name(table)
        .key(PK, AttributeValue::S(name.to_owned()))
        .update_expression(format!("SET {LOCK_TOKEN} = :t ADD {VERSION} :one"))
        .condition_expression(condition)
        .expression_attribute_values(":t", AttributeValue::N(token.get().to_string()))
        .expression_attribute_values(":one", AttributeValue::N("1".to_owned()))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(|e| Error::backend(NAME, false, e))?;
    Ok(TransactWriteItem::builder().update(update).build())
}

/// Builds the caller's item `index`; a missing field is invalid input.
fn build(index: usize, pending: Pending) -> Result<TransactWriteItem> {
    let item = TransactWriteItem::builder();
    let built = match pending {
        Pending::Put(b) => b.build().map(|v| item.put(v).build()),
        Pending::Update(b) => b.build().map(|v| item.update(v).build()),
        Pending::Delete(b) => b.build().map(|v| item.delete(v).build()),
        Pending::ConditionCheck(b) => b.build().map(|v| item.condition_check(v).build()),
        Pending::Item(item) => {
            if action(&item).is_none() {
                return Err(Error::invalid_input(format!(
                    "item {index} of the fenced transaction has no Put, Update, Delete or ConditionCheck"
                )));
            }
            Ok(*item)
        }
    };
    built.map_err(|e| Error::invalid_input(format!("item {index} of the fenced transaction: {e}")))
}

/// The item's action, its table and its key (`None` for a `Put`: its key
/// is in its attributes).
fn action(item: &TransactWriteItem) -> Option<(&'static str, &str, Option<&Attributes>)> {
    if let Some(p) = item.put() {
        Some(("Put", p.table_name(), None))
    } else if let Some(u) = item.update() {
        Some(("Update", u.table_name(), Some(u.key())))
    } else if let Some(d) = item.delete() {
        Some(("Delete", d.table_name(), Some(d.key())))
    } else {
        item.condition_check()
            .map(|c| ("ConditionCheck", c.table_name(), Some(c.key())))
    }
}

/// Whether `item` acts on the fence item `name` of `table`, or on one of
/// the store's floor items (which no key is: a write there could lower
/// the floor under removed marks).
fn touches(item: &TransactWriteItem, table: &str, name: &str) -> bool {
    let ours = |pk: Option<&AttributeValue>| match pk {
        Some(AttributeValue::S(pk)) => pk == name || pk.starts_with(floor::FLOOR_PK),
        _ => false,
    };
    match (action(item), item.put()) {
        (Some((_, t, _)), Some(put)) => t == table && ours(put.item().get(PK)),
        (Some((_, t, Some(key))), None) => t == table && ours(key.get(PK)),
        _ => false,
    }
}

/// The error for a canceled transaction: the fence item's refusal first
/// (a stale token is stale whatever else failed), then the first of the
/// caller's items that was refused.
fn canceled_reasons(
    table: &str,
    name: &str,
    token: FencingToken,
    items: &[TransactWriteItem],
    reasons: Vec<CancellationReason>,
    err: SdkError<TransactWriteItemsError>,
    operation: &str,
) -> Error {
    let failed = floor::failed;
    let mut reasons = reasons.into_iter();
    if let Some(fence) = reasons.next().filter(failed) {
        let code = fence.code().unwrap_or_default().to_owned();
        if code == "ConditionalCheckFailed" {
            return refusal(table, "fenced transaction", name, token, fence.item);
        }
        return Error::backend(
            NAME,
            floor::RETRYABLE_REASONS.contains(&code.as_str()),
            ItemRefused {
                index: None,
                item: format!("the fence item {name:?} (Update on table {table})"),
                code,
                message: fence.message,
            },
        );
    }
    for (index, reason) in reasons.enumerate() {
        if !failed(&reason) {
            continue;
        }
        let code = reason.code().unwrap_or_default().to_owned();
        let item = match items.get(index + 1).and_then(action) {
            Some((action, t, Some(key))) => {
                format!(
                    "item {index} ({action} on table {t}, key {})",
                    show_key(key)
                )
            }
            Some((action, t, None)) => format!("item {index} ({action} on table {t})"),
            None => format!("item {index}"),
        };
        return Error::backend(
            NAME,
            floor::RETRYABLE_REASONS.contains(&code.as_str()),
            ItemRefused {
                index: Some(index),
                item,
                code,
                message: reason.message,
            },
        );
    }
    // Canceled without a reason on any item: nothing applied, say what came.
    tracing::debug!(operation, "transaction canceled without a reason per item");
    Error::backend(NAME, false, err)
}

/// A key as `{id: S("o-7")}`, its attributes sorted.
fn show_key(key: &Attributes) -> String {
    let mut parts: Vec<_> = key.iter().map(|(k, v)| format!("{k}: {v:?}")).collect();
    parts.sort();
    format!("{{{}}}", parts.join(", "))
}

/// One item of a [`FencedTransaction`] that DynamoDB refused, so the whole
/// transaction was canceled and nothing was written: the source of the
/// [`Error::Backend`] [`send`](FencedTransaction::send) returns.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ItemRefused {
    /// Which of your items, counted from 0 in the order added; `None` for
    /// the fence item (refused for another reason than a higher mark, which
    /// is [`Error::StaleToken`]).
    pub index: Option<usize>,
    /// The item as the error names it: its action, table and key.
    pub item: String,
    /// DynamoDB's cancellation reason, e.g. `ConditionalCheckFailed`,
    /// `TransactionConflict`.
    pub code: String,
    /// DynamoDB's message, if any.
    pub message: Option<String>,
}

impl fmt::Display for ItemRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of the fenced transaction was refused: {}",
            self.item, self.code
        )?;
        if let Some(message) = &self.message {
            write!(f, " ({message})")?;
        }
        write!(f, "; nothing was written")
    }
}

impl std::error::Error for ItemRefused {}

#[cfg(test)]
mod tests;
