//! `acquire`, `renew`, `release`, `holder` and `run`: leases from the shell.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use std::sync::Arc;

use fencing_tokens::{
    Error, FencingToken, HolderId, IssuerExt, Lease, LeaseGuard, LeaseRequest, TokenIssuer,
};
use tokio::signal::unix::{SignalKind, signal};

use crate::group::{
    Ended, Held, Interrupts, Outcome, StatusFile, Supervision, spawn_with_lease, supervise,
};
use crate::output::LeaseView;
use crate::{CliResult, backends, exit};

/// Where the lease lives.
#[derive(Debug, Args)]
pub(crate) struct Target {
    /// The lock service, by URL (or FENCE_ISSUER).
    // Hidden: --help would print the URL, password and all.
    #[arg(long, env = "FENCE_ISSUER", hide_env_values = true, value_name = "URL")]
    pub(crate) issuer: String,
    /// The resource the lease is on.
    #[arg(long, value_name = "NAME")]
    pub(crate) resource: String,
}

/// Past a TTL of watching, how long a `--wait 0` on an issuer that needs
/// watching goes on: a waiter polls a bucket's record at most a second
/// apart.
const WATCH_SLACK: Duration = Duration::from_millis(1500);

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
    /// with exit code 121; on an issuer that can tell an abandoned lease
    /// only by watching it, the bucket lease and DynamoDB, 0 watches it for
    /// one --ttl first).
    #[arg(long, default_value = "0s", value_parser = crate::parse_duration)]
    wait: Duration,
}

impl Grant {
    /// How long to wait on `issuer`: `--wait`, except that "give up at
    /// once" watches a held lease for one TTL (and a poll's pause) on an
    /// issuer that tells a holder gone only by watching its lease
    /// unchanged for a TTL of the waiter's own clock. Each `fence` is a new
    /// process that has watched nothing: a one-try acquire there would
    /// never take over the lease of a holder that crashed.
    fn wait_on(&self, issuer: &dyn TokenIssuer) -> Duration {
        if self.wait.is_zero() && issuer.expiry_needs_watching() {
            self.ttl + WATCH_SLACK
        } else {
            self.wait
        }
    }

    /// The request for the resource with the TTL.
    fn request(&self) -> LeaseRequest {
        LeaseRequest::new(&self.target.resource, self.ttl)
    }

    /// Holds the resource under the guard (renewed in the background),
    /// waiting as long as `--wait` says; `None` if it is still held then.
    async fn lock(
        &self,
        issuer: &Arc<dyn TokenIssuer>,
        holder: Option<HolderId>,
    ) -> Result<Option<LeaseGuard>, Error> {
        let mut lock = issuer
            .lock(&self.target.resource)
            .ttl(self.ttl)
            .wait(self.wait_on(&**issuer));
        if let Some(holder) = holder {
            lock = lock.holder(holder);
        }
        match lock.await {
            Ok(guard) => Ok(Some(guard)),
            Err(Error::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
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
    #[command(flatten)]
    status_file: StatusFile,
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
    let holder = args.holder.as_deref().map(HolderId::new).transpose()?;
    if !args.hold {
        let mut request = args.grant.request();
        if let Some(holder) = holder {
            request = request.with_holder(holder);
        }
        let wait = args.grant.wait_on(&*issuer);
        let Some(lease) = acquire_or_wait(&*issuer, &request, wait).await? else {
            say_held(&*issuer, &request.resource).await;
            return Ok(ExitCode::from(exit::HELD));
        };
        LeaseView::of_lease(&lease).print(args.json);
        return Ok(ExitCode::SUCCESS);
    }
    // Listening before the lease is taken: a Ctrl-C sent as soon as it
    // shows releases it instead of killing us with the lease still held.
    let mut interrupt = signal(SignalKind::interrupt())?;
    let Some(guard) = args.grant.lock(&issuer, holder).await? else {
        say_held(&*issuer, &args.grant.target.resource).await;
        return Ok(ExitCode::from(exit::HELD));
    };
    let lease = guard.lease();
    LeaseView::of_lease(&lease).print(args.json);
    eprintln!(
        "fence: holding {:?} with token {}; Ctrl-C releases it",
        lease.resource(),
        lease.token()
    );
    tokio::select! {
        lost = guard.lost() => {
            eprintln!("fence: {lost}");
            return Ok(ExitCode::from(exit::LEASE_LOST));
        }
        _ = interrupt.recv() => {}
    }
    guard.release().await?;
    eprintln!("fence: released");
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
/// `--status-file` gets whose exit code fence exits with, whichever way.
pub(crate) async fn run(args: RunArgs) -> CliResult {
    args.status_file.around(run_under_lease(&args)).await
}

/// [`run`], but for the status file.
async fn run_under_lease(args: &RunArgs) -> Result<Outcome, Box<dyn std::error::Error>> {
    let issuer = backends::open_issuer(&args.grant.target.issuer).await?;
    let Some(guard) = args.grant.lock(&issuer, None).await? else {
        say_held(&*issuer, &args.grant.target.resource).await;
        return Ok(Outcome::fence(exit::HELD));
    };

    // Before the command starts: from then on a signal must not end fence
    // with the command left running unrenewed.
    let mut interrupts = Interrupts::listen()?;
    let mut leader =
        match spawn_with_lease(&args.command, &guard.lease(), &args.grant.target.issuer) {
            Ok(leader) => leader,
            Err(code) => {
                let _ = guard.release().await;
                return Ok(Outcome::fence(code));
            }
        };
    let lease = || (!guard.is_lost()).then(|| guard.lease());
    let held = Held {
        issuer: &*issuer,
        lease: &lease,
    };
    let ended = supervise(
        &mut leader,
        guard.lost(),
        &args.supervision,
        &mut interrupts,
        &held,
    )
    .await?;
    match ended {
        Ended::Exited(_) | Ended::Interrupted(_) | Ended::NotStarted(_) => {
            if let Err(e) = guard.release().await {
                eprintln!("fence: release after the command finished: {e}");
            }
        }
        Ended::Lost => {}
    }
    Ok(ended.outcome())
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

/// Says who holds the resource (the caller exits with [`exit::HELD`]).
async fn say_held(issuer: &dyn TokenIssuer, resource: &str) {
    let by = issuer.holder(resource).await.ok().flatten();
    let by = by.map_or_else(String::new, |h| {
        format!(" by {} (token {})", h.holder, h.token)
    });
    eprintln!("fence: {resource:?} is held{by}");
}
