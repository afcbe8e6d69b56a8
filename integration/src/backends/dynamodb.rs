//! DynamoDB (moto): the issuer and the store, on this run's table.

use std::sync::Arc;
use std::time::Duration;

use fencing_harness::env;
use fencing_tokens::FencedStore;

use super::{Backend, bucket_name, on};

/// DynamoDB, on `FENCING_DYNAMODB_ENDPOINT`.
pub const BACKEND: Backend = Backend {
    name: "dynamodb",
    descriptor: "dynamodb",
    server: Some(&env::DYNAMODB),
    // The issuer by URL, on the store's table (its items apart by prefix).
    url: || {
        format!(
            "dynamodb://{}?endpoint={}&emulator=true&create_table=true",
            bucket_name(),
            env::DYNAMODB.endpoint()
        )
    },
    ttl: Duration::from_millis(400),
    store: Some(|| Box::pin(async { Some(Arc::new(store().await?) as Arc<dyn FencedStore>) })),
    unreachable: Some("dynamodb://fenced?endpoint=http://127.0.0.1:1&emulator=true"),
    #[cfg(feature = "bench")]
    bench: bench::BENCH,
};

#[cfg(feature = "bench")]
pub use bench::{DynamoPlain, Sides};

/// A DynamoDB store on this run's table at `FENCING_DYNAMODB_ENDPOINT`
/// (moto), creating the table.
///
/// # Panics
/// If the emulator does not answer.
pub async fn store() -> Option<fencing_dynamodb::DynamoStore> {
    on(
        Some(&env::DYNAMODB),
        fencing_dynamodb::emulator::store(&env::DYNAMODB.endpoint(), &bucket_name()),
    )
    .await
}

#[cfg(feature = "bench")]
mod bench {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use bytes::Bytes;
    use fencing_dynamodb::aws_sdk_dynamodb::error::DisplayErrorContext;
    use fencing_dynamodb::aws_sdk_dynamodb::primitives::Blob;
    use fencing_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
    use fencing_dynamodb::{
        COUNTER, DynamoIssuer, DynamoStore, HOLDER, LOCK_TOKEN, PK, VALUE, VERSION, emulator,
    };
    use fencing_tokens::{FencedStore, FencingToken, LeaseRequest, TokenIssuer};

    use crate::backends::plain::{Bench, BoxFuture, BoxResult, Plain};

    /// Its rows and the scale rows; moto keeps every item in memory.
    pub(super) const BENCH: Bench = Bench {
        plain: Plain::DynamoDb(DynamoPlain {
            connect: |endpoint, table| {
                Box::pin(async move { Sides::connect(&endpoint, &table).await })
            },
            version: "moto (DynamoDB API)",
        }),
        scale: true,
        load: None,
        in_memory: true,
        server_header: None,
    };

    /// What the bench compares a store and issuer of the DynamoDB API
    /// with.
    #[derive(Clone, Copy, Debug)]
    pub struct DynamoPlain {
        /// Both sides on a table (made if missing) at an endpoint.
        pub connect: fn(String, String) -> BoxFuture<'static, BoxResult<Sides>>,
        /// What the report says of the server's version.
        pub version: &'static str,
    }

    /// The fenced put of `DynamoStore` (one conditional `UpdateItem`) and
    /// `DynamoIssuer`'s acquire + release, and the plain calls of the
    /// same client they are timed against.
    #[derive(Debug)]
    pub struct Sides {
        store: DynamoStore,
        issuer: DynamoIssuer,
        /// Names the raw lease items, apart from the other side's.
        raw: (String, AtomicU64),
    }

    /// The TTL of the bench's leases (long enough never to expire in a
    /// round).
    const LEASE_TTL: Duration = Duration::from_secs(30);

    impl Sides {
        /// On `table` at `endpoint` (made if missing).
        async fn connect(endpoint: &str, table: &str) -> BoxResult<Self> {
            let store = emulator::store(endpoint, table).await?;
            let issuer = DynamoIssuer::new(store.client().clone(), table);
            Ok(Self {
                store,
                issuer,
                raw: (fencing_testkit::unique_prefix(), AtomicU64::new(0)),
            })
        }

        /// A fenced put at a token that never falls.
        pub async fn fenced_put(&self, key: &str, value: Bytes) -> BoxResult<()> {
            Ok(self.store.put(key, value, FencingToken::new(1)).await?)
        }

        /// A plain, unconditional `PutItem` of the same attributes.
        pub async fn plain_put(&self, key: &str, value: Bytes) -> BoxResult<()> {
            self.store
                .client()
                .put_item()
                .table_name(self.store.table())
                .item(PK, AttributeValue::S(key.to_owned()))
                .item(VALUE, AttributeValue::B(Blob::new(value)))
                .send()
                .await
                .map_err(|e| DisplayErrorContext(e).to_string())?;
            Ok(())
        }

        /// The fenced put's `UpdateItem` without its condition: what the
        /// condition alone costs.
        pub async fn plain_update(&self, key: &str, value: Bytes) -> BoxResult<()> {
            self.store
                .client()
                .update_item()
                .table_name(self.store.table())
                .key(PK, AttributeValue::S(key.to_owned()))
                .update_expression(format!(
                    "SET {LOCK_TOKEN} = :t, #value = :v ADD {VERSION} :one"
                ))
                .expression_attribute_names("#value", VALUE)
                .expression_attribute_values(":t", AttributeValue::N("1".to_owned()))
                .expression_attribute_values(":v", AttributeValue::B(Blob::new(value)))
                .expression_attribute_values(":one", AttributeValue::N("1".to_owned()))
                .send()
                .await
                .map_err(|e| DisplayErrorContext(e).to_string())?;
            Ok(())
        }

        /// The issuer's acquire + release of one resource.
        pub async fn lease(&self, resource: &str) -> BoxResult<()> {
            let lease = self
                .issuer
                .try_acquire(&LeaseRequest::new(resource, LEASE_TTL))
                .await?
                .ok_or("the bench's resource was held")?;
            Ok(self.issuer.release(&lease).await?)
        }

        /// The least a lease with a counter takes, on a new item each time.
        pub async fn raw_lease(&self) -> BoxResult<()> {
            let (own, next) = &self.raw;
            let key = format!("raw-lease-{own}-{}", next.fetch_add(1, Ordering::Relaxed));
            match self.raw_lock_on(&key).await? {
                true => Ok(()),
                false => Err("the raw lease's new item was held".into()),
            }
        }

        /// The least a lease with a counter takes on `key`: one conditional
        /// `UpdateItem` that sets the holder if there is none and adds one
        /// to the counter, one that removes the holder if it is still this
        /// one. `false` if another holder has it.
        pub async fn raw_lock_on(&self, key: &str) -> BoxResult<bool> {
            let client = self.store.client();
            let holder = AttributeValue::S(fencing_tokens::HolderId::unique().to_string());
            let taken = client
                .update_item()
                .table_name(self.store.table())
                .key(PK, AttributeValue::S(key.to_owned()))
                .update_expression("SET #h = :h ADD #c :one")
                .condition_expression("attribute_not_exists(#h)")
                .expression_attribute_names("#h", HOLDER)
                .expression_attribute_names("#c", COUNTER)
                .expression_attribute_values(":h", holder.clone())
                .expression_attribute_values(":one", AttributeValue::N("1".to_owned()))
                .send()
                .await;
            match taken {
                Ok(_) => {}
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
                {
                    return Ok(false);
                }
                Err(e) => return Err(DisplayErrorContext(e).to_string().into()),
            }
            client
                .update_item()
                .table_name(self.store.table())
                .key(PK, AttributeValue::S(key.to_owned()))
                .update_expression("REMOVE #h")
                .condition_expression("#h = :h")
                .expression_attribute_names("#h", HOLDER)
                .expression_attribute_values(":h", holder)
                .send()
                .await
                .map_err(|e| DisplayErrorContext(e).to_string())?;
            Ok(true)
        }
    }
}
