//! The in-memory issuer against the whole issuer suite.

use std::sync::Arc;
use std::time::Duration;

use fencing_core::TokenIssuer;
use fencing_core::memory::MemoryIssuer;
use fencing_testkit::issuer::IssuerProfile;

async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
    Some(Arc::new(MemoryIssuer::new()))
}

fencing_testkit::issuer_conformance!(issuer, IssuerProfile::with_ttl(Duration::from_millis(200)));

#[tokio::test]
async fn raised_floor_puts_the_next_token_above_it() {
    let issuer = MemoryIssuer::new();
    issuer.raise_floor("r", 1000.into()).await.unwrap();
    issuer.raise_floor("r", 10.into()).await.unwrap(); // never lowers
    let lease = issuer
        .try_acquire(&fencing_core::LeaseRequest::new(
            "r",
            Duration::from_secs(5),
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.token(), 1001.into());
}
