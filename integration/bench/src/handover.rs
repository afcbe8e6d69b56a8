//! The handover gap: from a holder's release to the next holder's grant,
//! for a waiter blocked in the issuer's own `acquire` and for one polling
//! `try_acquire` with the default backoff (5 ms doubling to 100 ms, what
//! every issuer's `acquire` did before waiters were woken at release);
//! `fencing_testkit::wake::handovers` on a 30 s TTL.

use std::sync::Arc;
use std::time::Duration;

use fencing_testkit::wake::{Waiter, handovers};
use fencing_tokens::TokenIssuer;

use crate::BoxResult;
use crate::measure::Row;

/// How long a waiter is blocked before the release: long enough to have
/// settled into waiting (a backoff at its cap, a subscription started).
const BLOCKED: Duration = Duration::from_millis(300);

/// The gap row of `name`'s issuer: `rounds` handovers with its own
/// `acquire`, then as many polling.
pub(crate) async fn row(
    name: &'static str,
    issuer: Arc<dyn TokenIssuer>,
    rounds: usize,
) -> BoxResult<Row> {
    let resource = format!("handover-{}", fencing_testkit::unique_prefix());
    let own = handovers(&issuer, &resource, rounds, BLOCKED, Waiter::Issuer).await;
    let polled = handovers(&issuer, &resource, rounds, BLOCKED, Waiter::OldPoll).await;
    Ok(Row::latency(
        name,
        "handover gap: release → next grant, its acquire vs polling",
        None,
        (own, polled),
        None,
    )
    .note("a waiter blocked 300 ms in the issuer's `acquire` against one polling `try_acquire` (5 ms doubling to 100 ms, the old default), 30 s TTL; below 1.0 the issuer hears the release"))
}
