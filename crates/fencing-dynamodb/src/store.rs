//! [`DynamoStore`]: one item per key, every write one conditional
//! `UpdateItem`.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use bytes::Bytes;
use fencing_core::adapter::Call;
use fencing_core::safety::SafetyCheck;
use fencing_core::{Error, FencedStore, FencingToken, Limits, Result, Versioned};

use crate::error::NAME;
use crate::floor;
use crate::update::{Attributes, send_conditional};

/// The partition key attribute: the key (S).
pub const PK: &str = "pk";
/// The mark attribute (N).
pub const LOCK_TOKEN: &str = "lock_token";
/// The value attribute (B); absent when only fenced or deleted.
pub const VALUE: &str = "value";
/// A counter of accepted writes (N), for operators.
pub const VERSION: &str = "version";

/// What a write to a key with no mark is conditioned on, beside the
/// floor's check: no item yet, or a mark at most the presented token (one
/// made since the first try found none).
pub(crate) const CONDITION: &str = "attribute_not_exists(pk) OR lock_token <= :t";

/// How often a first write of a key goes again after a conflicting
/// transaction (a raise of the floor, another first write of the key).
const CONFLICT_RETRIES: u32 = 4;

/// What an accepted write changes besides the mark.
#[derive(Clone, Copy, Debug)]
enum Change<'a> {
    /// `put`: a new value.
    Set(&'a [u8]),
    /// `fence`: the value as it is.
    Keep,
    /// `delete`: no value.
    Clear,
}

impl Change<'_> {
    /// The update expression that sets the mark to `token` and makes this
    /// change, with its attribute names and values.
    fn expression(
        self,
        token: FencingToken,
    ) -> (
        String,
        Option<HashMap<String, String>>,
        HashMap<String, AttributeValue>,
    ) {
        let mut expression = format!("SET {LOCK_TOKEN} = :t");
        let mut values = HashMap::from([
            (":t".to_owned(), AttributeValue::N(token.get().to_string())),
            (":one".to_owned(), AttributeValue::N("1".to_owned())),
        ]);
        let named = Some(HashMap::from([("#value".to_owned(), VALUE.to_owned())]));
        let names = match self {
            Change::Set(value) => {
                expression.push_str(", #value = :v");
                values.insert(":v".to_owned(), AttributeValue::B(Blob::new(value)));
                named
            }
            Change::Keep => None,
            Change::Clear => {
                expression.push_str(" REMOVE #value");
                named
            }
        };
        expression.push_str(&format!(" ADD {VERSION} :one"));
        (expression, names, values)
    }
}

/// A [`FencedStore`] on one DynamoDB table whose hash key is `pk` (S).
///
/// Each key is one item: `pk` (the key), `lock_token` (the mark, N),
/// `value` (B) and `version` (N, raised by every accepted write). `put`,
/// `fence` and `delete` on a key with a mark are each **one** `UpdateItem`
/// conditioned on `attribute_exists(pk) AND lock_token <= :t`, with
/// `ReturnValuesOnConditionCheckFailure: ALL_OLD`: the check and the write
/// are one atomic step on the server, and a refusal names the stored mark
/// in the same round trip. A key with no mark (its first write, or its
/// mark removed under the floor) is written by a `TransactWriteItems` that
/// checks the store's floor first (see `floor.rs`; contract clause 15).
/// Reads are strongly consistent. The SDK never retries these writes (a
/// retry after a lost answer could be refused by the write's own effect):
/// a lost answer is [`Error::OutcomeUnknown`].
#[derive(Clone, Debug)]
pub struct DynamoStore {
    client: Client,
    table: String,
    /// For `verify`'s transport check: `None` is a caller's own client.
    endpoint: Option<String>,
}

impl DynamoStore {
    /// The longest key: DynamoDB's partition key limit.
    pub const MAX_KEY_LEN: usize = 2048;
    /// The largest value: DynamoDB's 400 KB item, less room for the key
    /// (up to 2048 bytes) and the other attributes.
    pub const MAX_VALUE_LEN: usize = 400 * 1024 - 3 * 1024;

    /// A store on `table` through your configured `client`. Nothing is sent
    /// until the first operation; a missing table is then a
    /// non-retryable [`Error::Backend`].
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            endpoint: None,
        }
    }

    /// Names the endpoint `client` talks to (`None`: AWS itself), for
    /// `verify`'s transport check; [`crate::DynamoConfig`] does it.
    #[must_use]
    pub fn with_endpoint(mut self, endpoint: Option<&str>) -> Self {
        self.endpoint = Some(crate::table::shown_endpoint(endpoint));
        self
    }

    /// The table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The limits, checked before anything is sent.
    pub fn limits() -> Limits {
        Limits {
            max_key_len: Self::MAX_KEY_LEN,
            max_value_len: Self::MAX_VALUE_LEN,
            // A DynamoDB number holds 38 digits: every u64.
            max_token: FencingToken::new(u64::MAX),
        }
    }

    /// The one conditional write: accepted, or refused naming the mark.
    /// An item with a mark is one `UpdateItem`; a key with none (new, or
    /// its mark removed under the floor) goes again as a transaction with
    /// the floor's check (see [`crate::floor`]).
    async fn write(
        &self,
        op: &str,
        key: &str,
        token: FencingToken,
        change: Change<'_>,
    ) -> Result<()> {
        let (expression, names, values) = change.expression(token);
        let name = format!("{op} {key:?} in table {}", self.table);
        let request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(key.to_owned()))
            .condition_expression(floor::MARKED)
            .update_expression(&expression)
            .set_expression_attribute_names(names.clone())
            .set_expression_attribute_values(Some(values.clone()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        match send_conditional(request, Call::write(&name)).await? {
            Ok(_) => return Ok(()),
            Err(Some(old)) => return Err(refusal(&self.table, op, key, token, Some(old))),
            // No item, so no mark: the floor judges.
            Err(None) => {}
        }
        let update = Update::builder()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(key.to_owned()))
            .condition_expression(CONDITION)
            .update_expression(expression)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| Error::backend(NAME, false, e))?;
        let items = vec![
            floor::check(&self.table, key, token)?,
            TransactWriteItem::builder().update(update).build(),
        ];
        let mut conflicts = 0;
        loop {
            let canceled = match floor::transact(&self.client, items.clone(), &name).await? {
                Ok(()) => return Ok(()),
                Err(canceled) => canceled,
            };
            let code = |i: usize| canceled.reasons.get(i).filter(|r| floor::failed(r));
            if let Some(reason) = code(0).filter(|r| r.code() == Some("ConditionalCheckFailed")) {
                return Err(floor::refusal(&self.table, key, token, reason.item.clone()));
            }
            if let Some(reason) = code(1).filter(|r| r.code() == Some("ConditionalCheckFailed")) {
                return Err(refusal(&self.table, op, key, token, reason.item.clone()));
            }
            let conflict = canceled
                .reasons
                .iter()
                .any(|r| r.code() == Some("TransactionConflict"));
            let retryable = canceled.reasons.iter().any(|r| {
                r.code()
                    .is_some_and(|c| floor::RETRYABLE_REASONS.contains(&c))
            });
            // A raise of the floor (or another first write of the key) held
            // an item: nothing was written, so the same write goes again.
            if conflict && conflicts < CONFLICT_RETRIES {
                conflicts += 1;
                tokio::time::sleep(floor::backoff(conflicts)).await;
                continue;
            }
            // Canceled for another reason (throttling): nothing was written.
            return Err(Error::backend(NAME, retryable, canceled.err));
        }
    }

    /// The item's mark; an item without a numeric one is foreign.
    fn mark_of(&self, key: &str, item: &Attributes) -> Result<FencingToken> {
        mark_of(&self.table, key, item)
    }

    /// Reads the item, strongly consistent.
    async fn read(&self, op: &str, key: &str) -> Result<Option<Attributes>> {
        let name = format!("{op} {key:?} in table {}", self.table);
        crate::update::read_consistent(&self.client, &self.table, key, Call::read(&name)).await
    }
}

/// The error for a write to `key` whose condition failed, from the old
/// item DynamoDB sent back (`ALL_OLD`): [`Error::StaleToken`] naming its
/// mark, or a foreign item. The guard's fence item reads the same.
pub(crate) fn refusal(
    table: &str,
    op: &str,
    key: &str,
    token: FencingToken,
    old: Option<Attributes>,
) -> Error {
    let current = match old.map(|item| mark_of(table, key, &item)).transpose() {
        Ok(current) => current,
        Err(e) => return e,
    };
    match current {
        Some(current) if current > token => Error::StaleToken {
            key: key.to_owned(),
            presented: token,
            current,
        },
        other => foreign(
            table,
            key,
            &format!("{op} was refused, but the stored mark reads {other:?}"),
        ),
    }
}

/// The item's mark; an item without a numeric one is foreign.
pub(crate) fn mark_of(table: &str, key: &str, item: &Attributes) -> Result<FencingToken> {
    match item.get(LOCK_TOKEN) {
        None => Err(foreign(table, key, "the item has no lock_token")),
        Some(AttributeValue::N(n)) => match n.parse::<u64>() {
            Ok(n) => Ok(FencingToken::new(n)),
            Err(_) => Err(foreign(
                table,
                key,
                &format!("its lock_token {n:?} is not a token"),
            )),
        },
        Some(_) => Err(foreign(table, key, "its lock_token is not a number")),
    }
}

/// An item this store did not write (no numeric `lock_token`): its mark is
/// unknown, so it is neither read nor overwritten.
fn foreign(table: &str, key: &str, why: &str) -> Error {
    Error::backend(
        NAME,
        false,
        format!(
            "item {key:?} in table {table} was not written through fencing ({why}); \
             nothing was written: delete the item or give it a numeric lock_token"
        ),
    )
}

#[async_trait]
impl FencedStore for DynamoStore {
    fn name(&self) -> &'static str {
        NAME
    }

    fn limits(&self) -> Limits {
        Self::limits()
    }

    async fn put(&self, key: &str, value: Bytes, token: FencingToken) -> Result<()> {
        Self::limits().check_write(key, token, value.len())?;
        self.write("put", key, token, Change::Set(&value)).await
    }

    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        Self::limits().check_key(key)?;
        let Some(item) = self.read("get", key).await? else {
            return Ok(None);
        };
        let token = self.mark_of(key, &item)?;
        match item.get(VALUE) {
            None => Ok(None),
            Some(AttributeValue::B(blob)) => Ok(Some(Versioned {
                value: Bytes::copy_from_slice(blob.as_ref()),
                token,
            })),
            Some(_) => Err(foreign(&self.table, key, "its value is not binary")),
        }
    }

    async fn fence(&self, key: &str, token: FencingToken) -> Result<FencingToken> {
        Self::limits().check_write(key, token, 0)?;
        self.write("fence", key, token, Change::Keep).await?;
        Ok(token)
    }

    async fn mark(&self, key: &str) -> Result<Option<FencingToken>> {
        Self::limits().check_key(key)?;
        match self.read("mark", key).await? {
            Some(item) => self.mark_of(key, &item).map(Some),
            None => Ok(None),
        }
    }

    async fn delete(&self, key: &str, token: FencingToken) -> Result<()> {
        Self::limits().check_write(key, token, 0)?;
        self.write("delete", key, token, Change::Clear).await
    }

    async fn floor(&self) -> Result<Option<FencingToken>> {
        floor::read(&self.client, &self.table).await
    }

    async fn raise_floor(&self, floor: FencingToken) -> Result<FencingToken> {
        floor::raise(&self.client, &self.table, Self::limits(), floor).await
    }

    async fn remove_floored_marks(&self, most: u32) -> Result<u64> {
        floor::remove_covered(&self.client, &self.table, most).await
    }

    async fn verify(&self) -> Result<Vec<SafetyCheck>> {
        let mut checks = crate::table::checks(&self.client, &self.table).await?;
        // A missing table or another key schema: the probe would only fail.
        if checks.iter().all(SafetyCheck::is_safe) {
            checks.extend(fencing_core::safety::probe_store(self).await?);
        }
        if let Some(endpoint) = &self.endpoint {
            checks.push(fencing_core::tls::TlsOptions::endpoint_check(endpoint));
        }
        Ok(checks)
    }
}
