//! The issuer, the store and the transaction guard on one DynamoDB table:
//! a holder ships an order with a `FencedTransaction`, pauses past its
//! lease, and its late transaction is refused whole once the next holder
//! has fenced the name.
//!
//! ```text
//! integration/services.sh up dynamodb
//! cargo run -p fencing-dynamodb --example dynamodb_guard
//! ```
//!
//! The endpoint comes from `FENCING_DYNAMODB_ENDPOINT` (default
//! `http://127.0.0.1:5010`, moto); the table `fencing-example` is created
//! if missing. Against AWS: `dynamodb://TABLE?region=…` and AWS's own
//! credentials, without `emulator=true`.

use std::time::Duration;

use fencing_core::{Error, FencedStore, LeaseRequest, TokenIssuer};
use fencing_dynamodb::aws_sdk_dynamodb::types::{AttributeValue, Update};
use fencing_dynamodb::{DynamoConfig, FencedTransaction};

const TTL: Duration = Duration::from_millis(300);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint = std::env::var("FENCING_DYNAMODB_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:5010".into());
    let config = DynamoConfig::from_url(&format!(
        "dynamodb://fencing-example?endpoint={endpoint}&emulator=true&create_table=true"
    ))?;
    let issuer = config.connect_issuer().await?;
    let store = config.connect_store().await?;
    let table = store.table().to_owned();

    // The lease's resource is also the fence name: one name, one mark.
    let name = format!("orders-{}", std::process::id());
    let order = format!("{name}/order-1");
    let ship = |by: &str| {
        Update::builder()
            .table_name(&table)
            .key("pk", AttributeValue::S(order.clone()))
            .update_expression("SET #s = :s")
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":s", AttributeValue::S(by.to_owned()))
    };

    let first = issuer
        .try_acquire(&LeaseRequest::new(&name, TTL))
        .await?
        .ok_or("the resource is held")?;
    FencedTransaction::new(&store, &name, first.token())
        .update(ship("shipped by the first holder"))
        .send()
        .await?;
    println!("holder 1 (token {}) shipped the order", first.token());

    // Holder 1 pauses; holder 2 waits out its lease, takes over and fences
    // the name before its first write, as `Election::fence_on_takeover` does.
    let second = issuer
        .acquire(&LeaseRequest::new(&name, TTL), TTL * 4)
        .await?;
    store.fence(&name, second.token()).await?;
    println!("holder 2 took over with token {}", second.token());

    // Holder 1 wakes up and tries to cancel the order: refused, nothing
    // written.
    match FencedTransaction::new(&store, &name, first.token())
        .update(ship("cancelled by the first holder"))
        .send()
        .await
    {
        Err(e @ Error::StaleToken { .. }) => println!("holder 1 refused: {e}"),
        other => return Err(format!("the zombie was let in: {other:?}").into()),
    }

    let item = store
        .client()
        .get_item()
        .table_name(&table)
        .key("pk", AttributeValue::S(order.clone()))
        .consistent_read(true)
        .send()
        .await?
        .item
        .ok_or("no order")?;
    let status = item.get("status").and_then(|s| s.as_s().ok());
    let mark = store.mark(&name).await?.map(|t| t.get());
    println!("{order}: {status:?}; the mark of {name} is {mark:?}");
    assert_eq!(
        status.map(String::as_str),
        Some("shipped by the first holder")
    );
    issuer.release(&second).await?;
    Ok(())
}
