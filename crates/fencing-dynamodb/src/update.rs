//! The one strongly consistent read and the one conditional write both
//! the store and the issuer send.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::Result;
use fencing_core::adapter::Call;

use crate::error::map_error;
use crate::store::PK;

/// An item's attributes, as DynamoDB returns them.
pub(crate) type Attributes = HashMap<String, AttributeValue>;

/// The item at `key` in `table`, strongly consistent; `None` if there is
/// none. `call` names the read in an error.
pub(crate) async fn read_consistent(
    client: &Client,
    table: &str,
    key: &str,
    call: Call<'_>,
) -> Result<Option<Attributes>> {
    let out = client
        .get_item()
        .table_name(table)
        .key(PK, AttributeValue::S(key.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| map_error(e, call))?;
    Ok(out.item)
}

/// Sends one conditional `UpdateItem`, never retried by the SDK: a resent
/// write whose first answer was lost could apply twice, or be refused by
/// its own effect. `Ok(Ok(updated))` when it was applied (the attributes
/// the request asked back), `Ok(Err(old))` when its condition failed (the
/// old item, if the request asked for it).
pub(crate) async fn send_conditional(
    request: UpdateItemFluentBuilder,
    call: Call<'_>,
) -> Result<std::result::Result<Option<Attributes>, Option<Attributes>>> {
    let no_retries =
        aws_sdk_dynamodb::config::Builder::default().retry_config(RetryConfig::disabled());
    match request.customize().config_override(no_retries).send().await {
        Ok(out) => Ok(Ok(out.attributes)),
        Err(SdkError::ServiceError(service))
            if service.err().is_conditional_check_failed_exception() =>
        {
            Ok(Err(match service.into_err() {
                UpdateItemError::ConditionalCheckFailedException(refusal) => refusal.item,
                _ => None,
            }))
        }
        Err(err) => Err(map_error(err, call)),
    }
}
