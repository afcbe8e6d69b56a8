//! The grant: one conditional `UpdateItem` that takes a free or dead
//! lease and hands back the item as it was when it is refused, and where
//! an item's counter starts.

use std::time::Instant;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use fencing_core::{Error, FencingToken, Lease, LeaseRequest, Result};

use super::DynamoIssuer;
use super::item::{Item, fresh_rvn, n};
use crate::error::NAME;
use crate::sightings::Seen;

impl DynamoIssuer {
    /// Where an item that does not exist starts its counter: DynamoDB's
    /// time in microseconds (see [`DynamoIssuer`]). Before any answer, a
    /// read of `key` asks for it; a server that sends no `Date` starts
    /// items at 1, and says so.
    pub(super) async fn seed(&self, key: &str) -> Result<u64> {
        if let Some(micros) = crate::clock::micros(&self.clock) {
            return Ok(micros);
        }
        self.read("read the clock at", key).await?;
        Ok(crate::clock::micros(&self.clock).unwrap_or_else(|| {
            tracing::warn!(
                key,
                table = %self.table,
                "DynamoDB's answers carry no Date: a lease item deleted by hand and made again \
                 would restart its tokens at 1"
            );
            0
        }))
    }

    /// The counter last known for `key`, short of the top: a grant on
    /// `#c = u64::MAX` would write one past the range, so at the top the
    /// grant carries no guess and its refusal tells what the item holds.
    pub(super) fn guess(&self, key: &str) -> Option<u64> {
        let known = self.counters.lock().expect("counters lock").get(key);
        known.filter(|c| *c < u64::MAX)
    }

    /// Grants `request` if `condition` holds. `condition` fixes the counter
    /// it replaces (`#c = :expected`, or `attribute_not_exists(#c)` when
    /// `expected` is `None`), so the token, one above it (or above `seed`),
    /// is written as a value (`#c = :next`), not by arithmetic on the
    /// server. The answer hands back the counter it replaced
    /// (`UPDATED_OLD`), which must be the one the condition named. When the
    /// condition does not hold, the item as it was (with `ALL_OLD`), so
    /// that a held resource costs no second request to judge.
    pub(super) async fn grant(
        &self,
        request: &LeaseRequest,
        key: &str,
        (condition, expected, seen): (&str, Option<u64>, Option<&str>),
        seed: u64,
    ) -> Result<std::result::Result<Lease, Option<Item>>> {
        // The callers keep `expected` below u64::MAX; the seed is far below.
        let token = match expected {
            Some(counter) => counter.checked_add(1),
            None => seed.checked_add(1),
        }
        .ok_or(Error::TokenOutOfRange {
            token: FencingToken::new(u64::MAX),
            max: Self::MAX_FLOOR,
        })?;
        let rvn = fresh_rvn();
        let sent_at = Instant::now();
        let answer = self
            .update("acquire", key, |r| {
                let r = r
                    .update_expression("SET #h = :h, #r = :rvn, #t = :ttl, #c = :next")
                    .condition_expression(condition)
                    .expression_attribute_values(
                        ":h",
                        AttributeValue::S(request.holder.to_string()),
                    )
                    .expression_attribute_values(":rvn", AttributeValue::S(rvn.clone()))
                    // Rounded up: never shorter than the holder's deadline.
                    .expression_attribute_values(":ttl", n(request.ttl_millis_ceil()))
                    .expression_attribute_values(":next", n(token))
                    .return_values(ReturnValue::UpdatedOld)
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    );
                // Only the values the condition uses may be sent.
                let r = match expected {
                    Some(expected) => r.expression_attribute_values(":expected", n(expected)),
                    None => r,
                };
                match seen {
                    Some(seen) => {
                        r.expression_attribute_values(":seen", AttributeValue::S(seen.to_owned()))
                    }
                    None => r,
                }
            })
            .await?;
        let attributes = match answer {
            Ok(attributes) => attributes,
            Err(old) => return Ok(Err(old)),
        };
        // Nothing old on an item made by this grant: no attributes at all.
        let replaced = match attributes.map(|a| self.parse(key, &a)).transpose() {
            Ok(old) => old.and_then(|old| old.counter),
            Err(e) => return Err(self.unreadable_grant(key, &rvn, e.chain()).await),
        };
        if replaced != expected {
            let why = format!(
                "it replaced counter {replaced:?}, not the {expected:?} it was conditioned on"
            );
            return Err(self.unreadable_grant(key, &rvn, why).await);
        }
        self.know(key, Some(token));
        // Measured after the answer: a waiter here may take over only once
        // this holder's own deadline (from sent_at) has passed.
        self.remember(
            key,
            Some(Seen {
                rvn,
                at: Instant::now(),
            }),
        );
        Ok(Ok(Lease::new(request, FencingToken::new(token), sent_at)))
    }

    /// A grant DynamoDB applied (this holder and the new counter are in
    /// the item) whose answer does not confirm the counter it replaced:
    /// the conditions make that a broken answer, not a counter of ours, but
    /// the lease cannot be handed out on a token the server contradicts,
    /// and left alone it would keep the resource for its TTL. So it is given back, by its own `rvn`, and the
    /// error says what was written.
    pub(super) async fn unreadable_grant(&self, key: &str, rvn: &str, why: String) -> Error {
        let what = format!(
            "the grant of item {key:?} in table {} was applied, but its answer was unreadable \
             ({why})",
            self.table
        );
        let undo = self
            .update("release an unreadable grant of", key, |r| {
                r.update_expression("REMOVE #h, #r, #t")
                    .condition_expression("#r = :rvn")
                    .expression_attribute_values(":rvn", AttributeValue::S(rvn.to_owned()))
            })
            .await;
        self.know(key, None);
        match undo {
            Ok(Ok(_)) => Error::backend(
                NAME,
                false,
                format!("{what}; it was released again (its counter stays, as at any release)"),
            ),
            Ok(Err(_)) => Error::backend(
                NAME,
                false,
                format!("{what}; another version has replaced it since, so nothing of it is held"),
            ),
            Err(e) => Error::outcome_unknown(
                NAME,
                format!("acquire {key:?} in table {}", self.table),
                format!(
                    "{what}; releasing it again failed ({}), so it may be held until its TTL",
                    e.chain()
                ),
            ),
        }
    }
}
