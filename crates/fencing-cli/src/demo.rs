//! `fence demo`: the Figure 9-6 timeline, narrated.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use fencing_sql::{SqlIssuer, SqlStore};
use fencing_tokens::memory::{MemoryIssuer, MemoryStore};
use fencing_tokens::scenario::{Event, Step, figure_9_6};
use fencing_tokens::{FencedStore, TokenIssuer};

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// The lease's time-to-live; client 1 pauses for 1.5× this.
    #[arg(long, default_value = "300ms", value_parser = crate::parse_duration)]
    ttl: Duration,
    /// Have client 2 fence the file as soon as it acquires, before writing:
    /// the zombie is refused even though client 2 has not written yet.
    #[arg(long)]
    fence_on_acquire: bool,
    /// The SQLite file that plays the lock service and the storage service
    /// (created if missing). Defaults to a fresh file in the temp directory.
    #[arg(long, value_name = "PATH", conflicts_with = "memory")]
    sqlite: Option<PathBuf>,
    /// Use the in-memory issuer and store instead of SQLite.
    #[arg(long)]
    memory: bool,
    /// Also draw this run's timeline as an SVG picture.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

pub(crate) async fn run(args: DemoArgs) -> crate::CliResult {
    let mut scratch = None;
    let (issuer, store, place): (Box<dyn TokenIssuer>, Box<dyn FencedStore>, String) =
        if args.memory {
            (
                Box::new(MemoryIssuer::new()),
                Box::new(MemoryStore::new()),
                "process memory".into(),
            )
        } else {
            let path = args.sqlite.unwrap_or_else(|| {
                let path =
                    std::env::temp_dir().join(format!("fence-demo-{}.sqlite", std::process::id()));
                scratch = Some(path.clone());
                path
            });
            let url = format!("sqlite://{}", path.display());
            let db = fencing_sql::SqlConfig::from_url(&url)?.connect_db().await?;
            (
                Box::new(SqlIssuer::new(db.clone()).await?),
                Box::new(SqlStore::new(db).await?),
                format!("the SQLite file {}", path.display()),
            )
        };
    out!("Figure 9-6 (Kleppmann & Riccomini, DDIA ch. 9), run for real in {place}:");
    out!("a lock service grants leases with fencing tokens; the storage refuses stale tokens.");
    if !args.memory {
        out!(
            "(A new SQLite counter starts at the database clock in microseconds: hence large tokens.)"
        );
    }
    out!();
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("fence-demo-{}-{run:x}", std::process::id());
    let events = figure_9_6(
        &*issuer,
        &*store,
        args.ttl,
        args.fence_on_acquire,
        &prefix,
        print_event,
    )
    .await?;
    out!(
        "\nClient 1's lease expired while it was paused, but it never noticed. The lock alone could not\n\
         stop its write; the storage did, because client 2's token was higher."
    );
    if let Some(file) = &args.svg {
        std::fs::write(file, crate::svg::timeline(&events, args.ttl))
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        out!("\nTimeline drawn to {}", file.display());
    }
    if let Some(path) = scratch {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn print_event(event: &Event) {
    let at = format!("{:>8.3}s", event.at.as_secs_f64());
    match &event.step {
        Step::Acquired { client, token, ttl } => {
            out!("{at}  client {client}  acquires the lease (TTL {ttl:?})        -> token {token}");
        }
        Step::Paused { client, duration } => {
            out!(
                "{at}  client {client}  pauses for {duration:?} (GC, VM freeze): its lease expires meanwhile"
            );
        }
        Step::Resumed { client } => {
            out!("{at}  client {client}  wakes up, still believing it holds the lease");
        }
        Step::Fenced { client, token } => {
            out!("{at}  client {client}  fences the file at token {token} before writing");
        }
        Step::Wrote {
            client,
            token,
            value,
        } => {
            out!("{at}  client {client}  writes {value:?} with token {token}   -> accepted");
        }
        Step::Refused {
            client,
            presented,
            current,
            error,
        } => {
            out!(
                "{at}  client {client}  writes with token {presented}                    -> REFUSED (store holds {current})"
            );
            out!("{:>11}error: {error}", "");
        }
        Step::Final { value, token } => {
            out!("{at}  store    holds {value:?} at token {token}: client 2's data is intact");
        }
    }
}
