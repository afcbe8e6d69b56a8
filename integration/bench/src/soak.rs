//! Soak: one resource name granted and released many times in a row, per
//! lock-service issuer, as a long-lived service reuses a name: the cost of
//! a cycle in the last window against the first (a ratio above 1 is a cost
//! that grows with the name's history), and this process's resident memory
//! and open descriptors at both ends (a growth there is something kept per
//! grant).

use std::time::{Duration, Instant};

use fencing_tokens::{LeaseRequest, TokenIssuer};

use crate::BoxResult;
use crate::measure::{RatioKind, Row, Summary};
use crate::suite::{Output, Plan};

const TTL: Duration = Duration::from_secs(10);

/// This process's resident memory in KiB and its open descriptors.
fn footprint() -> (u64, usize) {
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0);
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count);
    (rss, fds)
}

/// `cycles` grants and releases of one name, one after another: each one's
/// time.
async fn cycles(issuer: &dyn TokenIssuer, name: &str, cycles: usize) -> BoxResult<Vec<Duration>> {
    let request = LeaseRequest::new(name, TTL);
    let mut took = Vec::with_capacity(cycles);
    while took.len() < cycles {
        let started = Instant::now();
        let Some(lease) = issuer.try_acquire(&request).await? else {
            return Err(format!("{name} was held by another holder in the soak").into());
        };
        issuer.release(&lease).await?;
        took.push(started.elapsed());
    }
    Ok(took)
}

fn per_second(window: &[Duration]) -> f64 {
    window.len() as f64 / window.iter().sum::<Duration>().as_secs_f64().max(1e-9)
}

pub(crate) async fn run(plan: &Plan, out: &mut Output) -> BoxResult<()> {
    let window = plan.soak_window;
    for backend in crate::scale::issuers() {
        let name = backend.name;
        crate::measure::fresh_emulator(backend).await?;
        let Some((issuer, _)) = fencing_integration::issuer(name).await else {
            return Err(format!("{name} was skipped (FENCING_SKIP): the soak rows need it").into());
        };
        let resource = format!("soak-{}", fencing_testkit::unique_prefix());
        // The record's first grant (a record lease waits for the server's
        // clock once per name) is no cycle of a running service.
        cycles(&*issuer, &resource, 1).await?;
        let before = footprint();
        let took = cycles(&*issuer, &resource, plan.soak_cycles).await?;
        let after = footprint();
        let (first, last) = (&took[..window], &took[took.len() - window..]);
        let (first_summary, last_summary) = (Summary::of(first), Summary::of(last));
        out.rows.push(Row {
            backend: name,
            operation: format!("soak: one name, last {window} of {} cycles vs first {window}", took.len()),
            payload: None,
            ratio: last_summary.median.as_secs_f64() / first_summary.median.as_secs_f64().max(1e-9),
            fenced: last_summary,
            plain: first_summary,
            kind: RatioKind::Latency,
            target: None,
            trips: None,
            notes: format!(
                "try_acquire + release of one reused name; cycles/s {:.0} in the last window vs {:.0} in the \
                 first; this process: {} → {} KiB resident, {} → {} open descriptors",
                per_second(last),
                per_second(first),
                before.0,
                after.0,
                before.1,
                after.1,
            ),
        });
    }
    Ok(())
}
