//! Side by side with the lock tool etcd users already run: `fence run
//! --issuer etcd://… -- true` against `etcdctl lock NAME true` (etcd's own
//! command), each a whole process per job, sequential and with many
//! runners at once, on one name and on a name per runner.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fencing_harness::env;
use tokio::process::Command;
use tokio::task::JoinSet;

use crate::BoxResult;
use crate::measure::{RatioKind, Row, Summary, percentile};
use crate::suite::{Output, Plan};

/// The lease TTL of both sides (etcdctl's `--ttl` is whole seconds).
const TTL_SECS: u64 = 10;

/// The `fence` binary: `FENCING_FENCE_BIN` (bench.sh builds it), else the
/// one beside this binary.
fn fence_binary() -> BoxResult<PathBuf> {
    if let Ok(path) = std::env::var("FENCING_FENCE_BIN") {
        return Ok(path.into());
    }
    crate::measure::sibling_binary(
        "fence",
        "build it: cargo build --release -p fencing-cli, or set FENCING_FENCE_BIN",
    )
}

/// One job on one side: which command, on which lock name.
#[derive(Clone, Debug)]
struct Job {
    fence: PathBuf,
    endpoint: String,
    prefix: String,
}

impl Job {
    fn command(&self, fenced: bool, name: &str) -> Command {
        let host = self.endpoint.trim_start_matches("http://");
        let mut command = if fenced {
            let mut c = Command::new(&self.fence);
            c.args(["run", "--issuer"])
                .arg(format!("etcd://{host}?prefix={}/", self.prefix))
                .args(["--resource", name, "--wait", "300s"])
                .arg(format!("--ttl={TTL_SECS}s"))
                .args(["--", "true"]);
            c
        } else {
            let mut c = Command::new("etcdctl");
            c.env("ETCDCTL_API", "3")
                .arg(format!("--endpoints={}", self.endpoint))
                .arg("lock")
                .arg(format!("--ttl={TTL_SECS}"))
                .arg(format!("{}/{name}", self.prefix))
                .arg("true");
            c
        };
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command
    }

    async fn run(&self, fenced: bool, name: &str) -> BoxResult<Duration> {
        let started = Instant::now();
        let output = self.command(fenced, name).output().await.map_err(|e| {
            let tool = if fenced { "fence" } else { "etcdctl" };
            format!("cannot start {tool}: {e} (integration/services.sh installs etcdctl)")
        })?;
        if !output.status.success() {
            return Err(format!(
                "{} failed ({}): {}",
                if fenced { "fence run" } else { "etcdctl lock" },
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )
            .into());
        }
        Ok(started.elapsed())
    }
}

/// `runners` at once, `jobs` each, on one side; latencies and wall time.
async fn side(
    job: &Job,
    fenced: bool,
    runners: usize,
    jobs: usize,
    shared: bool,
) -> BoxResult<(Vec<Duration>, Duration)> {
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for r in 0..runners {
        let job = job.clone();
        let name = if shared {
            "one".to_owned()
        } else {
            format!("runner-{r}")
        };
        tasks.spawn(async move {
            let mut took = Vec::with_capacity(jobs);
            for _ in 0..jobs {
                took.push(job.run(fenced, &name).await?);
            }
            BoxResult::Ok(took)
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done??);
    }
    Ok((latencies, started.elapsed()))
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// The rows: sequential, 8 and 32 runners, on one name and on a name per
/// runner; each side's jobs in two halves, alternating which goes first.
pub(crate) async fn etcdctl(plan: &Plan, out: &mut Output) -> BoxResult<()> {
    let endpoint = env::ETCD.endpoint();
    let endpoint = endpoint.split(',').next().unwrap_or_default().to_owned();
    let job = Job {
        fence: fence_binary()?,
        endpoint,
        prefix: format!("bench-tools-{}", fencing_testkit::unique_prefix()),
    };
    // Fails early, naming the server, if etcd is down.
    job.run(false, "warm-up")
        .await
        .map_err(|e| format!("{e}; start etcd with integration/services.sh up etcd"))?;
    job.run(true, "warm-up").await?;
    let cases = [(1, true), (8, true), (8, false), (32, true), (32, false)];
    for (runners, shared) in cases {
        // Each runner makes at least 2 jobs a side; the sequential case more.
        let per_runner = if runners == 1 {
            plan.tool_jobs
        } else {
            (plan.tool_jobs / runners).max(2)
        };
        let half = per_runner.div_ceil(2);
        let mut sides: [(Vec<Duration>, Duration); 2] = Default::default();
        for round in 0..2 {
            for fenced in [round == 0, round != 0] {
                let (lat, wall) = side(&job, fenced, runners, half, shared).await?;
                let s = &mut sides[usize::from(!fenced)];
                s.0.extend(lat);
                s.1 += wall;
            }
        }
        let [(f, f_wall), (p, p_wall)] = sides;
        let rate = |n: usize, wall: Duration| n as f64 / wall.as_secs_f64().max(1e-9);
        let (f_rate, p_rate) = (rate(f.len(), f_wall), rate(p.len(), p_wall));
        let names = if shared { "one name" } else { "a name each" };
        let operation = match runners {
            1 => format!("`fence run` vs `etcdctl lock`, sequential, {names}"),
            n => format!("`fence run` vs `etcdctl lock`, {n} runners, {names}"),
        };
        out.rows.push(Row {
            backend: "etcd",
            operation,
            payload: None,
            fenced: Summary::of(&f),
            plain: Summary::of(&p),
            ratio: p_rate / f_rate,
            kind: RatioKind::Throughput,
            target: None,
            trips: None,
            notes: format!(
                "whole processes wrapping `true`, {} jobs a side; jobs/s {f_rate:.1} vs {p_rate:.1}; \
                 p50 {} vs {} ms, p99 {} vs {} ms; TTL {TTL_SECS} s both",
                f.len(),
                ms(percentile(&f, 50)),
                ms(percentile(&p, 50)),
                ms(percentile(&f, 99)),
                ms(percentile(&p, 99)),
            ),
        });
    }
    Ok(())
}
