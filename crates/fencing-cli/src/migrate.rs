//! `fence migrate issuer`: move a resource to another lock service without
//! a token ever going backwards.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use fencing_tokens::{FencingToken, LeaseRequest};
use serde::Serialize;

use crate::{CliResult, backends, exit};
use fencing_tokens::redact;

#[derive(Debug, Subcommand)]
pub(crate) enum MigrateCommand {
    /// Move a resource to a new issuer: its tokens start above every token
    /// the old issuer granted and every mark the named stores hold.
    Issuer(IssuerArgs),
    /// Copy records with their marks to another store: a key whose mark in
    /// the target is already at or above the source's is left alone, so a
    /// mark never goes down and a rerun picks up where one stopped.
    Store(StoreArgs),
}

#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// The store the records leave.
    #[arg(long, value_name = "URL")]
    from: String,
    /// The store they move to.
    #[arg(long, value_name = "URL")]
    to: String,
    /// A key to copy; repeat for each. Stores have no common way to list
    /// keys, so name them (or pass --keys-from).
    #[arg(long = "key", value_name = "KEY")]
    keys: Vec<String>,
    /// A file with one key per line (`-` for standard input).
    #[arg(long, value_name = "FILE")]
    keys_from: Option<std::path::PathBuf>,
    /// Print JSON lines, one per key.
    #[arg(long)]
    json: bool,
}

/// What happened to one key.
#[derive(Debug, Serialize)]
struct KeyReport {
    key: String,
    outcome: &'static str,
    source_mark: Option<FencingToken>,
    target_mark: Option<FencingToken>,
}

#[derive(Debug, Args)]
pub(crate) struct IssuerArgs {
    /// The issuer the resource leaves.
    #[arg(long, value_name = "URL")]
    from: String,
    /// The issuer the resource moves to.
    #[arg(long, value_name = "URL")]
    to: String,
    /// The resource.
    #[arg(long, value_name = "NAME")]
    resource: String,
    /// A store the resource's holders write to, and the key they write, as
    /// `URL#KEY`; its mark is included in the floor. Repeat for each key.
    #[arg(long = "store", value_name = "URL#KEY")]
    stores: Vec<String>,
    /// Migrate even while the old issuer has a live holder (its token is
    /// included in the floor; it keeps writing until its lease runs out, and
    /// every later holder's token is above it).
    #[arg(long)]
    force: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    resource: &'a str,
    from: &'a str,
    to: &'a str,
    /// The token a probe grant on the old issuer got: above all it granted.
    old_issuer_next: Option<FencingToken>,
    /// A live holder on the old issuer, if `--force` let it be.
    live_holder_token: Option<FencingToken>,
    marks: Vec<(String, Option<FencingToken>)>,
    floor: FencingToken,
    first_new_token: FencingToken,
}

pub(crate) async fn run(command: MigrateCommand) -> CliResult {
    match command {
        MigrateCommand::Issuer(args) => issuer(args).await,
        MigrateCommand::Store(args) => store(args).await,
    }
}

async fn store(args: StoreArgs) -> CliResult {
    let mut keys = args.keys.clone();
    if let Some(file) = &args.keys_from {
        let text = if file.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin())?
        } else {
            std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?
        };
        keys.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned),
        );
    }
    if keys.is_empty() {
        return Err(fencing_tokens::Error::invalid_input(
            "no keys to copy: pass --key KEY or --keys-from FILE",
        )
        .into());
    }
    let from = backends::open_store(&args.from).await?;
    let to = backends::open_store(&args.to).await?;
    let mut failed = 0;
    for key in keys {
        let report = match copy_one(&*from, &*to, &key).await {
            Ok(report) => report,
            Err(e) => {
                failed += 1;
                eprintln!("fence: {key:?}: {e}");
                continue;
            }
        };
        if args.json {
            out!("{}", serde_json::to_string(&report)?);
        } else {
            let show =
                |t: Option<FencingToken>| t.map_or_else(|| "none".to_owned(), |t| t.to_string());
            out!(
                "{:<10} {key:?} (source mark {}, target mark {})",
                report.outcome,
                show(report.source_mark),
                show(report.target_mark)
            );
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::FAILURE)
    })
}

/// Copies one key: its value at its mark, or just the mark. The target's
/// own fencing refuses anything below its mark, so a concurrent writer on
/// the target with a newer token wins and the key is reported as newer.
async fn copy_one(
    from: &dyn fencing_tokens::FencedStore,
    to: &dyn fencing_tokens::FencedStore,
    key: &str,
) -> Result<KeyReport, fencing_tokens::Error> {
    let source_mark = from.mark(key).await?;
    let target_mark = to.mark(key).await?;
    let report = |outcome, target_mark| KeyReport {
        key: key.to_owned(),
        outcome,
        source_mark,
        target_mark,
    };
    let Some(mark) = source_mark else {
        return Ok(report("absent", target_mark));
    };
    if target_mark.is_some_and(|t| t >= mark) {
        return Ok(report("up-to-date", target_mark));
    }
    let result = match from.get(key).await? {
        Some(record) => to.put(key, record.value, record.token).await,
        None => to.fence(key, mark).await.map(|_| ()),
    };
    match result {
        Ok(()) => Ok(report("copied", Some(mark))),
        Err(fencing_tokens::Error::StaleToken { current, .. }) => {
            Ok(report("newer", Some(current)))
        }
        Err(e) => Err(e),
    }
}

async fn issuer(args: IssuerArgs) -> CliResult {
    let from = backends::open_issuer(&args.from).await?;
    let to = backends::open_issuer(&args.to).await?;

    // The old issuer's counter: a probe grant is above every earlier grant.
    let probe_request =
        LeaseRequest::new(&args.resource, Duration::from_secs(5).max(from.min_ttl()));
    let (old_issuer_next, live_holder_token) = match from.try_acquire(&probe_request).await? {
        Some(probe) => {
            from.release(&probe).await?;
            (Some(probe.token()), None)
        }
        None => {
            let holding = from.holder(&args.resource).await?;
            let Some(holding) = holding.filter(|_| args.force) else {
                eprintln!(
                    "fence: {:?} has a live holder on {}; migrate when it is free, or pass --force",
                    args.resource,
                    redact(&args.from)
                );
                return Ok(ExitCode::from(exit::HELD));
            };
            (None, Some(holding.token))
        }
    };

    let mut marks = Vec::new();
    for spec in &args.stores {
        let (url, key) = spec.rsplit_once('#').ok_or_else(|| {
            fencing_tokens::Error::invalid_input(format!(
                "--store takes URL#KEY, got {:?}",
                redact(spec)
            ))
        })?;
        let store = backends::open_store(url).await?;
        marks.push((format!("{}#{key}", redact(url)), store.mark(key).await?));
    }

    let floor = [old_issuer_next, live_holder_token]
        .into_iter()
        .chain(marks.iter().map(|(_, m)| *m))
        .flatten()
        .max()
        .unwrap_or(FencingToken::ZERO);
    to.raise_floor(&args.resource, floor).await?;

    // Prove it: the first grant on the new issuer is above the floor.
    let check = to
        .acquire(
            &LeaseRequest::new(&args.resource, Duration::from_secs(5).max(to.min_ttl())),
            Duration::from_secs(10),
        )
        .await?;
    to.release(&check).await?;
    let (from_shown, to_shown) = (redact(&args.from), redact(&args.to));
    let report = Report {
        resource: &args.resource,
        from: &from_shown,
        to: &to_shown,
        old_issuer_next,
        live_holder_token,
        marks,
        floor,
        first_new_token: check.token(),
    };
    if check.token() <= floor {
        return Err(format!(
            "the new issuer granted {} after a floor of {floor}; not migrated",
            check.token()
        )
        .into());
    }
    if args.json {
        out!("{}", serde_json::to_string(&report)?);
    } else {
        out!(
            "migrating {:?} from {} to {}",
            report.resource,
            report.from,
            report.to
        );
        match (report.old_issuer_next, report.live_holder_token) {
            (Some(t), _) => {
                out!("  old issuer: next token would have been {t} (probe grant, released)")
            }
            (None, Some(t)) => out!("  old issuer: live holder with token {t} (--force)"),
            (None, None) => {}
        }
        for (store, mark) in &report.marks {
            match mark {
                Some(m) => out!("  store {store}: mark {m}"),
                None => out!("  store {store}: no mark yet"),
            }
        }
        out!("  floor set on the new issuer: {}", report.floor);
        out!(
            "  first token from the new issuer: {} (a probe grant, released)",
            report.first_new_token
        );
        out!(
            "Point your holders at {} now; stop using {} for {:?}.",
            report.to,
            report.from,
            report.resource
        );
    }
    Ok(ExitCode::SUCCESS)
}
