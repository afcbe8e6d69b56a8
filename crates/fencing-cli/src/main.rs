//! `fence`: fencing tokens from the shell.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// Exit codes, documented in `fence --help`. `run` and `lead` pass their
/// command's code on, so fence's own outcomes there (the lease lost or
/// held, fence failing) take codes that commands do not use in practice,
/// next to timeout(1)'s 124–127 and below the 128 + N of a signal.
pub(crate) mod exit {
    use nix::sys::signal::Signal;

    /// Any other failure (server down, permission denied…).
    pub(crate) const FAILURE: u8 = 1;
    /// Bad input: a malformed URL, a key over the limit, a token out of range.
    pub(crate) const INVALID: u8 = 2;
    /// The store refused a stale token; nothing was written.
    pub(crate) const STALE: u8 = 3;
    /// `get`: the key has no value.
    pub(crate) const NOT_FOUND: u8 = 6;
    /// `doctor`: a check found the deployment unsafe (it can accept a stale
    /// write or re-issue a token); `token`: the holder's lock has no token
    /// that orders it.
    pub(crate) const UNSAFE: u8 = 7;
    /// `run`, `lead`: fence itself failed (what is [`FAILURE`] or
    /// [`INVALID`] elsewhere: the issuer unreachable, bad arguments, a
    /// panic), so the command's own 1 and 2 stay its own.
    pub(crate) const RUN_FAILED: u8 = 120;
    /// The resource is held by someone else (and `--wait` ran out), or an
    /// operation that needs it free found it held (`Error::Busy`); `run`
    /// did not start the command.
    pub(crate) const HELD: u8 = 121;
    /// The lease was lost (expired or taken); `run` and `lead` ended the
    /// command's process group.
    pub(crate) const LEASE_LOST: u8 = 122;
    /// `run`, `lead`: the command could not be executed (as a shell says).
    pub(crate) const CANNOT_EXECUTE: u8 = 126;
    /// `run`, `lead`: the command was not found (as a shell says).
    pub(crate) const COMMAND_NOT_FOUND: u8 = 127;

    /// `run`, `lead`: fence got `signal` and ended the command's group:
    /// 128 + the signal's number, as a shell reports a command it ended.
    pub(crate) fn signalled(signal: Signal) -> u8 {
        u8::try_from(128 + signal as i32).unwrap_or(FAILURE)
    }

    /// Why the command could not start: not found, or anything else.
    pub(crate) fn cannot_start(e: &std::io::Error) -> u8 {
        if e.kind() == std::io::ErrorKind::NotFound {
            COMMAND_NOT_FOUND
        } else {
            CANNOT_EXECUTE
        }
    }
}

/// `fence --help`'s epilogue: the URL grammar comes from the one registry.
fn after_help() -> String {
    let indent = |s: &str| s.lines().map(|l| format!("  {l}\n")).collect::<String>();
    format!(
        "Backends are named by URL.\nIssuers (a ZooKeeper lease is its process's session: use it with `run` or `acquire --hold`):\n{}Stores:\n{}{AFTER_HELP}",
        indent(&backends::grammar(backends::Role::Issuer)),
        indent(&backends::grammar(backends::Role::Store)),
    )
}

const AFTER_HELP: &str = "\
Set FENCE_ISSUER / FENCE_STORE to skip --issuer / --store.

Exit codes: 0 ok, 1 failure, 2 bad input, 3 stale token refused (nothing written),
6 no value, 7 unsafe deployment (`doctor`: a check failed), 121 resource held,
122 lease lost.
`fence run` and `fence lead` exit with their command's code, except for their own
outcomes: 120 fence failed (the issuer unreachable, bad arguments), 121 held (not run),
122 lease lost (the command's group ended), 126/127 the command could not be
executed / was not found, 128+N fence got signal N (SIGHUP, SIGINT, SIGQUIT,
SIGTERM: passed on to the command's group, SIGKILL after --grace, released).
A command may exit with those codes too: --status-file FILE gets `command N` or
`fence N`, whose code it was.
At a terminal the command gets it (prompts, Ctrl-C go to the command); Ctrl-Z stops
the command and fence, and `fg` continues them once fence has renewed the lease.

Start here: `fence demo` shows a paused lock holder refused by the store.";

/// Fencing tokens for distributed locks: run jobs under a lease, write with
/// its token, and watch a paused holder's late write be refused.
#[derive(Debug, Parser)]
#[command(name = "fence", version, about, after_help = after_help())]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run Figure 9-6 for real: a client pauses past its lease, another takes
    /// over, and the store refuses the paused client's write. Needs no server.
    Demo(demo::DemoArgs),
    /// Run a command while holding a lease; it gets FENCING_TOKEN to write
    /// with, and its process group is signalled if the lease is lost.
    ///
    /// The lease covers the command's whole process group: a job it leaves
    /// running (`&`, a grandchild) keeps the lease, renewed, until it exits
    /// (`--orphans wait`, the default), or is ended at the command's exit
    /// (`--orphans kill`). A lost lease sends the group --signal, then
    /// SIGKILL after --grace to every member still there, and fence exits
    /// 122 once they are gone.
    ///
    /// Run from a terminal's foreground, fence hands the terminal to the
    /// command's group (it reads what is typed; Ctrl-C and Ctrl-\ reach it
    /// as without fence) and takes it back when the group is done. Stopped
    /// for job control (Ctrl-Z, a read from the background), the command
    /// stops fence too, and its shell sees the job stopped; `fg` or `bg`
    /// continue fence, which renews the lease, then the command. The
    /// command starts with no signal blocked.
    ///
    /// SIGHUP (a closed terminal or ssh session), SIGINT, SIGQUIT and SIGTERM
    /// to fence are passed on to the group (the signal received, as the
    /// terminal would have sent it), SIGKILL follows after --grace, and
    /// fence releases the lease and exits 128 + the signal. A panic in fence
    /// ends the group likewise (exit 120). SIGTSTP to fence stops the
    /// group, then fence (which blocks SIGTTIN and SIGTTOU: in the
    /// background it writes to the terminal even with `stty tostop`
    /// rather than stop alone); continued, fence renews the
    /// lease before it continues the group, and kills the stopped group
    /// (SIGKILL, exit 122) if the lease was lost meanwhile. SIGSTOP to
    /// fence cannot be caught: the group runs on unrenewed until fence is
    /// continued. fence killed with SIGKILL (or by
    /// the OOM killer) cannot act: then the kernel kills the command (a
    /// parent-death signal, Linux) and a watcher fence starts beside it
    /// kills the rest of the group within 50 ms, unless the watcher was
    /// killed too. A process that leaves the group (setsid, setpgid, a
    /// daemon) is neither waited for nor signalled. Late writes of either
    /// are still refused by a fenced store once a newer token has written.
    ///
    /// Exit: the command's code; fence's own outcomes are 120 (fence
    /// failed), 121 (held: not run), 122 (lease lost), 126/127 (the command
    /// could not be executed / was not found), 128 + N (fence got signal N).
    /// --status-file says whose code it is.
    Run(lease_cmds::RunArgs),
    /// Run a long-lived command as the elected leader of a resource:
    /// followers wait and take over. The command gets the term's
    /// FENCING_TOKEN; stores named with --fence are fenced first.
    ///
    /// The term covers the command's whole process group, as for `fence
    /// run`: it lasts until every member has exited (`--orphans wait`) or
    /// the rest are ended at the command's exit (`--orphans kill`); a lost
    /// term ends every member (--signal, SIGKILL after --grace), exit 122;
    /// signals to fence and fence's death act as for `run`, with the same
    /// exit codes. A process that leaves the group (setsid, setpgid, a
    /// daemon) is not tracked.
    Lead(lead_cmd::LeadArgs),
    /// Acquire a lease and print its token and holder id.
    Acquire(lease_cmds::AcquireArgs),
    /// Renew a lease (same token).
    Renew(lease_cmds::LeaseArgs),
    /// Release a lease so the next holder gets in at once.
    Release(lease_cmds::LeaseArgs),
    /// Show who holds a resource.
    Holder(lease_cmds::HolderArgs),
    /// Remove what idle resources keep on the issuer's server (a counter, a
    /// lease record), for services that lock one name per task: a name
    /// with no lease held and none granted for --idle, whose counter is
    /// below the server's clock, where it starts again, so no token goes
    /// back. Prints one of removed, absent, in-use, floored per name; an
    /// issuer that cannot remove its records safely refuses (exit 1). On
    /// the bucket lease and DynamoDB, which have no server clock to judge
    /// idleness by, each name is watched unchanged for --idle, 4,096 at a
    /// time: a sweep of N names takes about N / 4,096 × --idle.
    RemoveIdle(remove_idle_cmd::RemoveIdleArgs),
    /// Print the fencing token of the lock --key (required) another client
    /// holds (`etcdctl lock`, python-etcd3, Curator, kazoo), for it to
    /// carry to a fenced store.
    Token(token_cmd::TokenArgs),
    /// Write a value with a fencing token; a stale token is refused (exit 3).
    Put(store_cmds::PutArgs),
    /// Read a value and its mark.
    Get(store_cmds::KeyArgs),
    /// Show a key's mark: the highest token the store has accepted for it.
    Mark(store_cmds::KeyArgs),
    /// Raise a key's mark without writing, shutting out older tokens.
    Fence(store_cmds::FenceArgs),
    /// Show or raise the store's floor, and remove the marks it covers.
    /// Every token at or below the floor is refused on every key, new keys
    /// included, so the marks of deleted (or only fenced) keys at or below
    /// it can go: for services that write one key per task, whose marks
    /// otherwise stay for ever. --raise TOKEN raises it (never lowers it:
    /// exit 2) and cuts off every holder at or below TOKEN; --remove-marks
    /// then removes the covered marks, 1,000 per statement, and prints how
    /// many. SQL and DynamoDB stores keep a floor; the others refuse (exit 1).
    Floor(store_cmds::FloorArgs),
    /// Move a resource to another issuer without a token ever going back.
    #[command(subcommand)]
    Migrate(migrate::MigrateCommand),
    /// Check that stores and issuers enforce what fencing needs: a lower token
    /// refused, preconditions honoured, tokens that cannot be re-issued.
    /// Exit 7 if a check is unsafe (even if another could not run), else 1 if
    /// one could not run (server down).
    Doctor(doctor::DoctorArgs),
    /// Scan a source tree for distributed locks, leases and leader election,
    /// and flag those whose writes carry no fencing token (exit 1).
    #[cfg(feature = "audit")]
    Audit(audit::AuditArgs),
}

/// Prints a line to stdout. A reader that went away (`fence … | head`)
/// ends the process quietly, as a shell tool should, instead of a panic.
macro_rules! out {
    () => {
        $crate::print_out(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::print_out(format_args!($($arg)*))
    };
}

pub(crate) fn print_out(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if let Err(e) = writeln!(std::io::stdout().lock(), "{line}") {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("fence: cannot write to stdout: {e}");
        std::process::exit(i32::from(exit::FAILURE));
    }
}

#[cfg(feature = "audit")]
mod audit;
use fencing_tokens::registry as backends;
mod demo;
mod doctor;
mod group;
mod lead_cmd;
mod lease_cmds;
mod migrate;
mod output;
mod remove_idle_cmd;
mod store_cmds;
mod svg;
mod token_cmd;

/// What a command returns: its exit code, or an error to report.
pub(crate) type CliResult = Result<ExitCode, Box<dyn std::error::Error>>;

/// Parses durations like `300ms`, `2s`, `1m 30s`.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (try e.g. 300ms, 2s, 1m)"))
}

/// The hidden subcommand that starts the command ([`group::helper`]).
pub(crate) const EXEC_CHILD: &str = "__exec";
/// The hidden subcommand that watches its group ([`group::helper`]).
pub(crate) const WATCH_GROUP: &str = "__watch";

fn main() -> ExitCode {
    // `fence __exec` and `fence __watch` start with every `run` and `lead`:
    // they skip the full command line and everything below.
    if let Some(code) = group::helper() {
        return code;
    }
    // `run` and `lead` pass their command's code on: a usage error of
    // theirs is fence's own failure, not a 2 the command could have exited.
    let wraps = matches!(std::env::args().nth(1).as_deref(), Some("run" | "lead"));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if wraps && e.use_stderr() => {
            let _ = e.print();
            return ExitCode::from(exit::RUN_FAILED);
        }
        Err(e) => e.exit(),
    };
    group::end_the_group_on_panic();
    // Before the runtime's threads, which inherit it.
    group::write_to_the_terminal_in_the_background();
    // `run` waits on a handful of calls and one child: worker threads would
    // cost more to start, and to hand each wake-up across, than they save.
    // Its command is spawned on this, the main, thread either way.
    let runtime = if matches!(cli.command, Command::Run(_)) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => return report(&e, wraps),
    };
    let result = runtime.block_on(dispatch(cli.command));
    result.unwrap_or_else(|e| report(&*e, wraps))
}

async fn dispatch(command: Command) -> CliResult {
    match command {
        Command::Demo(args) => demo::run(args).await,
        Command::Run(args) => lease_cmds::run(args).await,
        Command::Lead(args) => lead_cmd::lead(args).await,
        Command::Acquire(args) => lease_cmds::acquire(args).await,
        Command::Renew(args) => lease_cmds::renew(args).await,
        Command::Release(args) => lease_cmds::release(args).await,
        Command::Holder(args) => lease_cmds::holder(args).await,
        Command::RemoveIdle(args) => remove_idle_cmd::remove_idle(args).await,
        Command::Token(args) => token_cmd::token(args).await,
        Command::Put(args) => store_cmds::put(args).await,
        Command::Get(args) => store_cmds::get(args).await,
        Command::Mark(args) => store_cmds::mark(args).await,
        Command::Fence(args) => store_cmds::fence(args).await,
        Command::Floor(args) => store_cmds::floor(args).await,
        Command::Migrate(command) => migrate::run(command).await,
        Command::Doctor(args) => doctor::run(args).await,
        #[cfg(feature = "audit")]
        Command::Audit(args) => audit::run(args),
    }
}

/// Prints an error with its chain of causes (redacted) and exits with
/// [`error_code`]'s code.
fn report(e: &(dyn std::error::Error + 'static), wraps: bool) -> ExitCode {
    eprintln!("fence: {}", fencing_tokens::error_chain(e));
    ExitCode::from(error_code(e, wraps))
}

/// The exit code for an error; `wraps`: for `run` or `lead`, whose
/// failures must not look like their command's.
pub(crate) fn error_code(e: &(dyn std::error::Error + 'static), wraps: bool) -> u8 {
    match e.downcast_ref::<fencing_tokens::Error>() {
        Some(fencing_tokens::Error::StaleToken { .. }) => exit::STALE,
        Some(fencing_tokens::Error::LeaseLost { .. }) => exit::LEASE_LOST,
        Some(fencing_tokens::Error::Timeout { .. } | fencing_tokens::Error::Busy { .. }) => {
            exit::HELD
        }
        _ if wraps => exit::RUN_FAILED,
        Some(
            fencing_tokens::Error::InvalidInput { .. }
            | fencing_tokens::Error::TokenOutOfRange { .. },
        ) => exit::INVALID,
        _ => exit::FAILURE,
    }
}
