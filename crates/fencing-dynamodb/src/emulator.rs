//! Pointing the SDK at a local DynamoDB emulator, for tests (feature
//! `emulator`).
//!
//! The standard emulator is moto's DynamoDB (`integration/services.sh up
//! dynamodb`) on `http://127.0.0.1:5010`, served one request at a time so
//! that its conditional writes are atomic. Failures are
//! [`fencing_core::Error`]s, so a test can tell "the emulator is not
//! running" ([`fencing_core::Error::Backend`] with `retryable: true`) from
//! a real problem.
//!
//! ```no_run
//! # async fn demo() -> fencing_core::Result<()> {
//! let store = fencing_dynamodb::emulator::store("http://127.0.0.1:5010", "my-test-table").await?;
//! # Ok(()) }
//! ```

use aws_sdk_dynamodb::Client;
use fencing_core::Result;

use crate::DynamoStore;

/// A client for the emulator at `endpoint`: static test credentials, region
/// `us-east-1` (what `DynamoConfig::from_url("dynamodb://T?endpoint=…&emulator=true")`
/// builds).
pub fn client(endpoint: &str) -> Client {
    let sdk = fencing_aws::emulator_config(endpoint, None, None);
    Client::from_conf(aws_sdk_dynamodb::config::Builder::from(&sdk).build())
}

/// Creates `table` (hash key `pk`, S) unless it exists, and waits until it
/// is active.
///
/// # Errors
/// [`fencing_core::Error::Backend`] from backend `"dynamodb"`: retryable
/// when no answer came back (nothing listening), not retryable when it
/// refused; [`fencing_core::Error::UnsafeConfiguration`] for an existing
/// table with another key.
pub async fn create_table(client: &Client, table: &str) -> Result<()> {
    crate::table::create(client, table).await
}

/// A fenced store on `table` at the emulator at `endpoint`, creating the
/// table if needed: [`client`], then [`create_table`].
///
/// # Errors
/// As [`create_table`].
pub async fn store(endpoint: &str, table: &str) -> Result<DynamoStore> {
    let client = client(endpoint);
    create_table(&client, table).await?;
    Ok(DynamoStore::new(client, table).with_endpoint(Some(endpoint)))
}

/// An issuer on `table` at the emulator at `endpoint`, creating the table
/// if needed, with `prefix` for its items (default
/// [`DynamoIssuer::DEFAULT_PREFIX`](crate::DynamoIssuer::DEFAULT_PREFIX)).
///
/// # Errors
/// As [`create_table`].
pub async fn issuer(
    endpoint: &str,
    table: &str,
    prefix: Option<&str>,
) -> Result<crate::DynamoIssuer> {
    let client = client(endpoint);
    create_table(&client, table).await?;
    let issuer = crate::DynamoIssuer::new(client, table).with_endpoint(Some(endpoint));
    Ok(match prefix {
        Some(prefix) => issuer.with_prefix(prefix),
        None => issuer,
    })
}
