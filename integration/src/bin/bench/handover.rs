//! The handover gap: from a holder's release to the next holder's grant,
//! for a waiter blocked in the issuer's own `acquire` and for one polling
//! `try_acquire` with the default backoff (5 ms doubling to 100 ms, what
//! every issuer's `acquire` did before waiters were woken at release).

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing::{LeaseRequest, TokenIssuer};
use fencing_core::adapter::poll_acquire;

use crate::BoxResult;
use crate::measure::Row;

/// How long a waiter may wait: far beyond a gap, well below a test's patience.
const WAIT: Duration = Duration::from_secs(20);

/// One handover on `resource`: the gap between sending the release and the
/// waiter's grant.
async fn gap(
    issuer: &Arc<dyn TokenIssuer>,
    resource: &str,
    ttl: Duration,
    polling: bool,
) -> BoxResult<Duration> {
    let request = LeaseRequest::new(resource, ttl);
    let held = issuer.acquire(&request, WAIT).await?;
    let waiter = {
        let (issuer, request) = (issuer.clone(), LeaseRequest::new(resource, ttl));
        tokio::spawn(async move {
            let lease = if polling {
                let (first, cap) = (Duration::from_millis(5), Duration::from_millis(100));
                poll_acquire(&*issuer, &request, WAIT, first, cap).await
            } else {
                issuer.acquire(&request, WAIT).await
            };
            (lease, Instant::now())
        })
    };
    // Long enough for the waiter to have tried and settled into waiting.
    tokio::time::sleep(Duration::from_millis(300).min(ttl / 2)).await;
    let released = Instant::now();
    issuer.release(&held).await?;
    let (lease, granted) = waiter.await?;
    let lease = lease?;
    issuer.release(&lease).await?;
    Ok(granted.saturating_duration_since(released))
}

/// The gap row of `name`'s issuer: `rounds` handovers with its own
/// `acquire` against as many polling, interleaved.
pub(crate) async fn row(
    name: &'static str,
    issuer: Arc<dyn TokenIssuer>,
    ttl: Duration,
    rounds: usize,
) -> BoxResult<Row> {
    let resource = format!("handover-{}", fencing_testkit::unique_prefix());
    let (mut own, mut polled) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        own.push(gap(&issuer, &resource, ttl, false).await?);
        polled.push(gap(&issuer, &resource, ttl, true).await?);
    }
    Ok(Row::latency(
        name,
        "handover gap: release → next grant, its acquire vs polling",
        None,
        (own, polled),
        None,
    )
    .note("a waiter blocked in the issuer's `acquire` against one polling `try_acquire` (5 ms doubling to 100 ms, the old default); below 1.0 the issuer hears the release"))
}
