//! The SQL counter issuer: leases with tokens, on the database's clock.
//!
//! ```sh
//! DATABASE_URL=postgres://fencing:fencing@127.0.0.1:5432/fencing cargo run -p fencing-sql --example issuer
//! cargo run -p fencing-sql --example issuer -- sqlite://example.sqlite
//! ```

use std::time::Duration;

use fencing_core::{Error, LeaseRequest, TokenIssuer};
use fencing_sql::SqlConfig;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    // A URL argument, else FENCING_SQL_URL or DATABASE_URL.
    let url = std::env::args().nth(1);
    let config = url.map_or_else(SqlConfig::from_env, |url| SqlConfig::from_url(&url))?;
    let issuer = config.connect_issuer().await?;
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
