//! Fencing your own transaction: an `orders` table, updated by whoever holds
//! the `orders` lease. A zombie's whole transaction is rolled back, and a
//! fence through the `SqlStore` (an election's takeover) shuts it out too:
//! one name, one mark.
//!
//! ```sh
//! cargo run -p fencing-sql --example guard          # PostgreSQL from FENCING_PG_URL
//! ```

use fencing_core::{Error, FencedStore, FencingToken};
use fencing_sql::{Db, SqlStore, Tables, fence_transaction};
use sqlx::PgPool;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("FENCING_PG_URL")
        .unwrap_or_else(|_| "postgres://fencing:fencing@127.0.0.1:5432/fencing".into());
    let pool = PgPool::connect(&url).await?;
    let tables = Tables::default();
    Db::postgres(pool.clone())
        .with_tables(tables.clone())
        .create_tables()
        .await?;

    sqlx::query(
        "CREATE TABLE IF NOT EXISTS example_orders (id BIGINT PRIMARY KEY, status TEXT NOT NULL)",
    )
    .execute(&pool)
    .await?;
    sqlx::query("INSERT INTO example_orders VALUES (1, 'new'), (2, 'new') ON CONFLICT (id) DO UPDATE SET status = 'new'")
        .execute(&pool)
        .await?;
    let domain = format!("example-orders-{}", std::process::id());

    // The current holder (token 34) ships both orders in one transaction.
    let mut tx = pool.begin().await?;
    fence_transaction(&mut tx, &tables, &domain, FencingToken::new(34)).await?;
    sqlx::query("UPDATE example_orders SET status = 'shipped'")
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;

    // The zombie (token 33) tries to cancel them: its transaction is refused.
    let mut tx = pool.begin().await?;
    match fence_transaction(&mut tx, &tables, &domain, FencingToken::new(33)).await {
        Err(e @ Error::StaleToken { .. }) => {
            println!("zombie refused: {e}");
            tx.rollback().await?;
        }
        other => panic!("the zombie was let in: {other:?}"),
    }

    // A new term (35) fences the name through the store before its first
    // write, as `Election::fence_on_takeover` does; 34 is now the zombie.
    let store = SqlStore::new(Db::postgres(pool.clone()).with_tables(tables.clone())).await?;
    store.fence(&domain, FencingToken::new(35)).await?;
    let mut tx = pool.begin().await?;
    match fence_transaction(&mut tx, &tables, &domain, FencingToken::new(34)).await {
        Err(e @ Error::StaleToken { .. }) => {
            println!("deposed holder refused: {e}");
            tx.rollback().await?;
        }
        other => panic!("the deposed holder was let in: {other:?}"),
    }

    let statuses: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, status FROM example_orders ORDER BY id")
            .fetch_all(&pool)
            .await?;
    println!("orders: {statuses:?}");
    assert!(statuses.iter().all(|(_, s)| s == "shipped"));
    Ok(())
}
