//! `fence audit PATH`: the "current state" scan.
//!
//! Walks a source tree (Rust, Go, Java, Kotlin, Python, JavaScript,
//! TypeScript) and reports, with `file:line:column` and the matched line:
//!
//! - **distributed-lock usage** (Redis `SET NX`, Redlock, redsync, Redisson,
//!   etcd, ZooKeeper/Curator/kazoo, Consul, ShedLock, DynamoDB lock client,
//!   PostgreSQL advisory and MySQL named locks, home-grown `acquire_lock`s);
//! - **optimistic-concurrency checks** (version columns, `@Version`,
//!   `If-Match`, GCS/Azure/DynamoDB preconditions, token columns);
//! - **leader election and singleton-job guards** (Kubernetes, etcd,
//!   Curator, kazoo, Spring, `@Scheduled` next to a lock, cron guards);
//! - **hints**: the language signals of the fencing-tokens skill in comments
//!   and strings ("only one process should write at a time", "GC pause").
//!
//! Every lock, lease or leadership *acquisition* is checked for a fencing
//! token near it (the evidence list of `fencing-audit`); one with none is **unfenced**: a
//! holder paused past its lease can still write after another took over.
//!
//! The scan, its rules and the JSON schema are the `fencing-audit` crate;
//! this is the command line around it. The scan only reads.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::TypedValueParser as _;
use fencing_audit::{Auditor, Category, Report};

/// Exit status when an unfenced lock was found (and `--no-fail` not given).
const EXIT_UNFENCED: u8 = 1;
/// Exit status for usage and I/O errors (clap uses it for usage errors too).
const EXIT_ERROR: u8 = 2;

const AFTER_HELP: &str = "\
Exit status:
  0  no unfenced lock found (or --no-fail)
  1  at least one unfenced lock found
  2  usage or I/O error (e.g. PATH does not exist)

What is read: .rs .go .java .kt .kts .py .pyw .js .mjs .cjs .jsx .ts .tsx .mts .cts
(not .min.js, .d.ts). .gitignore/.ignore are honoured, hidden entries skipped, and
so are .git target node_modules bower_components vendor build dist out .gradle
__pycache__ site-packages venv; files over 2 MiB or binary are skipped.

A lock is fenced when a fencing-token use (fencing_token, lock_token, a token passed
to a write, fence(...), If-Match, ifGenerationMatch, getFence, FencedLock/FencedStore,
etcd create_revision, ZooKeeper czxid/cversion, fencing_tokens::) appears on a code line from
25 lines above it to 100 below (type and crate uses: anywhere in the file). Comment
lines are never evidence, and only hints are read in them.

JSON (--json), schema version 1:
  {\"version\": 1, \"root\": PATH,
   \"findings\": [{\"file\": path relative to PATH with / separators,
                 \"line\": 1-based, \"column\": 1-based in characters,
                 \"category\": \"lock\"|\"optimistic\"|\"leader\"|\"hint\",
                 \"kind\": rule kind (e.g. \"redis-set-nx\"),
                 \"language\": \"rust\"|\"go\"|\"java\"|\"kotlin\"|\"python\"|\"javascript\"|\"typescript\",
                 \"snippet\": the trimmed line,
                 \"fenced\": true|false for lock/lease/leadership acquisitions, else null,
                 \"message\": what it is; for unfenced ones the risk and the fix}],
   \"summary\": {\"files_scanned\", \"files_skipped\", \"errors\", \"findings\",
               \"by_category\": {\"lock\", \"optimistic\", \"leader\", \"hint\"},
               \"lock_sites\", \"fenced\", \"unfenced\"}}
Findings are sorted by file, line, column, category. Fields are only ever added.
The JSON Schema: schema/report-v1.schema.json in the fencing-audit crate.";

/// Scan a source tree for distributed locks, leases, leader election and
/// optimistic-concurrency checks, and flag locks whose writes carry no
/// fencing token.
#[derive(Debug, clap::Args)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct AuditArgs {
    /// The directory (or single file) to scan. Read only.
    #[arg(value_name = "PATH")]
    path: PathBuf,
    /// Print one JSON document (schema in --help) instead of text.
    #[arg(long)]
    json: bool,
    /// Exit 0 even when an unfenced lock is found.
    #[arg(long)]
    no_fail: bool,
    /// List every mention of a lock library too, not only the lock sites
    /// (each site counts the mentions in its file).
    #[arg(long, short)]
    verbose: bool,
    /// Report only these categories (repeat, or separate with commas).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "CATEGORY",
        value_parser = clap::builder::PossibleValuesParser::new(Category::ALL.map(Category::name))
            .map(|s| s.parse::<Category>().expect("a possible value parses")),
    )]
    category: Vec<Category>,
}

/// Runs the scan and prints the report on stdout.
///
/// Returns the exit status: 0 when no unfenced lock is reported (or with
/// `--no-fail`), 1 when one is, 2 after a usage or I/O error, which is
/// explained on stderr first. Errors are handled here, so `Err` is not
/// returned today; a caller should still map it to 2, not 1, which means
/// "unfenced lock found".
pub(crate) fn run(args: AuditArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let root = args.path.as_path();
    if let Err(e) = std::fs::metadata(root) {
        let why = if e.kind() == io::ErrorKind::NotFound {
            "no such file or directory".to_owned()
        } else {
            e.to_string()
        };
        eprintln!("fence audit: cannot read {}: {why}", root.display());
        return Ok(ExitCode::from(EXIT_ERROR));
    }
    let mut scan = Auditor::new().scan(root);
    if !args.category.is_empty() {
        scan.findings
            .retain(|f| args.category.contains(&f.category));
    }
    let report = Report::new(root, &scan);
    let summary = &report.summary;

    for e in scan.errors.iter().take(10) {
        eprintln!("fence audit: skipped: {e}");
    }
    if scan.errors.len() > 10 {
        eprintln!(
            "fence audit: skipped {} more unreadable entries",
            scan.errors.len() - 10
        );
    }

    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let written = if args.json {
        report.write_json(&mut out)
    } else {
        fencing_audit::write_text(&mut out, root, &scan, summary, args.verbose)
    }
    .and_then(|()| out.flush());
    match written {
        Ok(()) => {}
        // `fence audit . | head` is not an error worth a message.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        Err(e) => {
            eprintln!("fence audit: cannot write the report: {e}");
            return Ok(ExitCode::from(EXIT_ERROR));
        }
    }

    Ok(if summary.unfenced > 0 && !args.no_fail {
        ExitCode::from(EXIT_UNFENCED)
    } else {
        ExitCode::SUCCESS
    })
}
