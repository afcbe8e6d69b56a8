//! `bench`: what fencing costs, per backend, on the servers of
//! `integration/services.sh`.
//!
//! For each backend it times a fenced operation against its plain
//! counterpart, interleaved (same payload, same server, same run), counts
//! the round trips of each side through a loopback proxy, and runs many
//! writers on one key both ways. The report is a markdown table (and, with
//! `--svg`, a bar chart of the ratios). `integration/bench.sh` starts the
//! servers and runs it; see `BENCHMARKS.md` for a full run.

mod blob;
mod contention;
mod failover;
mod handover;
mod measure;
mod python;
mod report;
mod scale;
mod soak;
mod suite;
mod svg;
mod tools;
mod versions;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime};

use clap::builder::PossibleValue;
use clap::{Parser, ValueEnum};

use crate::contention::Load;
use crate::suite::{Output, Plan};

/// Errors of the benchmark code: anything, with its message (as the
/// plain sides').
pub(crate) use fencing_integration::backends::plain::BoxResult;

/// The explanations that go under the table (kept beside the code, so a
/// rerun regenerates the whole report).
const FINDINGS: &str = include_str!("findings.md");

/// What fencing costs: fenced vs plain operations on every backend,
/// interleaved in one run.
#[derive(Debug, Parser)]
#[command(name = "bench", version)]
struct Args {
    /// A smoke test: few iterations, 1 KiB payloads only, little contention.
    #[arg(long)]
    quick: bool,

    /// Timed rounds per case; each round times one fenced and one plain
    /// operation [default: 5 with --quick, else 1000].
    #[arg(long, value_name = "N")]
    iterations: Option<usize>,

    /// Timed rounds per object-store case [default: as --iterations with
    /// --quick, else 300: the emulators keep every version in memory].
    #[arg(long, value_name = "N")]
    object_iterations: Option<usize>,

    /// Only these backends.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "BACKEND,...")]
    only: Vec<Section>,

    /// Write the markdown report to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,

    /// Also draw the ratios as a bar chart (SVG) to FILE, linked from the
    /// report.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,

    /// Draw the scale rows (grants per second against holders) as a chart
    /// (SVG) to FILE.
    #[arg(long, value_name = "FILE")]
    scale_svg: Option<PathBuf>,

    /// Do not count round trips (no proxy).
    #[arg(long)]
    no_count: bool,
}

/// A section of the report: a backend's rows (its module in
/// `fencing_integration::backends`), or rows across backends.
#[derive(Clone, Copy, Debug)]
enum Section {
    /// A backend's rows, by the suite of its kind.
    Backend(&'static fencing_integration::backends::Backend),
    /// The handover gap of every issuer of the registry.
    Handover,
    /// `fence run` side by side with `etcdctl lock`.
    Etcdctl,
    /// 1 to 64 holders over 1,000 resources, per lock-service issuer.
    Scale,
    /// One name granted and released many times, per lock-service issuer.
    Soak,
    /// From a holder's death to the next holder's first write, per issuer.
    Failover,
    /// The Python package against redis-py, kazoo and psycopg.
    Python,
}

impl PartialEq for Section {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

/// Every section in `--help`'s order: the backends, then the rows across
/// them.
static SECTIONS: LazyLock<Vec<Section>> = LazyLock::new(|| {
    suite::in_order(suite::ROWS_ORDER)
        .map(Section::Backend)
        .chain([
            Section::Handover,
            Section::Etcdctl,
            Section::Scale,
            Section::Soak,
            Section::Failover,
            Section::Python,
        ])
        .collect()
});

impl ValueEnum for Section {
    fn value_variants<'a>() -> &'a [Self] {
        &SECTIONS
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let help = match self {
            Self::Backend(_) => None,
            Self::Handover => Some("The handover gap of every issuer of the registry"),
            Self::Etcdctl => Some("`fence run` side by side with `etcdctl lock`"),
            Self::Scale => Some("1 to 64 holders over 1,000 resources, per lock-service issuer"),
            Self::Soak => Some("One name granted and released many times, per lock-service issuer"),
            Self::Failover => {
                Some("From a holder's death to the next holder's first write, per issuer")
            }
            Self::Python => {
                Some("The Python package's lock and put against redis-py, kazoo and psycopg")
            }
        };
        let value = PossibleValue::new(self.name());
        Some(match help {
            Some(help) => value.help(help),
            None => value,
        })
    }
}

impl Section {
    /// The order they run in: as listed, but the failover rows before the
    /// scale rows, whose many grants leave the in-memory emulators slower
    /// (Azurite once stopped answering in a failover after them).
    fn in_run_order() -> impl Iterator<Item = Self> {
        let (scale, rest): (Vec<Self>, Vec<Self>) =
            SECTIONS.iter().partition(|s| **s == Self::Scale);
        rest.into_iter().chain(scale)
    }

    fn name(self) -> &'static str {
        match self {
            Self::Backend(backend) => backend.name,
            Self::Handover => "handover",
            Self::Etcdctl => "etcdctl",
            Self::Scale => "scale",
            Self::Soak => "soak",
            Self::Failover => "failover",
            Self::Python => "python",
        }
    }

    async fn run(self, plan: &Plan, out: &mut Output) -> BoxResult<()> {
        match self {
            Self::Backend(backend) => suite::run(backend, plan, out).await,
            Self::Handover => suite::handover(plan, out).await,
            Self::Etcdctl => tools::etcdctl(plan, out).await,
            Self::Scale => scale::run(plan, out).await,
            Self::Soak => soak::run(plan, out).await,
            Self::Failover => failover::run(plan, out).await,
            Self::Python => python::run(plan, out).await,
        }
    }
}

impl Args {
    fn plan(&self) -> Plan {
        let writers = 16;
        if self.quick {
            let load = Load {
                writers,
                ops_per_writer: 2,
                rounds: 2,
            };
            let iterations = self.iterations.unwrap_or(5);
            Plan {
                iterations,
                object_iterations: self.object_iterations.unwrap_or(iterations),
                warmup: 1,
                payloads: vec![1024],
                count_ops: 3,
                load,
                object_load: load,
                count: !self.no_count,
                handovers: 1,
                tool_jobs: 4,
                // Each resource's record is made first on the emulators:
                // a thousand of them was most of the smoke run.
                scale_resources: 64,
                scale_grants: 64,
                scale_holders: vec![1, 16],
                scale_svg: self.scale_svg.clone(),
                soak_cycles: 150,
                soak_window: 30,
                failovers: 1,
                failover_ttls: vec![Duration::from_secs(2)],
            }
        } else {
            Plan {
                iterations: self.iterations.unwrap_or(1000),
                object_iterations: self.object_iterations.unwrap_or(300),
                warmup: 5,
                payloads: vec![1024, 64 * 1024],
                count_ops: 20,
                load: Load {
                    writers,
                    ops_per_writer: 25,
                    rounds: 6,
                },
                object_load: Load {
                    writers,
                    ops_per_writer: 10,
                    rounds: 4,
                },
                count: !self.no_count,
                handovers: 20,
                tool_jobs: 64,
                scale_resources: scale::RESOURCES,
                scale_grants: 2000,
                scale_holders: scale::HOLDERS.to_vec(),
                scale_svg: self.scale_svg.clone(),
                soak_cycles: 10_000,
                soak_window: 1000,
                failovers: 2,
                failover_ttls: vec![Duration::from_secs(2), Duration::from_secs(6)],
            }
        }
    }
}

/// `YYYY-MM-DD HH:MM UTC` of now.
fn utc_now() -> String {
    let rfc3339 = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    format!("{} {} UTC", &rfc3339[..10], &rfc3339[11..16])
}

/// Versions of the emulators: what `bench.sh` found installed
/// (`FENCING_BENCH_VERSIONS="s3=moto 5.2.5;…"`), else the HTTP `Server`
/// header.
async fn emulator_versions(selected: &[Section]) -> Vec<String> {
    let given = std::env::var("FENCING_BENCH_VERSIONS").unwrap_or_default();
    let given = |name: &str| {
        given
            .split(';')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| k.trim() == name)
            .map(|(_, v)| v.trim().to_owned())
    };
    let mut out = Vec::new();
    for backend in suite::in_order(suite::ROWS_ORDER) {
        let (Some(server), Some(path)) = (backend.server, backend.bench.server_header) else {
            continue;
        };
        if !selected.contains(&Section::Backend(backend)) {
            continue;
        }
        let found = match given(backend.name) {
            Some(v) => Some(v),
            None => match measure::split_url(&server.endpoint()) {
                Ok((addr, _)) => versions::http_server_header(addr, path).await,
                Err(_) => None,
            },
        };
        out.push(format!(
            "{} emulator: {}",
            backend.name,
            found.unwrap_or_else(|| "version not reported".to_owned())
        ));
    }
    out
}

/// How the report links the chart: its path relative to the report's
/// directory when it lies under it.
fn chart_link(out: Option<&Path>, svg: &Path) -> String {
    let base = out.and_then(Path::parent).unwrap_or(Path::new(""));
    svg.strip_prefix(base)
        .unwrap_or(svg)
        .to_string_lossy()
        .into_owned()
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let plan = args.plan();
    let selected: Vec<Section> = if args.only.is_empty() {
        // The smoke test leaves out the rows that start processes of a
        // release build (`fence`); `--only etcdctl` runs them.
        Section::in_run_order()
            .filter(|s| !(args.quick && *s == Section::Etcdctl))
            .collect()
    } else {
        Section::in_run_order()
            .filter(|s| args.only.contains(s))
            .collect()
    };
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut servers = Vec::new();
    let mut failures = Vec::new();
    for section in &selected {
        eprintln!("bench: {} …", section.name());
        let t = Instant::now();
        let mut out = Output::default();
        let result = section.run(&plan, &mut out).await;
        rows.append(&mut out.rows);
        servers.append(&mut out.versions);
        match result {
            Ok(()) => eprintln!(
                "bench: {} done in {:.1} s",
                section.name(),
                t.elapsed().as_secs_f64()
            ),
            Err(e) => {
                // The whole chain: "azure error (retryable)" alone says
                // nothing of what failed.
                let e = fencing_core::error_chain(e.as_ref());
                eprintln!("bench: {} FAILED: {e}", section.name());
                failures.push(format!("{}: {e}", section.name()));
            }
        }
    }
    servers.extend(emulator_versions(&selected).await);

    let invocation = std::env::args()
        .skip(1)
        .fold(String::from("bench"), |s, a| s + " " + &a);
    let ctx = report::Context {
        command: std::env::var("FENCING_BENCH_COMMAND").unwrap_or_else(|_| invocation.clone()),
        invocation: std::env::var("FENCING_BENCH_INVOCATION").unwrap_or(invocation),
        date: utc_now(),
        machine: report::machine(),
        servers,
        plan: plan.clone(),
        took: started.elapsed(),
        chart: args
            .svg
            .as_deref()
            .map(|svg| chart_link(args.out.as_deref(), svg)),
        failures: failures.clone(),
    };
    let markdown = report::markdown(&rows, &ctx, FINDINGS);
    let written = write_outputs(&args, &markdown, &rows);
    eprintln!(
        "bench: {} rows in {:.0} s",
        rows.len(),
        ctx.took.as_secs_f64()
    );
    match (written, failures.is_empty()) {
        (Err(e), _) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
        (Ok(()), true) => ExitCode::SUCCESS,
        (Ok(()), false) => {
            eprintln!("bench: {} backend(s) failed", failures.len());
            ExitCode::FAILURE
        }
    }
}

fn write_outputs(args: &Args, markdown: &str, rows: &[measure::Row]) -> BoxResult<()> {
    match &args.out {
        Some(path) => {
            std::fs::write(path, markdown)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            eprintln!("bench: wrote {}", path.display());
        }
        None => print!("{markdown}"),
    }
    if let Some(path) = &args.svg {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let title = format!(
            "What fencing costs: fenced ÷ plain, one interleaved run ({})",
            utc_now()
        );
        std::fs::write(path, svg::chart(rows, &title))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("bench: wrote {}", path.display());
    }
    Ok(())
}
