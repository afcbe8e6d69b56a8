//! The SQL counter issuer: leases with tokens, on the database's clock.
//!
//! ```sh
//! cargo run -p fencing-sql --example issuer                      # PostgreSQL from FENCING_PG_URL
//! cargo run -p fencing-sql --example issuer -- sqlite://example.sqlite
//! ```

use std::time::Duration;

use fencing_core::{Error, LeaseRequest, TokenIssuer};
use fencing_sql::SqlIssuer;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let url = std::env::args().nth(1).unwrap_or_else(|| {
        std::env::var("FENCING_PG_URL")
            .unwrap_or_else(|_| "postgres://fencing:fencing@127.0.0.1:5432/fencing".into())
    });
    let issuer = SqlIssuer::connect(&url).await?;
    let resource = format!("examples/issuer/{}", std::process::id());
    let ttl = Duration::from_secs(2);

    let lease = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), Duration::from_secs(5))
        .await?;
    println!(
        "granted token {} (deadline in {:?})",
        lease.token(),
        lease.remaining()
    );
    let lease = issuer.renew(&lease).await?;
    println!("renewed, same token {}", lease.token());
    let waiting = issuer
        .try_acquire(&LeaseRequest::new(&resource, ttl))
        .await?;
    println!(
        "another holder meanwhile: {}",
        if waiting.is_some() {
            "granted (bug!)"
        } else {
            "refused, held"
        }
    );
    issuer.release(&lease).await?;
    let next = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), Duration::from_secs(5))
        .await?;
    println!("after release: token {}", next.token());
    issuer.release(&next).await
}
