//! `put`, `get`, `mark`, `fence` and `floor`: fenced writes from the shell.

use std::io::Read;
use std::process::ExitCode;

use bytes::Bytes;
use clap::Args;
use fencing_tokens::FencingToken;

use crate::{CliResult, backends};

#[derive(Debug, Args)]
pub(crate) struct KeyArgs {
    /// The store, by URL (or FENCE_STORE).
    // Hidden: --help would print the URL, password and all.
    #[arg(long, env = "FENCE_STORE", hide_env_values = true, value_name = "URL")]
    store: String,
    /// The key.
    key: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct PutArgs {
    #[command(flatten)]
    target: KeyArgs,
    /// The fencing token of your lease (e.g. $FENCING_TOKEN under `fence run`).
    #[arg(long, env = "FENCING_TOKEN")]
    token: FencingToken,
    /// The value; `-` or absent reads standard input.
    value: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct FenceArgs {
    #[command(flatten)]
    target: KeyArgs,
    /// The token to raise the mark to.
    #[arg(long, env = "FENCING_TOKEN")]
    token: FencingToken,
}

#[derive(Debug, Args)]
pub(crate) struct FloorArgs {
    /// The store, by URL (or FENCE_STORE).
    #[arg(long, env = "FENCE_STORE", hide_env_values = true, value_name = "URL")]
    store: String,
    /// Raise the floor to this token first.
    #[arg(long, value_name = "TOKEN")]
    raise: Option<FencingToken>,
    /// Remove the marks the floor covers (keys with no value, marks at or
    /// below it).
    #[arg(long)]
    remove_marks: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Marks removed per statement: each statement ends (and lets go of its
/// locks) after at most this many.
const REMOVE_BATCH: u32 = 1000;

pub(crate) async fn floor(args: FloorArgs) -> CliResult {
    let store = backends::open_store(&args.store).await?;
    let floor = match args.raise {
        Some(token) => Some(store.raise_floor(token).await?),
        None => store.floor().await?,
    };
    let mut removed = 0_u64;
    if args.remove_marks {
        loop {
            let batch = store.remove_floored_marks(REMOVE_BATCH).await?;
            if batch == 0 {
                break;
            }
            removed += batch;
        }
    }
    if args.json {
        let mut answer = serde_json::json!({"floor": floor});
        if args.remove_marks {
            answer["removed"] = removed.into();
        }
        out!("{answer}");
    } else {
        match floor {
            Some(f) => out!("floor: {f} (every token at or below it is refused)"),
            None => out!("floor: none"),
        }
        if args.remove_marks {
            out!("removed {removed} marks");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn put(args: PutArgs) -> CliResult {
    let store = backends::open_store(&args.target.store).await?;
    let value = match args.value.as_deref() {
        Some("-") | None => {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf)?;
            Bytes::from(buf)
        }
        Some(v) => Bytes::copy_from_slice(v.as_bytes()),
    };
    let len = value.len();
    store.put(&args.target.key, value, args.token).await?;
    if args.target.json {
        out!(
            "{}",
            serde_json::json!({"key": args.target.key, "token": args.token, "bytes": len, "accepted": true})
        );
    } else {
        out!(
            "accepted: {:?} ({len} bytes) at token {}",
            args.target.key,
            args.token
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn get(args: KeyArgs) -> CliResult {
    let store = backends::open_store(&args.store).await?;
    let record = store.get(&args.key).await?;
    match (record, args.json) {
        (Some(r), true) => out!(
            "{}",
            serde_json::json!({"key": args.key, "token": r.token, "value": String::from_utf8_lossy(&r.value)})
        ),
        (Some(r), false) => {
            // Values are bytes: print them as they are.
            let text = String::from_utf8_lossy(&r.value);
            out!("{}", text.strip_suffix('\n').unwrap_or(&text));
            eprintln!("(token {})", r.token);
        }
        (None, true) => out!("null"),
        (None, false) => {
            eprintln!("{:?} has no value", args.key);
            return Ok(ExitCode::from(crate::exit::NOT_FOUND));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn mark(args: KeyArgs) -> CliResult {
    let store = backends::open_store(&args.store).await?;
    let mark = store.mark(&args.key).await?;
    if args.json {
        out!("{}", serde_json::json!({"key": args.key, "mark": mark}));
    } else {
        match mark {
            Some(m) => out!("{m}"),
            None => out!("none (never written or fenced)"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn fence(args: FenceArgs) -> CliResult {
    let store = backends::open_store(&args.target.store).await?;
    let mark = store.fence(&args.target.key, args.token).await?;
    if args.target.json {
        out!(
            "{}",
            serde_json::json!({"key": args.target.key, "mark": mark})
        );
    } else {
        out!("fenced {:?} at token {mark}", args.target.key);
    }
    Ok(ExitCode::SUCCESS)
}
