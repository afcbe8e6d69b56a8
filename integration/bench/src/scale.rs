//! Scale: 1, 4, 16 and 64 concurrent holders over 1,000 resources, per
//! lock-service issuer: grants per second and grant + release latency, each
//! holder taking a random resource, holding it for nothing and releasing
//! it. A row compares N holders with one (latency), so a cost that grows
//! worse than the load shows as a ratio far above 1, and each note gives
//! what the server reported of its own load meanwhile (connections,
//! sessions, watches, keys); the chart draws grants per second against
//! holders.

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fencing_integration::backends::Backend;
use fencing_integration::backends::plain::Plain;
use fencing_integration::backends::plain::sql::Sides as SqlSides;
use fencing_tokens::{HolderId, LeaseRequest, TokenIssuer};
use tokio::task::JoinSet;

use crate::BoxResult;
use crate::blob;
use crate::measure::{RatioKind, Row, Summary, percentile};
use crate::suite::{Kind, Output, Plan};

/// The issuers measured, those whose module puts them in the scale rows:
/// the lock services, then the SQL issuer, DynamoDB and the bucket leases.
pub(crate) fn issuers() -> impl Iterator<Item = &'static Backend> {
    let order = [Kind::Lock, Kind::Sql, Kind::DynamoDb, Kind::Blob];
    crate::suite::in_order(order).filter(|b| b.bench.scale)
}
/// The full run's levels of holders.
pub(crate) const HOLDERS: [usize; 4] = [1, 4, 16, 64];
/// The full run's number of resources.
pub(crate) const RESOURCES: u32 = 1000;
const TTL: Duration = Duration::from_secs(10);

/// How many retryable errors (a timeout while an emulator collects its
/// garbage) one level's holders may meet in all and try again, as a caller
/// would, before the row fails.
const MAX_RETRIED: usize = 100;

/// What one level of holders came to.
struct Level {
    holders: usize,
    latencies: Vec<Duration>,
    busy: usize,
    /// Retryable errors met and tried again.
    retried: usize,
    wall: Duration,
    /// What the server reported of its load while the level ran.
    server: String,
}

impl Level {
    fn grants_per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// One grant (and its release): `true` if granted, `false` if the
/// resource was held.
type Grant = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = BoxResult<bool>> + Send>> + Send + Sync>;

/// The issuer's grant of a random resource of `prefix`, then its release.
fn fenced(issuer: &Arc<dyn TokenIssuer>, prefix: &str, resources: u32) -> Grant {
    let (issuer, prefix) = (issuer.clone(), prefix.to_owned());
    Arc::new(move || {
        let (issuer, resource) = (
            issuer.clone(),
            format!("{prefix}-{}", rand::random_range(0..resources)),
        );
        Box::pin(async move {
            match issuer
                .try_acquire(&LeaseRequest::new(&resource, TTL))
                .await?
            {
                Some(lease) => {
                    issuer.release(&lease).await?;
                    Ok(true)
                }
                None => Ok(false),
            }
        })
    })
}

/// Makes the record of every resource of `prefix` (a grant and its
/// release), 128 at a time: a record lease's first grant on a name waits
/// for the server's clock to pass its first token (up to a second, once
/// per name ever), which the rows would otherwise measure instead of the
/// grants a running service makes.
async fn make_records(
    issuer: &Arc<dyn TokenIssuer>,
    prefix: &str,
    resources: u32,
) -> BoxResult<()> {
    let mut tasks = JoinSet::new();
    for chunk in (0..resources)
        .collect::<Vec<_>>()
        .chunks(resources.div_ceil(128) as usize)
    {
        let (issuer, prefix, chunk) = (issuer.clone(), prefix.to_owned(), chunk.to_vec());
        tasks.spawn(async move {
            for i in chunk {
                let request = LeaseRequest::new(format!("{prefix}-{i}"), TTL);
                if let Some(lease) = issuer.try_acquire(&request).await? {
                    issuer.release(&lease).await?;
                }
            }
            BoxResult::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

/// `call` on a clone of `state`, as a [`Grant`].
fn grant<S, F, Fut>(state: S, call: F) -> Grant
where
    S: Clone + Send + Sync + 'static,
    F: Fn(S) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = BoxResult<bool>> + Send + 'static,
{
    Arc::new(move || Box::pin(call(state.clone())))
}

fn random_resource(resources: u32) -> String {
    format!("r-{}", rand::random_range(0..resources))
}

/// The fewest raw calls of a lock on the same server, each safe to run
/// concurrently: a lock service's own (a key or node per lease for etcd
/// and ZooKeeper, `SET NX PX` + `INCR` + `DEL` on a random resource for
/// Redis), the SQL issuer's two statements bare on random resources, and
/// two conditional writes on a random resource's item or object (DynamoDB,
/// the buckets: a bounded set, so a full run leaves an in-memory emulator
/// no more than 1,000 of them).
async fn raw(backend: &'static Backend, resources: u32) -> BoxResult<Grant> {
    let prefix = format!("scale-raw-{}", fencing_testkit::unique_prefix());
    let bucket = crate::suite::bucket();
    let endpoint = || {
        backend
            .server
            .map(|s| s.endpoint())
            .ok_or_else(|| format!("{}: the scale rows need a server", backend.name))
    };
    Ok(match backend.bench.plain {
        Plain::Lock(plain) => grant(
            Arc::new((plain.connect)((plain.endpoint)(), prefix).await?),
            move |sides| async move { (sides.raw_on)(random_resource(resources)).await },
        ),
        Plain::Sql(plain) => {
            let tables = format!("{}_", prefix.replace('-', "_"));
            let sides = SqlSides::connect(plain, &(plain.url)(), &tables, true).await?;
            grant(Arc::new(sides), move |sides| async move {
                sides
                    .raw_lock_on(&random_resource(resources), &HolderId::unique())
                    .await
            })
        }
        Plain::DynamoDb(plain) => grant(
            Arc::new((plain.connect)(endpoint()?, bucket).await?),
            move |sides| async move { sides.raw_lock_on(&random_resource(resources)).await },
        ),
        Plain::Blob(plain) => grant(
            Arc::new(blob::Sides::new((plain.open)(endpoint()?, bucket).await?)),
            move |sides| async move { sides.raw_lock_on(&random_resource(resources)).await },
        ),
    })
}

async fn level(
    backend: &'static Backend,
    grant: &Grant,
    holders: usize,
    grants: usize,
) -> BoxResult<Level> {
    let per_holder = grants.div_ceil(holders).max(2);
    // Read while the holders are at it (the shortest level lasts about a
    // second).
    let server = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        reading(backend).await
    });
    let started = Instant::now();
    let retried = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    for _ in 0..holders {
        let (grant, retried) = (grant.clone(), retried.clone());
        tasks.spawn(async move {
            let (mut took, mut busy) = (Vec::with_capacity(per_holder), 0);
            while took.len() < per_holder {
                let t = Instant::now();
                match grant().await {
                    Ok(true) => took.push(t.elapsed()),
                    Ok(false) => busy += 1, // another holder has it
                    Err(e)
                        if is_retryable(&*e)
                            && retried.fetch_add(1, Ordering::Relaxed) < MAX_RETRIED => {}
                    Err(e) => return Err(e),
                }
            }
            BoxResult::Ok((took, busy))
        });
    }
    let (mut latencies, mut busy) = (Vec::new(), 0);
    while let Some(done) = tasks.join_next().await {
        let (took, b) = done??;
        latencies.extend(took);
        busy += b;
    }
    let wall = started.elapsed();
    Ok(Level {
        holders,
        latencies,
        busy,
        retried: retried.load(Ordering::Relaxed),
        wall,
        server: server.await?,
    })
}

/// A fencing error that says trying again may succeed.
fn is_retryable(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    e.downcast_ref::<fencing_tokens::Error>()
        .is_some_and(fencing_tokens::Error::is_retryable)
}

fn p99_ms(samples: &[Duration]) -> f64 {
    percentile(samples, 99).as_secs_f64() * 1000.0
}

/// The rows, and the chart when the plan names a file for it.
pub(crate) async fn run(plan: &Plan, out: &mut Output) -> BoxResult<()> {
    let mut curves = Vec::new();
    for backend in issuers() {
        let name = backend.name;
        crate::measure::fresh_emulator(backend).await?;
        let Some((issuer, _)) = fencing_integration::issuer(name).await else {
            return Err(
                format!("{name} was skipped (FENCING_SKIP): the scale rows need it").into(),
            );
        };
        let prefix = format!("scale-{}", fencing_testkit::unique_prefix());
        if matches!(backend.bench.plain, Plain::DynamoDb(_) | Plain::Blob(_)) {
            make_records(&issuer, &prefix, plan.scale_resources).await?;
        }
        let (fenced, raw) = (
            fenced(&issuer, &prefix, plan.scale_resources),
            raw(backend, plan.scale_resources).await?,
        );
        let (mut levels, mut raw_rates) = (Vec::new(), Vec::new());
        for &holders in &plan.scale_holders {
            levels.push(level(backend, &fenced, holders, plan.scale_grants).await?);
            raw_rates.push(
                level(backend, &raw, holders, plan.scale_grants)
                    .await?
                    .grants_per_second(),
            );
        }
        let base = Summary::of(&levels[0].latencies);
        for (i, l) in levels.iter().enumerate().skip(1) {
            let raw_note = format!(
                "; the raw calls alone: {:.0} grants/s ({:.1}× their 1-holder rate)",
                raw_rates[i],
                raw_rates[i] / raw_rates[0].max(1e-9)
            );
            let at = Summary::of(&l.latencies);
            out.rows.push(Row {
                backend: name,
                operation: format!(
                    "scale: {} holders vs 1, {} resources",
                    l.holders, plan.scale_resources
                ),
                payload: None,
                ratio: at.median.as_secs_f64() / base.median.as_secs_f64().max(1e-9),
                fenced: at,
                plain: base,
                kind: RatioKind::Latency,
                target: None,
                trips: None,
                notes: format!(
                    "try_acquire + release of a random resource; grants/s {:.0} vs {:.0} ({:.1}× for {}× the holders); \
                     grant + release p99 {:.2} vs {:.2} ms; found held {} times{}{raw_note}; during it, {} (1 holder: {}{})",
                    l.grants_per_second(),
                    levels[0].grants_per_second(),
                    l.grants_per_second() / levels[0].grants_per_second().max(1e-9),
                    l.holders,
                    p99_ms(&l.latencies),
                    p99_ms(&levels[0].latencies),
                    l.busy,
                    retried_note(l.retried),
                    l.server,
                    levels[0].server,
                    retried_note(levels[0].retried),
                ),
            });
        }
        curves.push((
            name,
            levels
                .iter()
                .map(|l| (l.holders, l.grants_per_second()))
                .collect::<Vec<_>>(),
        ));
    }
    if let Some(path) = &plan.scale_svg {
        std::fs::write(path, chart(&curves, plan.scale_resources))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("bench: wrote {}", path.display());
    }
    Ok(())
}

/// What `backend`'s server reports of its load, or why it could not be
/// read.
async fn reading(backend: &Backend) -> String {
    let name = backend.name;
    let read = async {
        match backend.bench.load {
            Some(load) => load().await,
            None => Err("its emulator reports no figures of its load".into()),
        }
    };
    match tokio::time::timeout(Duration::from_secs(5), read).await {
        Ok(Ok(reading)) => reading,
        Ok(Err(e)) => format!("{name}: no reading ({e})"),
        Err(_) => format!("{name}: no reading (timed out)"),
    }
}

/// What a level's retried errors add to its note (nothing for none).
fn retried_note(retried: usize) -> String {
    match retried {
        0 => String::new(),
        n => format!("; {n} retryable errors, tried again (not in the latencies)"),
    }
}

/// Grants per second against holders (log₂ axis), a line per issuer.
fn chart(curves: &[(&str, Vec<(usize, f64)>)], resources: u32) -> String {
    let (w, h, left, top, right, bottom) = (640.0, 360.0, 70.0, 40.0, 150.0, 50.0);
    let top_rate = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|p| p.1))
        .fold(1.0_f64, f64::max)
        * 1.1;
    let x = |holders: usize| {
        let steps = (HOLDERS.len() - 1) as f64;
        left + (holders as f64).log(4.0) / steps * (w - left - right)
    };
    let y = |rate: f64| top + (1.0 - rate / top_rate) * (h - top - bottom);
    let colours = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    ];
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="10" y="20" font-size="14">Grants per second against concurrent holders, {resources} resources (one run of integration/bench.sh)</text>
<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="black"/>
<line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="black"/>
"##,
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    for holders in HOLDERS {
        let _ = writeln!(
            svg,
            r#"<text x="{:.0}" y="{}" text-anchor="middle">{holders}</text>"#,
            x(holders),
            h - bottom + 18.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.0}" y="{}" text-anchor="middle">holders</text>"#,
        (left + w - right) / 2.0,
        h - 10.0
    );
    for i in 0..=4 {
        let rate = top_rate * f64::from(i) / 4.0;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{:.0}" text-anchor="end">{rate:.0}</text>"#,
            left - 6.0,
            y(rate) + 4.0
        );
    }
    for (i, (name, curve)) in curves.iter().enumerate() {
        let colour = colours[i % colours.len()];
        let points: Vec<String> = curve
            .iter()
            .map(|(holders, rate)| format!("{:.1},{:.1}", x(*holders), y(*rate)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{:.0}" fill="{colour}">{name}</text>"#,
            w - right + 10.0,
            top + 20.0 * i as f64 + 10.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_has_a_line_per_issuer() {
        let curve = vec![(1, 100.0), (4, 350.0), (16, 900.0), (64, 1000.0)];
        let svg = chart(&[("etcd", curve.clone()), ("redis", curve)], RESOURCES);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">etcd<") && svg.contains(">redis<"));
    }
}
