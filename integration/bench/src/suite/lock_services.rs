//! The lock-service cases (etcd, ZooKeeper, Redis, …): fenced acquire and
//! release against the raw calls each service's module gives.

use fencing_harness::proxy::CountingProxy;
use fencing_integration::backends::Backend;
use fencing_integration::backends::plain::lock::{LockPlain, LockRow, LockSides};

use super::{Output, Plan, counting, prefix, reach, server_of, target};
use crate::BoxResult;
use crate::measure::{Row, compare};

/// The rows of `backend`: its sides at its first endpoint (and again
/// through a counting proxy when the plan counts round trips), each row
/// its fenced call timed against its raw one.
pub(super) async fn run(
    backend: &'static Backend,
    plain: LockPlain,
    plan: &Plan,
    out: &mut Output,
) -> BoxResult<()> {
    let (name, server) = (backend.name, server_of(backend)?);
    let (endpoint, p) = ((plain.endpoint)(), prefix());
    let connect = async |url: &str| (plain.connect)(url.to_owned(), p.clone()).await;
    let direct = reach(server, connect(&endpoint).await)?;
    let counted: Option<(CountingProxy, LockSides)> =
        counting(plan, &endpoint, async |via| connect(&via).await).await?;
    if let Some(version) = (direct.version)(()).await? {
        out.versions.push(version);
    }
    let through_proxy = counted.as_ref().map(|(proxy, sides)| (proxy, sides));
    for (i, row) in direct.rows.iter().enumerate() {
        let LockRow {
            operation,
            note,
            target,
            ..
        } = *row;
        let (timed, trips) = compare(
            (plan.iterations, plan.warmup),
            plan.count_ops,
            &direct,
            through_proxy,
            async |s: &LockSides| (s.rows[i].fenced)(()).await,
            async |s: &LockSides| (s.rows[i].raw)(()).await,
        )
        .await?;
        let target = target.then_some(target::LOCK);
        out.rows.push(
            Row::latency(name, operation, None, timed, target)
                .with_trips(trips)
                .note(note),
        );
    }
    // What the raw side left; a clean-up that fails leaves only keys
    // under this run's prefix.
    let _ = (direct.clean_up)(()).await;
    Ok(())
}
