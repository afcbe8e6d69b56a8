//! The nemesis runs from the command line: CI mode (what
//! `tests/nemesis.rs` runs) or the long mode, printing one report per run
//! and, with `--write`, the summary table RELIABILITY.md shows.
//! `integration/nemesis.sh` starts the servers and runs this.

use std::path::PathBuf;

use clap::Parser;
use fencing_integration::nemesis::servers::ClusterKind;
use fencing_integration::nemesis::suite::{self, Mode, PairRuns};
use fencing_testkit::history::HistoryConfig;

/// Partitions, kills, pauses and skewed clocks against fenced writes.
#[derive(Parser)]
struct Args {
    /// Long mode: runs per pair until this many fenced calls were made
    /// (the bar is 100000). Without it, one CI-sized run per pair.
    #[arg(long, value_name = "CALLS")]
    long: Option<usize>,
    /// Seeds the schedules (default: FENCING_SEED, else random; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Only these pairs: etcd-postgres, etcd-s3, zk-postgres, zk-s3 (the
    /// cluster's partition runs), bucket-s3 (the bucket issuer on the bucket
    /// it fences), dynamodb-dynamodb (DynamoDB on its table: both on one
    /// moto, clients cut off from it), clocks (every issuer), or
    /// clocks-ISSUER (e.g. clocks-redis).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Writes the summary table (markdown) to this file.
    #[arg(long)]
    write: Option<PathBuf>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(HistoryConfig::seed_from_env);
    let mode = args.long.map_or(Mode::Ci, Mode::Long);
    let client = std::env::current_exe()
        .expect("own path")
        .with_file_name("nemesis-client");
    if !client.exists() {
        eprintln!(
            "nemesis: {} is missing: `cargo build -p fencing-integration --bin nemesis-client` first (integration/nemesis.sh does)",
            client.display()
        );
        return std::process::ExitCode::from(2);
    }
    println!("nemesis: seed {seed} (replay with --seed {seed}), mode {mode:?}");
    let wanted = |name: &str| args.only.is_empty() || args.only.iter().any(|o| o == name);
    let mut pairs: Vec<PairRuns> = Vec::new();
    for (kind, short) in [(ClusterKind::Etcd, "etcd"), (ClusterKind::ZooKeeper, "zk")] {
        let stores: Vec<&str> = suite::STORES
            .iter()
            .copied()
            .filter(|s| wanted(&format!("{short}-{s}")))
            .collect();
        if stores.is_empty() {
            continue;
        }
        match suite::partition_runs(kind, &stores, mode, seed, &client).await {
            Ok(runs) => pairs.extend(runs),
            Err(e) => {
                eprintln!("nemesis: {}: {e}", kind.name());
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    let single: Vec<&str> = suite::SINGLE_SERVERS
        .iter()
        .copied()
        .filter(|p| wanted(p))
        .collect();
    if !single.is_empty() {
        match suite::single_server_runs(&single, mode, seed, &client).await {
            Ok(runs) => pairs.extend(runs),
            Err(e) => {
                eprintln!("nemesis: single-server runs: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    let issuers: Vec<&str> = suite::clock_issuers()
        .into_iter()
        .filter(|i| wanted("clocks") || wanted(&format!("clocks-{i}")))
        .collect();
    if !issuers.is_empty() {
        match suite::clock_runs(&issuers, mode, seed, &client).await {
            Ok(runs) => pairs.extend(runs),
            Err(e) => {
                eprintln!("nemesis: clock runs: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    let table = suite::markdown_table(&pairs);
    println!("\n{table}");
    if let Some(path) = &args.write
        && let Err(e) = std::fs::write(path, &table)
    {
        eprintln!("nemesis: {}: {e}", path.display());
        return std::process::ExitCode::FAILURE;
    }
    let broken: Vec<String> = pairs
        .iter()
        .flat_map(|p| p.runs.iter().zip(&p.evidence))
        .filter(|(r, _)| !r.violations.is_empty())
        .map(|(r, e)| format!("{r}\n  {}\n  timeline: {e}", r.violations.join("\n  ")))
        .collect();
    if broken.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        eprintln!("nemesis: violations:\n{}", broken.join("\n"));
        std::process::ExitCode::FAILURE
    }
}
