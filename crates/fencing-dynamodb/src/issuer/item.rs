//! The lease item as DynamoDB holds it: its attributes as read, and the
//! strongly consistent read and the one conditional `UpdateItem` every
//! operation of [`DynamoIssuer`] is made of.

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::adapter::Call;
use fencing_core::{Error, Result};

use super::{COUNTER, DynamoIssuer, HOLDER, RVN, TTL_MS};
use crate::error::{NAME, map_error};
use crate::sightings::Seen;
use crate::store::PK;
use crate::update::send_conditional;

/// Placeholders for the attribute names in expressions (`counter` and
/// others are DynamoDB reserved words): only those used may be sent.
const NAMES: [(&str, &str); 4] = [("#c", COUNTER), ("#h", HOLDER), ("#r", RVN), ("#t", TTL_MS)];

/// The item of one resource, as read.
#[derive(Debug, Default)]
pub(super) struct Item {
    pub(super) counter: Option<u64>,
    pub(super) holder: Option<String>,
    pub(super) rvn: Option<String>,
    pub(super) ttl_ms: Option<u64>,
}

/// A fresh random record version number.
pub(super) fn fresh_rvn() -> String {
    format!("{:032x}", rand::random::<u128>())
}

pub(super) fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

impl DynamoIssuer {
    pub(super) fn remember(&self, key: &str, seen: Option<Seen>) {
        self.seen.lock().expect("seen lock").put(key, seen);
    }

    pub(super) fn know(&self, key: &str, counter: Option<u64>) {
        self.counters
            .lock()
            .expect("counters lock")
            .put(key, counter);
    }

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

    /// Reads the item, strongly consistent.
    pub(super) async fn read(&self, op: &str, key: &str) -> Result<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(key.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| map_error(e, Call::read(&format!("{op} {key:?}"))))?;
        let item = out.item.map(|item| self.parse(key, &item)).transpose()?;
        self.know(key, item.as_ref().and_then(|i| i.counter));
        Ok(item)
    }

    pub(super) fn parse(&self, key: &str, item: &HashMap<String, AttributeValue>) -> Result<Item> {
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
        Ok(Item {
            counter: number(COUNTER)?,
            holder: text(HOLDER)?,
            rvn: text(RVN)?,
            ttl_ms: number(TTL_MS)?,
        })
    }

    /// One conditional `UpdateItem`, never retried by the SDK; `Ok(None)`
    /// when the condition failed (with the old item if asked for).
    pub(super) async fn update(
        &self,
        op: &str,
        key: &str,
        build: impl FnOnce(UpdateItemFluentBuilder) -> UpdateItemFluentBuilder,
    ) -> Result<std::result::Result<Option<HashMap<String, AttributeValue>>, Option<Item>>> {
        let request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(key.to_owned()));
        let mut request = build(request);
        let used = format!(
            "{} {}",
            request.get_update_expression().as_deref().unwrap_or(""),
            request.get_condition_expression().as_deref().unwrap_or("")
        );
        for (placeholder, name) in NAMES {
            if used.contains(placeholder) {
                request = request.expression_attribute_names(placeholder, name);
            }
        }
        let name = format!("{op} {key:?} in table {}", self.table);
        Ok(match send_conditional(request, Call::write(&name)).await? {
            Ok(updated) => Ok(updated),
            Err(old) => {
                let old = old.map(|item| self.parse(key, &item)).transpose()?;
                if let Some(old) = &old {
                    self.know(key, old.counter);
                }
                Err(old)
            }
        })
    }
}
