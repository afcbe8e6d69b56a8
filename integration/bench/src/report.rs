//! The markdown report: how it was made, on what, and the table.

use std::fmt::Write;
use std::time::Duration;

use crate::measure::{RatioKind, Row};

/// What a report says about its run besides the rows.
#[derive(Debug)]
pub(crate) struct Context {
    /// The command that reproduces the run.
    pub(crate) command: String,
    /// What `bench` ran (the cargo command line).
    pub(crate) invocation: String,
    pub(crate) date: String,
    pub(crate) machine: String,
    pub(crate) servers: Vec<String>,
    /// How much was run.
    pub(crate) plan: crate::suite::Plan,
    pub(crate) took: Duration,
    pub(crate) chart: Option<String>,
    pub(crate) failures: Vec<String>,
}

/// `1 KiB`, `64 KiB`, `512 B`.
pub(crate) fn size(bytes: usize) -> String {
    if bytes >= 1024 && bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} B")
    }
}

/// A duration in ms with three significant-ish digits.
fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms >= 100.0 {
        format!("{ms:.0}")
    } else if ms >= 10.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.2}")
    }
}

fn trips(t: f64) -> String {
    if (t - t.round()).abs() < 0.05 {
        format!("{t:.0}")
    } else {
        format!("{t:.2}")
    }
}

/// The markdown table of `rows`.
pub(crate) fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    s.push_str(
        "| backend | operation | payload | fenced median (min–max) ms | plain median (min–max) ms | ratio | target | round trips fenced / plain | notes |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        let ratio = match (r.kind, r.misses_target()) {
            (RatioKind::Throughput, _) => format!("{:.2} (throughput)", r.ratio),
            (RatioKind::Latency, true) => format!("**{:.2}**", r.ratio),
            (RatioKind::Latency, false) => format!("{:.2}", r.ratio),
        };
        let target = r.target.map(|t| format!("≤ {t:.2}")).unwrap_or_default();
        let round_trips = r.trips.map_or_else(
            || "—".to_owned(),
            |t| {
                let mut s = format!(
                    "{} / {}",
                    trips(t.fenced.round_trips),
                    trips(t.plain.round_trips)
                );
                if t.fenced.connections > 0.05 || t.plain.connections > 0.05 {
                    let _ = write!(
                        s,
                        " (new connections {} / {})",
                        trips(t.fenced.connections),
                        trips(t.plain.connections)
                    );
                }
                s
            },
        );
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} ({}–{}) | {} ({}–{}) | {} | {} | {} | {} |",
            r.backend,
            r.operation,
            r.payload.map(size).unwrap_or_else(|| "—".to_owned()),
            ms(r.fenced.median),
            ms(r.fenced.min),
            ms(r.fenced.max),
            ms(r.plain.median),
            ms(r.plain.min),
            ms(r.plain.max),
            ratio,
            target,
            round_trips,
            r.notes.replace('|', "\\|"),
        );
    }
    s
}

/// The whole report.
pub(crate) fn markdown(rows: &[Row], ctx: &Context, findings: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Benchmarks: what does fencing cost?\n");
    let _ = writeln!(
        s,
        "Every number below comes from **one interleaved run**: for each case the fenced \
         operation and its plain counterpart alternate (fenced then plain, then plain then \
         fenced, …), on the same server, with the same payload, in the same process. Ratios \
         compare the two sides' medians; absolute times on a shared, noisy machine mean \
         little on their own.\n"
    );
    let _ = writeln!(s, "- Reproduce: `{}`", ctx.command);
    let _ = writeln!(s, "- It runs: `{}`", ctx.invocation);
    let _ = writeln!(
        s,
        "- Date: {}; the suite took {:.0} s",
        ctx.date,
        ctx.took.as_secs_f64()
    );
    let _ = writeln!(s, "- Machine: {}", ctx.machine);
    let _ = writeln!(
        s,
        "- Servers (all on 127.0.0.1): {}",
        ctx.servers.join("; ")
    );
    let _ = writeln!(
        s,
        "- Per case: untimed warm-up rounds ({}), then {} timed rounds ({} for object stores, \
         whose emulators keep every write in memory), each one fenced and one plain \
         operation. Contention rows: many writers at once, whole rounds alternating.",
        ctx.plan.warmup, ctx.plan.iterations, ctx.plan.object_iterations
    );
    let _ = writeln!(
        s,
        "- Round trips: counted, not inferred. After the timed run, each side runs {} more \
         operations one at a time through a counting loopback proxy \
         (`fencing_harness::proxy::CountingProxy`); a round trip starts whenever the client \
         sends after the server has answered. TCP handshakes are not round trips here; new \
         connections are shown when there are any.",
        ctx.plan.count_ops
    );
    let _ = writeln!(
        s,
        "- Ratio: fenced median ÷ plain median; for contention rows, plain throughput ÷ fenced \
         throughput. **Bold**: above the issue's target for that row.\n"
    );
    if !ctx.failures.is_empty() {
        let _ = writeln!(s, "**Backends that failed in this run:**\n");
        for f in &ctx.failures {
            let _ = writeln!(s, "- {f}");
        }
        s.push('\n');
    }
    s.push_str(&table(rows));
    s.push('\n');
    if let Some(chart) = &ctx.chart {
        let _ = writeln!(s, "![The ratios of this run as bars]({chart})\n");
    }
    let missed: Vec<&Row> = rows.iter().filter(|r| r.misses_target()).collect();
    if missed.is_empty() {
        let _ = writeln!(s, "Every row with a target met it in this run.\n");
    } else {
        let _ = writeln!(
            s,
            "Rows above their target in this run (explained below):\n"
        );
        for r in missed {
            let _ = writeln!(
                s,
                "- {} · {}{}: {:.2} (target ≤ {:.2})",
                r.backend,
                r.operation,
                r.payload
                    .map(|p| format!(" · {}", size(p)))
                    .unwrap_or_default(),
                r.ratio,
                r.target.unwrap_or(f64::NAN)
            );
        }
        s.push('\n');
    }
    s.push_str(findings);
    s
}

/// Cores, memory, OS and kernel, from `/proc` and `/etc/os-release`.
pub(crate) fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU", |(_, m)| m.trim())
        .to_owned();
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let os = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map_or("unknown OS", |v| v.trim_matches('"'))
        .to_owned();
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_owned();
    format!(
        "{cores} cores ({model}), {:.1} GiB memory, {os}, Linux {kernel}; shared with other work",
        mem_kib as f64 / (1024.0 * 1024.0)
    )
}
