//! Interleaved timing, round-trip counting and the rows of the report.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fencing_harness::proxy::{CountingProxy, Exchanges};
use fencing_integration::backends::plain::loopback;

use crate::BoxResult;

/// The two sides' latencies, summarized.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Summary {
    pub(crate) median: Duration,
    pub(crate) min: Duration,
    pub(crate) max: Duration,
}

/// A binary beside this one (`target/<profile>/NAME`), or an error saying
/// how to build it.
pub(crate) fn sibling_binary(name: &str, build: &str) -> crate::BoxResult<std::path::PathBuf> {
    let path = std::env::current_exe()?.with_file_name(name);
    if path.exists() {
        Ok(path)
    } else {
        Err(format!("no {name} at {} ({build})", path.display()).into())
    }
}

/// The `percent`-th percentile of `samples` (nearest rank); zero for none.
pub(crate) fn percentile(samples: &[Duration], percent: usize) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = (sorted.len() * percent)
        .div_ceil(100)
        .clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied().unwrap_or_default()
}

impl Summary {
    /// Median (mean of the middle two for an even count), min and max.
    pub(crate) fn of(samples: &[Duration]) -> Self {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let n = sorted.len();
        let median = match n {
            0 => Duration::ZERO,
            _ if !n.is_multiple_of(2) => sorted[n / 2],
            _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2,
        };
        Self {
            median,
            min: sorted.first().copied().unwrap_or_default(),
            max: sorted.last().copied().unwrap_or_default(),
        }
    }
}

/// What a row's ratio compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RatioKind {
    /// Fenced median latency ÷ plain median latency.
    Latency,
    /// Plain throughput ÷ fenced throughput (so that above 1 still means
    /// "fencing costs this much").
    Throughput,
}

/// Round trips per operation on each side, counted by a proxy.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Trips {
    pub(crate) fenced: PerOp,
    pub(crate) plain: PerOp,
}

/// Exchanges and new connections per operation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PerOp {
    pub(crate) round_trips: f64,
    pub(crate) connections: f64,
}

/// One line of the report.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub(crate) backend: &'static str,
    pub(crate) operation: String,
    /// Bytes per write; `None` for lock operations.
    pub(crate) payload: Option<usize>,
    pub(crate) fenced: Summary,
    pub(crate) plain: Summary,
    pub(crate) ratio: f64,
    pub(crate) kind: RatioKind,
    /// The target for this ratio, if it sets one.
    pub(crate) target: Option<f64>,
    pub(crate) trips: Option<Trips>,
    pub(crate) notes: String,
}

impl Row {
    /// A latency row from interleaved samples.
    pub(crate) fn latency(
        backend: &'static str,
        operation: impl Into<String>,
        payload: Option<usize>,
        (fenced, plain): (Vec<Duration>, Vec<Duration>),
        target: Option<f64>,
    ) -> Self {
        let (fenced, plain) = (Summary::of(&fenced), Summary::of(&plain));
        Self {
            backend,
            operation: operation.into(),
            payload,
            ratio: ratio(fenced.median, plain.median),
            fenced,
            plain,
            kind: RatioKind::Latency,
            target,
            trips: None,
            notes: String::new(),
        }
    }

    /// With round trips counted.
    pub(crate) fn with_trips(mut self, trips: Option<Trips>) -> Self {
        self.trips = trips;
        self
    }

    /// With a note.
    pub(crate) fn note(mut self, note: impl Into<String>) -> Self {
        let note = note.into();
        if !self.notes.is_empty() && !note.is_empty() {
            self.notes.push_str("; ");
        }
        self.notes.push_str(&note);
        self
    }

    /// Whether the row misses its target.
    pub(crate) fn misses_target(&self) -> bool {
        self.target.is_some_and(|t| self.ratio > t)
    }
}

/// `a / b`, as a float.
pub(crate) fn ratio(a: Duration, b: Duration) -> f64 {
    if b.is_zero() {
        return f64::NAN;
    }
    a.as_secs_f64() / b.as_secs_f64()
}

/// Runs `fenced` and `plain` alternately, `warmup` untimed rounds first,
/// then `iterations` timed ones; the order within a round alternates
/// (fenced first, then plain first) so neither side always runs right
/// after the other. Each call gets the round number.
pub(crate) async fn interleave<F, P>(
    iterations: usize,
    warmup: usize,
    mut fenced: F,
    mut plain: P,
) -> BoxResult<Timed>
where
    F: AsyncFnMut(usize) -> BoxResult<()>,
    P: AsyncFnMut(usize) -> BoxResult<()>,
{
    let mut f = Vec::with_capacity(iterations);
    let mut p = Vec::with_capacity(iterations);
    for round in 0..warmup + iterations {
        let timed = round >= warmup;
        for side in [round % 2, 1 - round % 2] {
            let started = Instant::now();
            if side == 0 {
                fenced(round).await?;
            } else {
                plain(round).await?;
            }
            let took = started.elapsed();
            if timed {
                if side == 0 { &mut f } else { &mut p }.push(took);
            }
        }
    }
    Ok((f, p))
}

/// Calls before counting starts: a pool opens a few connections before it
/// settles, and each prepares its statements once.
const WARM_UP_CALLS: usize = 5;

/// Counts the exchanges of `ops` sequential calls of `op` through `proxy`,
/// after a few uncounted calls (which open connections and fill caches).
pub(crate) async fn count<F>(proxy: &CountingProxy, ops: usize, mut op: F) -> BoxResult<PerOp>
where
    F: AsyncFnMut(usize) -> BoxResult<()>,
{
    for i in 0..WARM_UP_CALLS {
        op(i).await?;
    }
    let before = proxy.exchanges();
    for i in 0..ops {
        op(WARM_UP_CALLS + i).await?;
    }
    let seen: Exchanges = proxy.exchanges() - before;
    // Counts stay far below 2^52, where f64 is exact.
    let per = |n: u64| n as f64 / ops.max(1) as f64;
    Ok(PerOp {
        round_trips: per(seen.round_trips),
        connections: per(seen.connections),
    })
}

impl Trips {
    /// The round trips of `fenced` and of `plain` through `proxy`
    /// ([`count`] each, `ops` calls).
    pub(crate) async fn count<F, P>(
        proxy: &CountingProxy,
        ops: usize,
        fenced: F,
        plain: P,
    ) -> BoxResult<Self>
    where
        F: AsyncFnMut(usize) -> BoxResult<()>,
        P: AsyncFnMut(usize) -> BoxResult<()>,
    {
        Ok(Self {
            fenced: count(proxy, ops, fenced).await?,
            plain: count(proxy, ops, plain).await?,
        })
    }
}

/// Times `fenced` against `plain` on `direct` ([`interleave`]: `warmup`
/// untimed rounds, then `iterations` timed ones), and counts the round
/// trips of each on the sides reached through `counted`'s proxy
/// ([`Trips::count`], `count_ops` calls).
pub(crate) async fn compare<S>(
    (iterations, warmup): (usize, usize),
    count_ops: usize,
    direct: &S,
    counted: Option<(&CountingProxy, &S)>,
    fenced: impl AsyncFn(&S) -> BoxResult<()>,
    plain: impl AsyncFn(&S) -> BoxResult<()>,
) -> BoxResult<(Timed, Option<Trips>)> {
    let timed = interleave(
        iterations,
        warmup,
        async |_| fenced(direct).await,
        async |_| plain(direct).await,
    )
    .await?;
    let trips = match counted {
        Some((proxy, sides)) => Some(
            Trips::count(
                proxy,
                count_ops,
                async |_| fenced(sides).await,
                async |_| plain(sides).await,
            )
            .await?,
        ),
        None => None,
    };
    Ok((timed, trips))
}

/// The timed calls of each side.
pub(crate) type Timed = (Vec<Duration>, Vec<Duration>);

/// Splits `scheme://[user@]host:port[/path]` (or a bare `host:port`, as
/// ZooKeeper's clients take) into the loopback address and a function that
/// rebuilds the URL with another `host:port`.
pub(crate) fn split_url(url: &str) -> BoxResult<(SocketAddr, impl Fn(SocketAddr) -> String)> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (userinfo, hostpath) = rest.rsplit_once('@').map_or(("", rest), |(u, h)| (u, h));
    let (hostport, path) = hostpath
        .split_once('/')
        .map_or((hostpath, None), |(h, p)| (h, Some(p)));
    let target = loopback(hostport)?;
    let (scheme, userinfo, path) = (
        scheme.to_owned(),
        userinfo.to_owned(),
        path.map(str::to_owned),
    );
    Ok((target, move |via: SocketAddr| {
        let scheme = if scheme.is_empty() {
            String::new()
        } else {
            format!("{scheme}://")
        };
        let at = if userinfo.is_empty() {
            String::new()
        } else {
            format!("{userinfo}@")
        };
        match &path {
            Some(path) => format!("{scheme}{at}{via}/{path}"),
            None => format!("{scheme}{at}{via}"),
        }
    }))
}

/// Starts the in-memory emulator behind `backend` afresh, with the
/// command in `FENCING_BENCH_RESTART` (`integration/bench.sh` sets it to
/// `services.sh restart` for a full run), so that what the rows before left
/// in it cannot stall the next ones: Azurite's garbage collection, every
/// ten minutes, takes time quadratic in the writes since the last one, and
/// after a full run's earlier rows it answered nothing for many minutes
/// (the scale rows), or for the 35 s a failover waiter waits (its requests
/// answered only when Azurite was stopped). Used by every section after
/// the backends' own.
pub(crate) async fn fresh_emulator(
    backend: &fencing_integration::backends::Backend,
) -> BoxResult<()> {
    let Some(server) = backend.server.filter(|_| backend.bench.in_memory) else {
        return Ok(());
    };
    let service = server.service;
    let Ok(command) = std::env::var("FENCING_BENCH_RESTART") else {
        return Ok(());
    };
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{command} {service}"))
        .status()
        .await?;
    if !status.success() {
        return Err(format!("`{command} {service}` failed: {status}").into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&samples, 50), Duration::from_millis(50));
        assert_eq!(percentile(&samples, 99), Duration::from_millis(99));
        assert_eq!(percentile(&samples[..1], 99), Duration::from_millis(1));
        assert_eq!(percentile(&[], 99), Duration::ZERO);
    }

    #[test]
    fn median_min_max() {
        let ms = Duration::from_millis;
        let s = Summary::of(&[ms(5), ms(1), ms(3)]);
        assert_eq!((s.median, s.min, s.max), (ms(3), ms(1), ms(5)));
        assert_eq!(Summary::of(&[ms(1), ms(3)]).median, ms(2));
    }

    #[test]
    fn urls_are_rebuilt_around_the_proxy() {
        let (target, via) = split_url("postgres://u:p@127.0.0.1:5432/db").unwrap();
        assert_eq!(target.port(), 5432);
        let proxy: SocketAddr = "127.0.0.1:7".parse().unwrap();
        assert_eq!(via(proxy), "postgres://u:p@127.0.0.1:7/db");
        let (_, via) = split_url("http://localhost:9000").unwrap();
        assert_eq!(via(proxy), "http://127.0.0.1:7");
        let (target, via) = split_url("127.0.0.1:2181").unwrap();
        assert_eq!(
            (target.port(), via(proxy)),
            (2181, "127.0.0.1:7".to_owned())
        );
        assert!(split_url("http://10.0.0.1:9000").is_err());
    }
}
