//! `acquire`, `renew`, `release`, `holder` and `run`: leases from the shell.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use fencing::keepalive::{KeepAlive, Lost};
use fencing::{Error, FencingToken, HolderId, Lease, LeaseRequest, TokenIssuer};
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::time::{Instant, sleep_until};

use crate::output::LeaseView;
use crate::{CliResult, backends, exit};

/// Where the lease lives.
#[derive(Debug, Args)]
pub(crate) struct Target {
    /// The lock service, by URL (or FENCE_ISSUER).
    #[arg(long, env = "FENCE_ISSUER", value_name = "URL")]
    pub(crate) issuer: String,
    /// The resource the lease is on.
    #[arg(long, value_name = "NAME")]
    pub(crate) resource: String,
}

/// What happens to the command's process group when its lease is lost,
/// and when the command exits before the rest of its group (`run`, `lead`).
#[derive(Debug, Args)]
pub(crate) struct Supervision {
    /// The signal that asks the command's process group to stop: when the
    /// lease is lost, and with `--orphans kill`.
    #[arg(long, default_value = "SIGTERM")]
    signal: Signal,
    /// How long the group may take to stop after that signal before every
    /// member still in it is killed (SIGKILL).
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    grace: Duration,
    /// What to do when the command exits while other members of its process
    /// group still run (a job it started with `&`, a grandchild): they hold
    /// its FENCING_TOKEN, so the lease is not handed on beside them.
    #[arg(long, value_enum, default_value_t = Orphans::Wait, value_name = "WHAT")]
    orphans: Orphans,
}

/// `--orphans`: the members of the command's group left when it exits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Orphans {
    /// Keep the lease, renewed, until every member has exited (as flock(1)
    /// holds its lock while a child keeps the descriptor).
    Wait,
    /// Send them --signal, SIGKILL after --grace, and release once they are
    /// gone.
    Kill,
}

/// The lease `acquire` and `run` take, and how long they wait for it.
#[derive(Debug, Args)]
pub(crate) struct Grant {
    #[command(flatten)]
    target: Target,
    /// How long the lease lives without renewal; `run` and `acquire
    /// --hold` renew it every third of this.
    #[arg(long, default_value = "30s", value_parser = crate::parse_duration)]
    ttl: Duration,
    /// How long to wait while someone else holds it (0 = give up at once
    /// with exit code 5).
    #[arg(long, default_value = "0s", value_parser = crate::parse_duration)]
    wait: Duration,
}

impl Grant {
    /// The request for the resource with the TTL.
    fn request(&self) -> LeaseRequest {
        LeaseRequest::new(&self.target.resource, self.ttl)
    }
}

#[derive(Debug, Args)]
pub(crate) struct AcquireArgs {
    #[command(flatten)]
    grant: Grant,
    /// The holder id (default: a fresh one, printed).
    #[arg(long)]
    holder: Option<String>,
    /// Keep the lease, renewing it, until interrupted (Ctrl-C), then release.
    #[arg(long)]
    hold: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// A lease named on the command line, for `renew` and `release`.
#[derive(Debug, Args)]
pub(crate) struct LeaseArgs {
    #[command(flatten)]
    target: Target,
    /// The holder id `acquire` printed.
    #[arg(long)]
    holder: String,
    /// The token `acquire` printed.
    #[arg(long)]
    token: FencingToken,
    /// The TTL to renew for.
    #[arg(long, default_value = "30s", value_parser = crate::parse_duration)]
    ttl: Duration,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct HolderArgs {
    #[command(flatten)]
    target: Target,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    grant: Grant,
    #[command(flatten)]
    supervision: Supervision,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<String>,
}

fn lease_of(args: &LeaseArgs) -> Result<Lease, Error> {
    let request = LeaseRequest::new(&args.target.resource, args.ttl)
        .with_holder(HolderId::new(&args.holder)?);
    Ok(Lease::new(&request, args.token, std::time::Instant::now()))
}

pub(crate) async fn acquire(args: AcquireArgs) -> CliResult {
    let issuer = backends::open_issuer(&args.grant.target.issuer).await?;
    let mut request = args.grant.request();
    if let Some(holder) = &args.holder {
        request = request.with_holder(HolderId::new(holder)?);
    }
    let Some(lease) = acquire_or_wait(&*issuer, &request, args.grant.wait).await? else {
        return held(&*issuer, &request.resource).await;
    };
    // Listening before the lease is printed: a Ctrl-C sent as soon as it
    // shows releases it instead of killing us with the lease still held.
    let mut interrupt = args
        .hold
        .then(|| tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()))
        .transpose()?;
    LeaseView::of_lease(&lease).print(args.json);
    if let Some(interrupt) = &mut interrupt {
        eprintln!(
            "fence: holding {:?} with token {}; Ctrl-C releases it",
            lease.resource(),
            lease.token()
        );
        let keep_alive = KeepAlive::spawn(issuer.clone(), lease);
        tokio::select! {
            lost = keep_alive.lost() => {
                eprintln!("fence: {lost}");
                return Ok(ExitCode::from(exit::LEASE_LOST));
            }
            _ = interrupt.recv() => {}
        }
        keep_alive.release().await?;
        eprintln!("fence: released");
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn renew(args: LeaseArgs) -> CliResult {
    let issuer = backends::open_issuer(&args.target.issuer).await?;
    let lease = issuer.renew(&lease_of(&args)?).await?;
    LeaseView::of_lease(&lease).print(args.json);
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn release(args: LeaseArgs) -> CliResult {
    let issuer = backends::open_issuer(&args.target.issuer).await?;
    issuer.release(&lease_of(&args)?).await?;
    if args.json {
        out!(
            "{}",
            serde_json::json!({ "released": true, "resource": args.target.resource, "token": args.token })
        );
    } else {
        out!("released {:?} (token {})", args.target.resource, args.token);
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn holder(args: HolderArgs) -> CliResult {
    let issuer = backends::open_issuer(&args.target.issuer).await?;
    match issuer.holder(&args.target.resource).await? {
        Some(holding) => LeaseView::of_holding(&args.target.resource, &holding).print(args.json),
        None if args.json => out!("null"),
        None => out!("{:?} is free", args.target.resource),
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs a command under a lease: the batch job that must not run twice.
pub(crate) async fn run(args: RunArgs) -> CliResult {
    let issuer = backends::open_issuer(&args.grant.target.issuer).await?;
    let request = args.grant.request();
    let Some(lease) = acquire_or_wait(&*issuer, &request, args.grant.wait).await? else {
        return held(&*issuer, &request.resource).await;
    };

    let mut child = spawn_with_lease(&args.command, &lease, &args.grant.target.issuer)?;
    let keep_alive = KeepAlive::spawn(issuer.clone(), lease);
    match supervise(&mut child, keep_alive.lost(), &args.supervision).await? {
        Ended::Exited(code) => {
            if let Err(e) = keep_alive.release().await {
                eprintln!("fence: release after the command finished: {e}");
            }
            Ok(ExitCode::from(code))
        }
        Ended::Lost => Ok(ExitCode::from(exit::LEASE_LOST)),
    }
}

/// Starts `command` with the lease's `FENCING_TOKEN`, `FENCING_RESOURCE`,
/// `FENCING_HOLDER` and `FENCING_ISSUER` in its environment.
pub(crate) fn spawn_with_lease(
    command: &[String],
    lease: &Lease,
    issuer_url: &str,
) -> Result<Child, String> {
    let (program, rest) = command.split_first().expect("clap requires a command");
    let child = Command::new(program)
        .args(rest)
        // A process group of its own, so that the lease covers the whole
        // job: a shell script's own children too, not just the shell.
        .process_group(0)
        .env("FENCING_TOKEN", lease.token().to_string())
        .env("FENCING_RESOURCE", lease.resource())
        .env("FENCING_HOLDER", lease.holder().as_str())
        .env("FENCING_ISSUER", issuer_url)
        .spawn()
        .map_err(|e| format!("cannot start {program:?}: {e}"))?;
    eprintln!(
        "fence: {:?} held with token {}; running {program}",
        lease.resource(),
        lease.token()
    );
    Ok(child)
}

/// How a supervised command ended.
pub(crate) enum Ended {
    /// On its own, with this exit code (128 + signal if a signal ended it),
    /// and every member of its process group is gone.
    Exited(u8),
    /// The lease was lost: the command's group was signalled, killed if it
    /// did not stop within the grace period, and is gone.
    Lost,
}

/// Waits for `child` and the rest of its process group while the lease is
/// kept, so that the lease is given up only when no member that holds its
/// token is left: passes Ctrl-C and SIGTERM on to the group; when the
/// command exits first, waits for the others or ends them (`--orphans`);
/// when `lost` resolves, sends the group the configured signal and kills
/// the group after the grace period, whatever the command itself did.
pub(crate) async fn supervise(
    child: &mut Child,
    lost: impl Future<Output = Lost>,
    supervision: &Supervision,
) -> std::io::Result<Ended> {
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(|id| Group(Pid::from_raw(id)))
        .ok_or_else(|| std::io::Error::other("the command has no pid"))?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::pin!(lost);
    let mut code = None;
    let mut was_lost = false;
    // Once the group has been asked to stop: when it is killed.
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let mut probe = PROBE_FIRST;
    let stop = |kill_at: &mut Option<Instant>| {
        if kill_at.is_none() {
            group.signal(supervision.signal);
            *kill_at = Some(Instant::now() + supervision.grace);
        }
    };

    loop {
        tokio::select! {
            status = child.wait(), if code.is_none() => {
                let status = exit_code(status?);
                code = Some(status);
                if !group.alive() {
                    break;
                }
                match supervision.orphans {
                    _ if was_lost => {}
                    Orphans::Wait => eprintln!(
                        "fence: the command exited ({status}) but its process group still runs; \
                         keeping the lease until every member has exited (--orphans wait)"
                    ),
                    Orphans::Kill => {
                        eprintln!(
                            "fence: the command exited ({status}); sending {} to the rest of its \
                             process group (--orphans kill)",
                            supervision.signal
                        );
                        stop(&mut kill_at);
                    }
                }
            }
            lost = &mut lost, if !was_lost => {
                eprintln!(
                    "fence: {lost}; sending {} to the command's process group",
                    supervision.signal
                );
                stop(&mut kill_at);
                was_lost = true;
            }
            () = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() && !killed => {
                eprintln!(
                    "fence: the command's process group did not stop within {:?}; killing it",
                    supervision.grace
                );
                group.signal(Signal::SIGKILL);
                // In case the command left its own group.
                let _ = child.start_kill();
                killed = true;
            }
            // Only a probe tells when the last member is gone (it need not
            // be fence's child); the command counts until it is reaped.
            () = tokio::time::sleep(probe), if code.is_some() => {
                if !group.alive() {
                    break;
                }
                probe = (probe * 2).min(PROBE_MAX);
            }
            // Pass interrupts on, then wait for the group as usual.
            _ = tokio::signal::ctrl_c() => group.signal(Signal::SIGINT),
            _ = terminate.recv() => group.signal(Signal::SIGTERM),
        }
    }
    Ok(match code {
        Some(code) if !was_lost => Ended::Exited(code),
        _ => Ended::Lost,
    })
}

/// How soon after the command's exit the group is first probed, and the
/// longest gap between probes.
const PROBE_FIRST: Duration = Duration::from_millis(10);
const PROBE_MAX: Duration = Duration::from_millis(500);

/// The command's process group: it leads one of its own
/// (`process_group(0)`), so the group's id is its pid.
///
/// A process that leaves the group (`setsid`, `setpgid`, a daemon's double
/// fork) is out of sight: neither waited for nor signalled.
#[derive(Clone, Copy, Debug)]
struct Group(Pid);

impl Group {
    /// Signals every member. Never called once [`alive`](Self::alive) said
    /// no (the loop ends), so a reused group id is not signalled.
    fn signal(self, signal: Signal) {
        let _ = killpg(self.0, signal);
    }

    /// Whether a member of the group can still run.
    fn alive(self) -> bool {
        // EPERM (a member that runs as another user) counts as alive.
        killpg(self.0, None) != Err(Errno::ESRCH) && !only_zombies(self.0)
    }
}

/// Whether every member of group `pgid` that `/proc` shows is a zombie. A
/// zombie still counts for `killpg`, and where pid 1 does not reap orphans
/// (a container without an init) it would keep fence waiting forever; it
/// cannot act. False when unsure: no `/proc`, or no member visible (another
/// user's process under `hidepid`).
fn only_zombies(pgid: Pid) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    let mut members = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp …`: comm may hold spaces and `)`.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let (Some(state), Some(_ppid), Some(pgrp)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if pgrp.parse::<i32>() != Ok(pgid.as_raw()) {
            continue;
        }
        // A main thread that exited shows `Z` while the other threads run.
        let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(1, Iterator::count);
        if !matches!(state, "Z" | "X") || threads > 1 {
            return false;
        }
        members += 1;
    }
    members > 0
}

/// Tries once (`wait` zero) or waits up to `wait`; `None` if still held.
async fn acquire_or_wait(
    issuer: &dyn TokenIssuer,
    request: &LeaseRequest,
    wait: Duration,
) -> Result<Option<Lease>, Error> {
    if wait.is_zero() {
        return issuer.try_acquire(request).await;
    }
    match issuer.acquire(request, wait).await {
        Ok(lease) => Ok(Some(lease)),
        Err(Error::Timeout { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Says who holds the resource and exits with [`exit::HELD`].
async fn held(issuer: &dyn TokenIssuer, resource: &str) -> CliResult {
    let by = issuer.holder(resource).await.ok().flatten();
    let by = by.map_or_else(String::new, |h| {
        format!(" by {} (token {})", h.holder, h.token)
    });
    eprintln!("fence: {resource:?} is held{by}");
    Ok(ExitCode::from(exit::HELD))
}

/// The command's exit code, or 128 + the signal that ended it (as shells do).
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(1)
}
