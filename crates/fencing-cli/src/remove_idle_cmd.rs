//! `remove-idle`: removing what idle resource names keep on the issuer's
//! server, for services that lock one name per task or per job.

use std::io::BufRead;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use fencing_tokens::{Removal, TokenIssuer};
use tokio::task::JoinSet;

use crate::{CliResult, backends, exit};

/// How many names are judged at once on an issuer whose server's clock
/// tells idleness (one or two requests each).
const AT_ONCE: usize = 32;
/// How many on an issuer that has no server clock to tell it by (the
/// bucket lease, DynamoDB): each call reads its record, waits the idle
/// time, and reads it again, so the waits overlap; its issuer remembers
/// this many records.
const WATCHED_AT_ONCE: usize = 4096;

#[derive(Debug, Args)]
pub(crate) struct RemoveIdleArgs {
    /// The lock service, by URL (or FENCE_ISSUER).
    #[arg(long, env = "FENCE_ISSUER", hide_env_values = true, value_name = "URL")]
    issuer: String,
    /// How long a resource must have had no lease held and none granted
    /// (on the bucket lease and DynamoDB, how long this command watches
    /// each record unchanged).
    #[arg(long, value_parser = crate::parse_duration, value_name = "DURATION")]
    idle: Duration,
    /// The resource names; `-` reads them from stdin, one per line.
    #[arg(required = true, value_name = "NAME")]
    names: Vec<String>,
    /// Print one JSON object per name.
    #[arg(long)]
    json: bool,
}

/// Judges every name, [`AT_ONCE`] at a time ([`WATCHED_AT_ONCE`] where
/// each call waits the idle time out), and prints one line each, in
/// the order they finish. Exit 1 if any could not be judged (the issuer
/// refused the operation, a server error): the others still are.
pub(crate) async fn remove_idle(args: RemoveIdleArgs) -> CliResult {
    let names = names(&args.names)?;
    let issuer = backends::open_issuer(&args.issuer).await?;
    let mut pending = names.into_iter();
    let mut running = JoinSet::new();
    let mut failed = false;
    let start = |running: &mut JoinSet<_>, name: String| {
        let issuer: Arc<dyn TokenIssuer> = Arc::clone(&issuer);
        let idle = args.idle;
        running.spawn(async move {
            let outcome = issuer.remove_idle(&name, idle).await;
            (name, outcome)
        });
    };
    let at_once = if issuer.expiry_needs_watching() {
        WATCHED_AT_ONCE
    } else {
        AT_ONCE
    };
    for name in pending.by_ref().take(at_once) {
        start(&mut running, name);
    }
    while let Some(joined) = running.join_next().await {
        let (name, outcome) = joined?;
        match outcome {
            Ok(removal) => print(&name, removal, args.json),
            Err(e) => {
                failed = true;
                eprintln!("fence: {name:?}: {}", fencing_tokens::error_chain(&e));
            }
        }
        if let Some(name) = pending.next() {
            start(&mut running, name);
        }
    }
    Ok(if failed {
        ExitCode::from(exit::FAILURE)
    } else {
        ExitCode::SUCCESS
    })
}

/// The names given, with `-` replaced by stdin's lines (blank ones
/// skipped).
fn names(given: &[String]) -> Result<Vec<String>, std::io::Error> {
    let mut names = Vec::new();
    for name in given {
        if name == "-" {
            for line in std::io::stdin().lock().lines() {
                let line = line?;
                if !line.trim().is_empty() {
                    names.push(line);
                }
            }
        } else {
            names.push(name.clone());
        }
    }
    Ok(names)
}

fn print(name: &str, removal: Removal, json: bool) {
    if json {
        out!(
            "{}",
            serde_json::json!({ "resource": name, "removal": removal.as_str() })
        );
    } else {
        out!("{} {name:?}", removal.as_str());
    }
}
