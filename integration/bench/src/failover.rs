//! Failover time: from a holder's death to the next holder's first
//! accepted write, per issuer and at two TTLs. The holder is a process of
//! its own (`failover-holder`: acquire, then renew every third of the TTL);
//! the next holder waits in the issuer's `acquire` in this process; the
//! holder is then killed (SIGKILL) or stopped (SIGSTOP, a pause that never
//! ends), at a random point of its renewal cycle.

use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fencing_core::memory::MemoryStore;
use fencing_harness::process::{Signal, send_signal, spawn_reporting_token};
use fencing_tokens::{FencedStore, LeaseRequest};

use crate::BoxResult;
use crate::measure::Row;
use crate::suite::{Output, Plan};

/// The holder binary, beside this one.
fn holder_binary() -> BoxResult<std::path::PathBuf> {
    crate::measure::sibling_binary(
        "failover-holder",
        "cargo build -p fencing-integration --bin failover-holder",
    )
}

/// One failover: the time from the signal to the next holder's first
/// accepted write.
async fn once(issuer_name: &str, ttl: Duration, signal: Signal) -> BoxResult<Duration> {
    let (issuer, _) = fencing_integration::issuer(issuer_name)
        .await
        .ok_or_else(|| format!("{issuer_name} was skipped (FENCING_SKIP)"))?;
    let resource = format!("failover-{}", fencing_testkit::unique_prefix());
    let mut command = Command::new(holder_binary()?);
    command
        .env(
            fencing_integration::RUN_PREFIX_VAR,
            fencing_integration::run_prefix(),
        )
        .args([issuer_name, &resource, &ttl.as_millis().to_string()]);
    let (mut child, _lines, token) =
        tokio::task::spawn_blocking(move || spawn_reporting_token(&mut command, "acquired"))
            .await?;
    let pid = child.id();
    // The next holder, already waiting, and the store it writes to.
    let store = MemoryStore::new();
    let waiter = {
        let (issuer, resource) = (issuer.clone(), resource.clone());
        tokio::spawn(async move {
            let lease = issuer
                .acquire(
                    &LeaseRequest::new(&resource, ttl),
                    ttl * 5 + Duration::from_secs(10),
                )
                .await?;
            store
                .put("k", Bytes::from_static(b"next"), lease.token())
                .await?;
            let written = Instant::now();
            issuer.release(&lease).await?;
            BoxResult::Ok((written, lease.token()))
        })
    };
    // Anywhere in the holder's renewal cycle.
    let third = u64::try_from((ttl / 3).as_millis()).unwrap_or(1).max(1);
    tokio::time::sleep(Duration::from_millis(rand::random_range(0..third))).await;
    send_signal(pid, signal)?;
    let signalled = Instant::now();
    let result = waiter.await;
    if signal == Signal::SIGSTOP {
        let _ = send_signal(pid, Signal::SIGCONT);
    }
    let _ = child.kill();
    let _ = child.wait();
    let (written, next) = result??;
    if next.get() <= token {
        return Err(format!("{issuer_name}: the next token {next} is not above {token}").into());
    }
    Ok(written - signalled)
}

/// The rows: per issuer and TTL, SIGKILL against SIGSTOP.
pub(crate) async fn run(plan: &Plan, out: &mut Output) -> BoxResult<()> {
    for name in fencing_integration::issuers() {
        if name == "memory" {
            continue; // in-process: no process of its own to kill
        }
        if let Some(backend) = fencing_integration::backends::find(name) {
            crate::measure::fresh_emulator(backend).await?;
        }
        let Some((issuer, _)) = fencing_integration::issuer(name).await else {
            return Err(
                format!("{name} was skipped (FENCING_SKIP): the failover rows need it").into(),
            );
        };
        let min_ttl = issuer.min_ttl();
        drop(issuer);
        for ttl in plan.failover_ttls.iter().filter(|t| **t >= min_ttl) {
            let (mut killed, mut stopped) = (Vec::new(), Vec::new());
            for _ in 0..plan.failovers {
                killed.push(once(name, *ttl, Signal::SIGKILL).await?);
                stopped.push(once(name, *ttl, Signal::SIGSTOP).await?);
            }
            let per_ttl = |samples: &[Duration]| {
                let median = crate::measure::Summary::of(samples).median;
                median.as_secs_f64() / ttl.as_secs_f64()
            };
            let note = format!(
                "holder renewing every TTL/3, signalled at a random point of that cycle; next holder waiting in `acquire`, \
                 its first write to an in-process store; median ÷ TTL {:.2} (SIGKILL), {:.2} (SIGSTOP); {} each",
                per_ttl(&killed),
                per_ttl(&stopped),
                killed.len()
            );
            out.rows.push(
                Row::latency(
                    name,
                    format!(
                        "failover at TTL {}: SIGKILL vs SIGSTOP → next holder's first write",
                        humantime::format_duration(*ttl)
                    ),
                    None,
                    (killed, stopped),
                    None,
                )
                .note(note),
            );
        }
    }
    Ok(())
}
