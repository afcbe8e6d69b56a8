//! `acquire`, `renew`, `release`, `holder` and `run`: leases from the shell.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use fencing::keepalive::{KeepAlive, Lost};
use fencing::{Error, FencingToken, HolderId, Lease, LeaseRequest, TokenIssuer};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

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

/// What happens to a command whose lease is lost (`run`, `lead`).
#[derive(Debug, Args)]
pub(crate) struct Supervision {
    /// The signal sent to the command when the lease is lost.
    #[arg(long, default_value = "SIGTERM")]
    signal: Signal,
    /// How long the command may take to stop after that signal before it
    /// is killed.
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    grace: Duration,
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
    LeaseView::of_lease(&lease).print(args.json);
    if args.hold {
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
            _ = tokio::signal::ctrl_c() => {}
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
        // A process group of its own, so that a lost lease stops the whole
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
    /// On its own, with this exit code (128 + signal if a signal ended it).
    Exited(u8),
    /// The lease was lost: the command was signalled (and killed if it did
    /// not stop within the grace period).
    Lost,
}

/// Waits for `child` while its lease is kept: passes Ctrl-C and SIGTERM on
/// to its process group; when `lost` resolves, sends the group the
/// configured signal and kills the group after the grace period.
pub(crate) async fn supervise(
    child: &mut Child,
    lost: impl Future<Output = Lost>,
    supervision: &Supervision,
) -> std::io::Result<Ended> {
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::pin!(lost);
    let lost = loop {
        tokio::select! {
            status = child.wait() => return Ok(Ended::Exited(exit_code(status?))),
            lost = &mut lost => break lost,
            // Pass interrupts on, then wait for the command as usual.
            _ = tokio::signal::ctrl_c() => signal_child(pid, Signal::SIGINT),
            _ = terminate.recv() => signal_child(pid, Signal::SIGTERM),
        }
    };

    eprintln!(
        "fence: {lost}; sending {} to the command",
        supervision.signal
    );
    signal_child(pid, supervision.signal);
    if tokio::time::timeout(supervision.grace, child.wait())
        .await
        .is_err()
    {
        eprintln!(
            "fence: the command did not stop within {:?}; killing it",
            supervision.grace
        );
        signal_child(pid, Signal::SIGKILL);
        let _ = child.kill().await;
    }
    Ok(Ended::Lost)
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

/// Signals the command's process group (it leads one of its own).
fn signal_child(pid: Option<Pid>, signal: Signal) {
    if let Some(pid) = pid {
        let _ = killpg(pid, signal);
    }
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
