//! `fence`: fencing tokens from the shell.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

mod demo;

/// Fencing tokens for distributed locks: see a zombie refused, then fence
/// your own writes.
#[derive(Debug, Parser)]
#[command(name = "fence", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run Figure 9-6 for real: a client pauses past its lease, another takes
    /// over, and the store refuses the paused client's write. Needs no server.
    Demo(demo::DemoArgs),
}

/// Parses durations like `300ms`, `2s`, `1m 30s`.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (try e.g. 300ms, 2s, 1m)"))
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fence: {e}");
            let mut source = std::error::Error::source(&*e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}
