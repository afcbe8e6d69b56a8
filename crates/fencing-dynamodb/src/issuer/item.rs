//! The lease item as DynamoDB holds it: the record port of the record
//! lease ([`fencing_core::adapter::record`]), one strongly consistent
//! `GetItem` and one conditional `UpdateItem`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use fencing_core::adapter::Call;
use fencing_core::adapter::blob::ServerClock;
use fencing_core::adapter::record::{LeaseRecord, On, RecordPort, Seen, Wrote};
use fencing_core::{Error, Result};

use super::{COUNTER, HOLDER, RVN, TTL_MS};
use crate::error::{NAME, map_error};
use crate::store::PK;
use crate::update::{read_consistent, send_conditional};

/// Placeholders for the attribute names in expressions (`counter` and
/// others are DynamoDB reserved words): only those used may be sent.
const NAMES: [(&str, &str); 4] = [("#c", COUNTER), ("#h", HOLDER), ("#r", RVN), ("#t", TTL_MS)];

/// No lease item (or one with none of its attributes).
const ABSENT: &str =
    "attribute_not_exists(#c) AND attribute_not_exists(#h) AND attribute_not_exists(#r)";
/// The item still at the version read. The counter is compared by
/// **equality** with a `u64` this process parsed: a condition expression
/// has comparisons but no arithmetic and no integer test, so no bound can
/// tell `5.5` or `-3` (an operator's edit) from a token, and `#c < :max`
/// once let a grant through on them. Equality with a whole number in range
/// can only hold for that number: an item whose counter is none is refused
/// by DynamoDB, its refusal hands the item back, and parsing it names the
/// item as foreign with nothing written.
const AT: &str = "#r = :rvn AND #c = :counter";
/// An item made unseeded (an `rvn`, no counter yet: see `parse`) still at
/// the version read.
const AT_UNSEEDED: &str = "#r = :rvn AND attribute_not_exists(#c)";
/// The item still at the version read, for an item released by an older
/// version of this crate, which removed the `rvn`.
const AT_WITHOUT_RVN: &str =
    "attribute_not_exists(#r) AND attribute_not_exists(#h) AND #c = :counter";

/// A lease item's version: its `rvn` (fresh on every write) and counter
/// (none on an item made unseeded).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ItemVersion {
    rvn: Option<String>,
    counter: Option<u64>,
}

impl ItemVersion {
    /// The condition that the item is still at this version.
    fn condition(&self) -> &'static str {
        match self {
            Self {
                rvn: Some(_),
                counter: Some(_),
            } => AT,
            Self {
                rvn: Some(_),
                counter: None,
            } => AT_UNSEEDED,
            Self { rvn: None, .. } => AT_WITHOUT_RVN,
        }
    }

    /// The values [`condition`](Self::condition) names.
    fn values(&self) -> impl Iterator<Item = (&'static str, AttributeValue)> + '_ {
        let counter = self.counter.map(|c| (":counter", n(c)));
        let rvn = self
            .rvn
            .as_ref()
            .map(|r| (":rvn", AttributeValue::S(r.clone())));
        counter.into_iter().chain(rvn)
    }
}

/// Lease items in one table.
#[derive(Clone)]
pub(crate) struct Items {
    pub(super) client: Client,
    pub(super) table: String,
    /// DynamoDB's time, from the `Date` of the client's answers.
    pub(super) clock: Arc<ServerClock>,
}

impl std::fmt::Debug for Items {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Items")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn rvn_of(nonce: u128) -> String {
    format!("{nonce:032x}")
}

impl Items {
    pub(super) fn foreign(&self, key: &str, why: &str) -> Error {
        Error::backend(
            NAME,
            false,
            format!(
                "item {key:?} in table {} is not a lease item of fencing ({why}); nothing was written",
                self.table
            ),
        )
    }

    /// The record an item holds; `None` for an item with neither counter
    /// nor holder.
    fn parse(
        &self,
        key: &str,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<Option<Seen<ItemVersion>>> {
        let number = |name: &str| -> Result<Option<u64>> {
            match item.get(name) {
                None => Ok(None),
                Some(AttributeValue::N(v)) => v
                    .parse()
                    .map(Some)
                    .map_err(|_| self.foreign(key, &format!("its {name} {v:?} is not a u64"))),
                Some(_) => Err(self.foreign(key, &format!("its {name} is not a number"))),
            }
        };
        let text = |name: &str| -> Result<Option<String>> {
            match item.get(name) {
                None => Ok(None),
                Some(AttributeValue::S(v)) => Ok(Some(v.clone())),
                Some(_) => Err(self.foreign(key, &format!("its {name} is not a string"))),
            }
        };
        let (counter, holder, rvn, ttl_ms) =
            (number(COUNTER)?, text(HOLDER)?, text(RVN)?, number(TTL_MS)?);
        // Made unseeded: an rvn and nothing else. No counter, so that an
        // issuer of an older release (which read a free counter 0 as one to
        // grant 1 from) takes it for an item it must start itself.
        let counter = match (counter, &holder, &rvn) {
            (Some(counter), _, _) => Some(counter),
            (None, None, None) => return Ok(None),
            (None, None, Some(_)) => None,
            (None, Some(_), _) => return Err(self.foreign(key, "it has a holder but no counter")),
        };
        if holder.is_some() && (rvn.is_none() || ttl_ms.is_none()) {
            return Err(self.foreign(key, "it has a holder but no rvn or ttl_ms"));
        }
        // An rvn that is no nonce of ours (another writer's) matches none.
        let nonce = rvn
            .as_deref()
            .and_then(|r| u128::from_str_radix(r, 16).ok())
            .unwrap_or(0);
        Ok(Some(Seen {
            version: ItemVersion { rvn, counter },
            record: LeaseRecord {
                counter: counter.unwrap_or(0),
                holder,
                ttl_ms: ttl_ms.unwrap_or(0),
                nonce,
            },
            modified: None,
            answered: None,
        }))
    }
}

impl RecordPort for Items {
    type Version = ItemVersion;

    fn name(&self) -> &'static str {
        NAME
    }

    async fn read(&self, key: &str) -> Result<Option<Seen<ItemVersion>>> {
        let name = format!("read lease item {key:?}");
        match read_consistent(&self.client, &self.table, key, Call::read(&name)).await? {
            Some(item) => self.parse(key, &item),
            None => Ok(None),
        }
    }

    /// One conditional `UpdateItem` that sets every attribute of the
    /// record (the counter as a value, never by arithmetic on the server:
    /// the condition fixes the counter it replaces), never retried by the
    /// SDK; a refusal hands back the item as it is (`ALL_OLD`), so a stale
    /// guess costs no read.
    async fn write(
        &self,
        key: &str,
        on: &On<ItemVersion>,
        record: &LeaseRecord,
    ) -> Result<Wrote<ItemVersion>> {
        let rvn = rvn_of(record.nonce);
        let update = match &record.holder {
            Some(_) => "SET #c = :c, #r = :r, #h = :h, #t = :t",
            None if record.is_unseeded() => "SET #r = :r REMOVE #c, #h, #t",
            None => "SET #c = :c, #r = :r REMOVE #h, #t",
        };
        let condition = match on {
            On::Absent => ABSENT,
            On::At(version) => version.condition(),
        };
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(key.to_owned()))
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_values(":r", AttributeValue::S(rvn.clone()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if !record.is_unseeded() {
            request = request.expression_attribute_values(":c", n(record.counter));
        }
        if let Some(holder) = &record.holder {
            request = request
                .expression_attribute_values(":h", AttributeValue::S(holder.clone()))
                .expression_attribute_values(":t", n(record.ttl_ms));
        }
        if let On::At(version) = on {
            for (placeholder, value) in version.values() {
                request = request.expression_attribute_values(placeholder, value);
            }
        }
        let used = format!("{update} {condition}");
        for (placeholder, name) in NAMES {
            if used.contains(placeholder) {
                request = request.expression_attribute_names(placeholder, name);
            }
        }
        let name = format!("write lease item {key:?} in table {}", self.table);
        Ok(match send_conditional(request, Call::write(&name)).await? {
            Ok(_) => Wrote::Written(ItemVersion {
                rvn: Some(rvn),
                counter: (!record.is_unseeded()).then_some(record.counter),
            }),
            Err(old) => Wrote::RefusedShowing(match old {
                Some(item) => self.parse(key, &item)?,
                None => None,
            }),
        })
    }

    fn can_delete(&self) -> bool {
        true
    }

    /// One `DeleteItem` on the version's condition, never retried by the
    /// SDK (a resent delete whose first answer was lost is refused by its
    /// own effect: settled by the read that follows).
    async fn delete(&self, key: &str, version: &ItemVersion) -> Result<bool> {
        let condition = version.condition();
        let mut request = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(key.to_owned()))
            .condition_expression(condition);
        for (placeholder, value) in version.values() {
            request = request.expression_attribute_values(placeholder, value);
        }
        for (placeholder, name) in NAMES {
            if condition.contains(placeholder) {
                request = request.expression_attribute_names(placeholder, name);
            }
        }
        let no_retries =
            aws_sdk_dynamodb::config::Builder::default().retry_config(RetryConfig::disabled());
        let name = format!("delete lease item {key:?} in table {}", self.table);
        match request.customize().config_override(no_retries).send().await {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(service))
                if service.err().is_conditional_check_failed_exception() =>
            {
                Ok(false)
            }
            Err(err) => Err(map_error(err, Call::write(&name))),
        }
    }

    fn server_now(&self) -> Option<SystemTime> {
        self.clock.now()
    }
}
