//! The table: creating it, and the checks `verify` makes of it.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, MultiRegionConsistency,
    ScalarAttributeType, TableDescription, TableStatus,
};
use fencing_core::adapter::Call;
use fencing_core::safety::SafetyCheck;
use fencing_core::{Error, Result};

use crate::error::{NAME, map_error};
use crate::store::PK;

/// How long [`create`] waits for a new table to become active.
const ACTIVE_WITHIN: Duration = Duration::from_secs(60);

/// The table's description, `None` if it does not exist.
async fn describe(client: &Client, table: &str) -> Result<Option<TableDescription>> {
    match client.describe_table().table_name(table).send().await {
        Ok(out) => Ok(out.table),
        Err(SdkError::ServiceError(e))
            if matches!(e.err(), DescribeTableError::ResourceNotFoundException(_)) =>
        {
            Ok(None)
        }
        Err(e) => Err(map_error(e, Call::read(&format!("describe table {table}")))),
    }
}

/// Creates `table` (hash key `pk` of type S, on-demand billing) unless it
/// exists, then waits until it is active. An existing table is checked:
/// its hash key must be `pk` (S), with no sort key.
///
/// # Errors
/// [`Error::UnsafeConfiguration`] for an existing table of another key
/// schema; [`Error::Backend`] as the SDK fails (not retryable for refused
/// credentials or permissions, retryable when nothing answered).
pub(crate) async fn create(client: &Client, table: &str) -> Result<()> {
    if describe(client, table).await?.is_none() {
        let created = client
            .create_table()
            .table_name(table)
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(PK)
                    .key_type(KeyType::Hash)
                    .build()
                    .map_err(|e| Error::backend(NAME, false, e))?,
            )
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(PK)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .map_err(|e| Error::backend(NAME, false, e))?,
            )
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await;
        match created {
            Ok(_) => tracing::debug!(table, "created the table"),
            // Created by someone else meanwhile.
            Err(SdkError::ServiceError(e)) if e.err().is_resource_in_use_exception() => {}
            Err(e) => return Err(map_error(e, Call::write(&format!("create table {table}")))),
        }
    }
    let start = Instant::now();
    loop {
        let description = describe(client, table).await?;
        if let Some(d) = &description {
            if let Some(why) = key_schema_problem(d) {
                return Err(Error::UnsafeConfiguration {
                    backend: NAME,
                    reason: format!("table {table}: {why}"),
                });
            }
            if d.table_status() == Some(&TableStatus::Active) {
                return Ok(());
            }
        }
        if start.elapsed() > ACTIVE_WITHIN {
            return Err(Error::Timeout {
                operation: format!("wait for table {table} to become active"),
                after: ACTIVE_WITHIN,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What is wrong with the key schema for this store, if anything.
fn key_schema_problem(d: &TableDescription) -> Option<String> {
    let keys = d.key_schema();
    let hash = keys.iter().find(|k| k.key_type() == &KeyType::Hash);
    let string_pk = d
        .attribute_definitions()
        .iter()
        .any(|a| a.attribute_name() == PK && a.attribute_type() == &ScalarAttributeType::S);
    match hash {
        Some(h) if h.attribute_name() == PK && string_pk && keys.len() == 1 => None,
        Some(h) if h.attribute_name() == PK && string_pk => Some(
            "it has a sort key: one key would name many items, each with its own mark".to_owned(),
        ),
        Some(h) => Some(format!(
            "its hash key is {:?}, expected \"pk\" of type S",
            h.attribute_name()
        )),
        None => Some("it has no hash key".to_owned()),
    }
}

/// The table's own checks for `verify`: it exists with `pk` (S) as its
/// only key, and no replica in another region can overwrite a mark
/// (a global table's cross-region conflicts resolve by last writer wins,
/// unless it is strongly consistent across regions).
pub(crate) async fn checks(client: &Client, table: &str) -> Result<Vec<SafetyCheck>> {
    let Some(d) = describe(client, table).await? else {
        return Ok(vec![SafetyCheck::unsafe_(
            "table",
            format!(
                "table {table} does not exist (create it, or add create_table=true to the URL)"
            ),
        )]);
    };
    let mut checks = vec![match key_schema_problem(&d) {
        None => SafetyCheck::pass(
            "table",
            format!("table {table}: hash key pk (S), no sort key"),
        ),
        Some(why) => SafetyCheck::unsafe_("table", format!("table {table}: {why}")),
    }];
    let replicas = d.replicas().len();
    let strong = d.multi_region_consistency() == Some(&MultiRegionConsistency::Strong);
    checks.push(if replicas == 0 {
        SafetyCheck::pass("replication", "a single-region table")
    } else if strong {
        SafetyCheck::pass(
            "replication",
            format!("a global table with {replicas} replicas, strongly consistent across regions"),
        )
    } else {
        SafetyCheck::unsafe_(
            "replication",
            format!(
                "a global table with {replicas} replicas and eventual cross-region consistency: \
                 a write in another region can overwrite a higher mark (last writer wins)"
            ),
        )
    });
    Ok(checks)
}

/// The endpoint a client talks to as `verify` names it: AWS itself when
/// none was given, redacted.
pub(crate) fn shown_endpoint(endpoint: Option<&str>) -> String {
    endpoint.map_or_else(
        || "https://dynamodb.amazonaws.com".to_owned(),
        fencing_core::redact,
    )
}
