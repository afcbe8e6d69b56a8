//! `acquire`, `renew`, `release`, `holder` and `run`: leases from the shell.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use std::sync::Arc;

use fencing_tokens::keepalive::Lost;
use fencing_tokens::{
    Error, FencingToken, HolderId, IssuerExt, Lease, LeaseGuard, LeaseRequest, TokenIssuer,
};
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, sleep_until};

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

/// What happens to the command's process group when its lease is lost,
/// and when the command exits before the rest of its group (`run`, `lead`).
#[derive(Debug, Args)]
pub(crate) struct Supervision {
    /// The signal that asks the command's process group to stop: when the
    /// lease is lost, with `--orphans kill`, and after a panic in fence. A
    /// SIGHUP, SIGINT, SIGQUIT or SIGTERM fence gets is passed on as it is.
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
    /// with exit code 121).
    #[arg(long, default_value = "0s", value_parser = crate::parse_duration)]
    wait: Duration,
}

impl Grant {
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
            .wait(self.wait);
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
        let Some(lease) = acquire_or_wait(&*issuer, &request, args.grant.wait).await? else {
            return held(&*issuer, &request.resource).await;
        };
        LeaseView::of_lease(&lease).print(args.json);
        return Ok(ExitCode::SUCCESS);
    }
    // Listening before the lease is taken: a Ctrl-C sent as soon as it
    // shows releases it instead of killing us with the lease still held.
    let mut interrupt = signal(SignalKind::interrupt())?;
    let Some(guard) = args.grant.lock(&issuer, holder).await? else {
        return held(&*issuer, &args.grant.target.resource).await;
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
pub(crate) async fn run(args: RunArgs) -> CliResult {
    let issuer = backends::open_issuer(&args.grant.target.issuer).await?;
    let Some(guard) = args.grant.lock(&issuer, None).await? else {
        return held(&*issuer, &args.grant.target.resource).await;
    };

    // Before the command starts: from then on a signal must not end fence
    // with the command left running unrenewed.
    let mut interrupts = Interrupts::listen()?;
    let mut child = match spawn_with_lease(&args.command, &guard.lease(), &args.grant.target.issuer)
    {
        Ok(child) => child,
        Err(code) => {
            let _ = guard.release().await;
            return Ok(ExitCode::from(code));
        }
    };
    let lease = || (!guard.is_lost()).then(|| guard.lease());
    let held = Held {
        issuer: &*issuer,
        lease: &lease,
    };
    let ended = supervise(
        &mut child,
        guard.lost(),
        &args.supervision,
        &mut interrupts,
        &held,
    )
    .await?;
    match ended {
        Ended::Exited(_) | Ended::Interrupted(_) => {
            if let Err(e) = guard.release().await {
                eprintln!("fence: release after the command finished: {e}");
            }
        }
        Ended::Lost => {}
    }
    Ok(ended.exit_code())
}

/// Starts `command` with the lease's `FENCING_TOKEN`, `FENCING_RESOURCE`,
/// `FENCING_HOLDER` and `FENCING_ISSUER` in its environment, leading a
/// process group of its own. On Linux the kernel kills it (SIGKILL) if
/// fence dies, see [`exec_child`]. Err: the command could not be started,
/// said on stderr; the exit code for it (126, 127 as a shell's).
pub(crate) fn spawn_with_lease(
    command: &[String],
    lease: &Lease,
    issuer_url: &str,
) -> Result<Child, u8> {
    let program = command.first().expect("clap requires a command");
    let mut cmd = trampoline(command);
    cmd.env("FENCING_TOKEN", lease.token().to_string())
        .env("FENCING_RESOURCE", lease.resource())
        .env("FENCING_HOLDER", lease.holder().as_str())
        .env("FENCING_ISSUER", issuer_url)
        // A process group of its own, so that the lease covers the whole
        // job: a shell script's own children too, not just the shell.
        .process_group(0);
    let child = cmd.spawn().map_err(|e| {
        eprintln!("fence: cannot start {program:?}: {e}");
        exit::cannot_start(&e)
    })?;
    eprintln!(
        "fence: {:?} held with token {}; running {program}",
        lease.resource(),
        lease.token()
    );
    Ok(child)
}

/// The process that becomes the command: on Linux fence itself (`fence
/// __exec`, [`exec_child`]), which asks for a parent-death signal and then
/// execs the command (the workspace forbids the `unsafe` a `pre_exec` hook
/// would need).
///
/// The parent-death signal fires when the *thread* that forked the child
/// exits, not the process: this must run on the main thread, which lives
/// as long as fence (`Runtime::block_on` polls `main`'s future there; a
/// tokio worker thread may be retired while fence runs on).
#[cfg(target_os = "linux")]
fn trampoline(command: &[String]) -> Command {
    debug_assert_eq!(std::thread::current().name(), Some("main"));
    let mut cmd = Command::new(own_binary());
    cmd.arg(crate::EXEC_CHILD)
        .arg("--parent")
        .arg(std::process::id().to_string())
        .arg("--")
        .args(command);
    cmd
}

#[cfg(not(target_os = "linux"))]
fn trampoline(command: &[String]) -> Command {
    let (program, rest) = command.split_first().expect("clap requires a command");
    let mut cmd = Command::new(program);
    cmd.args(rest);
    cmd
}

/// This very binary, to start again as a helper.
fn own_binary() -> std::path::PathBuf {
    // /proc/self/exe, read by the forked child, is this binary even if the
    // file was replaced or removed since fence started.
    if cfg!(target_os = "linux") {
        "/proc/self/exe".into()
    } else {
        std::env::current_exe().unwrap_or_else(|_| "fence".into())
    }
}

/// `fence __watch --parent PID --group PGID`: ends the command's group if
/// fence dies without ending it (SIGKILL, the OOM killer), which the
/// parent-death signal does only for the group's leader. Exits once the
/// group is gone; fence kills it when it is done with the group.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// fence's pid.
    #[arg(long)]
    parent: i32,
    /// The command's process group.
    #[arg(long)]
    group: i32,
}

/// How often the watcher looks whether fence is still its parent: the
/// longest a group outlives a killed fence.
const WATCH_EVERY: Duration = Duration::from_millis(50);

/// See [`WatchArgs`]. Kills (SIGKILL, at once: fence is gone, nothing
/// renews the lease and nothing would kill after a grace) every member.
/// The group's id cannot be taken by another group while a member of it
/// lives, and the watcher stops looking once none does.
pub(crate) fn watch_group(args: &WatchArgs) -> ExitCode {
    let (parent, group) = (Pid::from_raw(args.parent), Pid::from_raw(args.group));
    while killpg(group, None) != Err(Errno::ESRCH) {
        // Reparented: fence has died.
        if nix::unistd::getppid() != parent {
            let _ = killpg(group, Signal::SIGKILL);
            break;
        }
        std::thread::sleep(WATCH_EVERY);
    }
    ExitCode::SUCCESS
}

/// `fence __exec --parent PID -- COMMAND…`: what fence's child runs before
/// it becomes the command. Asks the kernel for SIGKILL when fence dies
/// (kept across `exec`), checks that fence did not die before that (it
/// would then never come), and execs the command in place, keeping the pid
/// that leads the group.
#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// fence's pid.
    #[arg(long)]
    parent: i32,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// See [`ExecArgs`]; returns only if the command could not be started.
pub(crate) fn exec_child(args: &ExecArgs) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let (program, rest) = args.command.split_first().expect("clap requires a command");
    #[cfg(target_os = "linux")]
    {
        if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
            eprintln!("fence: cannot ask to be killed with fence (prctl): {e}");
            return ExitCode::from(exit::RUN_FAILED);
        }
        if nix::unistd::getppid() != Pid::from_raw(args.parent) {
            eprintln!("fence: exited before {program:?} could start; not starting it");
            return ExitCode::from(exit::RUN_FAILED);
        }
        // Wait, stopped, for fence to start the watcher of the group
        // ([`Group::go`]): until then the parent-death signal alone covers
        // it, and it reaches this process only, not what the command would
        // have forked. A fence killed meanwhile kills this one stopped.
        let _ = nix::sys::signal::raise(Signal::SIGSTOP);
        if nix::unistd::getppid() != Pid::from_raw(args.parent) {
            return ExitCode::from(exit::RUN_FAILED);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = args.parent;
    let e = std::process::Command::new(program).args(rest).exec();
    eprintln!("fence: cannot start {program:?}: {e}");
    ExitCode::from(exit::cannot_start(&e))
}

/// Blocks SIGTTIN and SIGTTOU in this thread, so in every thread started
/// after it: fence's own writes to the terminal from the background (with
/// `stty tostop`) go through instead of stopping it, and its reads fail.
/// Caught instead, such a signal restarts the write that raised it for
/// ever (the kernel sends it again on every try); left to its default, it
/// stops fence alone while the command's group runs on unrenewed. The
/// command gets the default mask: `std::process::Command` clears it in
/// the child.
pub(crate) fn write_to_the_terminal_in_the_background() {
    use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
    let mut tty = SigSet::empty();
    tty.add(Signal::SIGTTIN);
    tty.add(Signal::SIGTTOU);
    if let Err(e) = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&tty), None) {
        eprintln!("fence: cannot block SIGTTIN and SIGTTOU: {e}");
    }
}

/// The signals fence catches while the command runs: the terminating ones,
/// a closed terminal or ssh session (SIGHUP), Ctrl-C (SIGINT), Ctrl-\
/// (SIGQUIT), `kill` (SIGTERM); and Ctrl-Z (SIGTSTP), which the terminal
/// sends to fence's process group only, never the command's. (SIGTTIN and
/// SIGTTOU are blocked: [`write_to_the_terminal_in_the_background`].)
/// Listened to from before the command starts until fence exits, with one
/// listener each: a listener made anew on each turn of a loop misses the
/// signals that come between two turns.
pub(crate) struct Interrupts([(Signal, tokio::signal::unix::Signal); 5]);

impl Interrupts {
    pub(crate) fn listen() -> std::io::Result<Self> {
        let on = |s: Signal| signal(SignalKind::from_raw(s as i32)).map(|l| (s, l));
        Ok(Self([
            on(Signal::SIGHUP)?,
            on(Signal::SIGINT)?,
            on(Signal::SIGQUIT)?,
            on(Signal::SIGTERM)?,
            on(Signal::SIGTSTP)?,
        ]))
    }

    /// The next signal received.
    async fn recv(&mut self) -> Signal {
        let [(hup, a), (int, b), (quit, c), (term, d), (tstp, e)] = &mut self.0;
        tokio::select! {
            _ = a.recv() => *hup,
            _ = b.recv() => *int,
            _ = c.recv() => *quit,
            _ = d.recv() => *term,
            _ = e.recv() => *tstp,
        }
    }
}

/// Whether `signal` asks fence to stop rather than to end.
fn stops(signal: Signal) -> bool {
    signal == Signal::SIGTSTP
}

/// The lease a supervised group holds, for fence to check when it is
/// continued after a stop, before the group may run again.
pub(crate) struct Held<'a> {
    pub(crate) issuer: &'a dyn TokenIssuer,
    /// The lease as last renewed; None once the keep-alive lost it.
    pub(crate) lease: &'a dyn Fn() -> Option<Lease>,
}

impl Held<'_> {
    /// Whether the lease still stands: not lost, its local deadline not
    /// passed while fence was stopped, and a renewal accepted. A renewal
    /// that fails otherwise is tried again until the deadline. Err: why not.
    async fn confirm(&self) -> Result<(), String> {
        let Some(lease) = (self.lease)() else {
            return Err("the lease was lost".to_owned());
        };
        loop {
            let left = lease.remaining();
            if left.is_zero() {
                return Err("fence was stopped past the lease's deadline".to_owned());
            }
            match tokio::time::timeout(left, self.issuer.renew(&lease)).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e @ Error::LeaseLost { .. })) => return Err(e.to_string()),
                Ok(Err(_)) => tokio::time::sleep(left.min(RENEW_AGAIN)).await,
                Err(_) => {}
            }
        }
    }
}

/// How soon a failed renewal after a stop is tried again.
const RENEW_AGAIN: Duration = Duration::from_millis(100);

/// How a supervised command ended.
pub(crate) enum Ended {
    /// On its own, with this exit code (128 + signal if a signal ended it),
    /// and every member of its process group is gone.
    Exited(u8),
    /// The lease was lost: the command's group was signalled, killed if it
    /// did not stop within the grace period, and is gone.
    Lost,
    /// fence got this signal: the group was sent it, killed if it did not
    /// stop within the grace period, and is gone.
    Interrupted(Signal),
}

impl Ended {
    /// fence's exit code: the command's, [`exit::LEASE_LOST`], or 128 + the
    /// signal fence got (as a shell reports a command that signal ended,
    /// whatever the command made of it).
    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(match *self {
            Self::Exited(code) => code,
            Self::Lost => exit::LEASE_LOST,
            Self::Interrupted(signal) => exit::signalled(signal),
        })
    }
}

/// Waits for `child` and the rest of its process group while the lease is
/// kept, so that the lease is given up only when no member that holds its
/// token is left: when the command exits first, waits for the others or
/// ends them (`--orphans`); when `lost` resolves, sends the group the
/// configured signal; when fence gets one of `interrupts`, passes that
/// signal on (every one of them, as the terminal would have sent it to a
/// command in its own group). Either way the group is killed after the
/// grace period, whatever the command itself did.
pub(crate) async fn supervise(
    child: &mut Child,
    lost: impl Future<Output = Lost>,
    supervision: &Supervision,
    interrupts: &mut Interrupts,
    held: &Held<'_>,
) -> std::io::Result<Ended> {
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(|id| Group(Pid::from_raw(id)))
        .ok_or_else(|| std::io::Error::other("the command has no pid"))?;
    let _on_panic = PanicGuard::arm(group, supervision);
    // Tests only: fence killed a moment after the command's start, before
    // its watcher's; the command must then never run.
    #[cfg(debug_assertions)]
    if std::env::var_os("FENCE_TEST_KILL_BEFORE_WATCH").is_some() {
        std::thread::sleep(Duration::from_millis(300));
        let _ = nix::sys::signal::raise(Signal::SIGKILL);
    }
    let _watcher = group.watch();
    group.go().await;
    // Tests only: a panic elsewhere in fence while the group runs (in the
    // keep-alive, a backend), which tokio alone would survive.
    #[cfg(debug_assertions)]
    if let Some(after) = std::env::var("FENCE_TEST_PANIC_AFTER")
        .ok()
        .and_then(|d| crate::parse_duration(&d).ok())
    {
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            panic!("FENCE_TEST_PANIC_AFTER");
        });
    }
    tokio::pin!(lost);
    let mut interrupted = None;
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
                    _ if was_lost || interrupted.is_some() => {}
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
            signal = interrupts.recv() => {
                if stops(signal) {
                    // Stopping fence alone would leave the group running
                    // with nothing renewing or watching its lease.
                    eprintln!(
                        "fence: got {signal}; stopping the command's process group, then fence \
                         (continued, fence renews the lease before it continues the group)"
                    );
                    group.signal(Signal::SIGSTOP);
                    let _ = nix::sys::signal::kill(Pid::this(), Signal::SIGSTOP);
                    // Continued. The lease may have run out meanwhile and
                    // another holder be writing: the group runs again
                    // only once a renewal says the lease is still ours.
                    let confirmed = if was_lost {
                        Err("the lease was lost".to_owned())
                    } else {
                        held.confirm().await
                    };
                    match confirmed {
                        Ok(()) => group.signal(Signal::SIGCONT),
                        Err(why) => {
                            // It cannot act on --signal without running,
                            // and running is writing on a lost lease.
                            eprintln!(
                                "fence: continued, but {why}; killing the stopped command's \
                                 process group (SIGKILL) without letting it run again"
                            );
                            group.signal(Signal::SIGKILL);
                            let _ = child.start_kill();
                            was_lost = true;
                            killed = true;
                            kill_at.get_or_insert_with(Instant::now);
                        }
                    }
                    continue;
                }
                if interrupted.is_none() {
                    eprintln!(
                        "fence: got {signal}; passing it on to the command's process group \
                         (SIGKILL after {:?}), then releasing",
                        supervision.grace
                    );
                }
                group.signal(signal);
                kill_at.get_or_insert_with(|| Instant::now() + supervision.grace);
                interrupted.get_or_insert(signal);
            }
        }
    }
    Ok(match (code, interrupted) {
        _ if was_lost => Ended::Lost,
        (_, Some(signal)) => Ended::Interrupted(signal),
        (Some(code), None) => Ended::Exited(code),
        (None, None) => Ended::Lost,
    })
}

/// The group a panic must end: fence's supervision is then in doubt
/// (a panicked keep-alive renews nothing), and a process that dies leaves
/// the group running unrenewed. Set while [`supervise`] runs.
static PANIC_GROUP: std::sync::Mutex<Option<(Group, Signal, Duration)>> =
    std::sync::Mutex::new(None);

/// Arms the panic hook for one supervised group; disarms when dropped.
struct PanicGuard;

impl PanicGuard {
    fn arm(group: Group, supervision: &Supervision) -> Self {
        *PANIC_GROUP
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((group, supervision.signal, supervision.grace));
        Self
    }
}

impl Drop for PanicGuard {
    fn drop(&mut self) {
        PANIC_GROUP
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }
}

/// Installs a panic hook that, after the usual report, ends the supervised
/// group as a lost lease does (--signal, SIGKILL after --grace) and exits
/// [`exit::RUN_FAILED`]; the lease is not released (it expires). A panic in
/// any thread counts: tokio would keep the process alive after a task's.
pub(crate) fn end_the_group_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        let armed = PANIC_GROUP
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let Some((group, signal, grace)) = armed else {
            return;
        };
        eprintln!("fence: panicked; sending {signal} to the command's process group");
        group.signal(signal);
        let deadline = std::time::Instant::now() + grace;
        while group.alive() && std::time::Instant::now() < deadline {
            std::thread::sleep(PROBE_FIRST);
        }
        group.signal(Signal::SIGKILL);
        std::process::exit(i32::from(exit::RUN_FAILED));
    }));
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
    /// Starts [`watch_group`] on the group; killed when dropped. In a
    /// process group of its own, so that the terminal's signals meant for
    /// fence do not end it. None (said on stderr) if it cannot start: the
    /// leader's parent-death signal is then all that is left.
    fn watch(self) -> Option<Child> {
        Command::new(own_binary())
            .arg(crate::WATCH_GROUP)
            .arg("--parent")
            .arg(std::process::id().to_string())
            .arg("--group")
            .arg(self.0.to_string())
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .inspect_err(|e| {
                eprintln!(
                    "fence: cannot start the watcher that ends the command's group if fence \
                     is killed: {e}"
                );
            })
            .ok()
    }

    /// Lets the command run once its watcher is there: `fence __exec` stops
    /// itself before it becomes the command ([`exec_child`]). A continue
    /// sent before that stop would be lost, so it waits (bounded) until the
    /// leader is stopped.
    async fn go(self) {
        if !cfg!(target_os = "linux") {
            return;
        }
        let stat = format!("/proc/{}/stat", self.0);
        for _ in 0..5000 {
            // The state is the field after the command's name, in parens.
            let state = std::fs::read_to_string(&stat).ok().and_then(|s| {
                let (_, rest) = s.rsplit_once(')')?;
                rest.split_whitespace().next().map(str::to_owned)
            });
            match state.as_deref() {
                Some("T" | "t" | "Z" | "X") | None => break,
                _ => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
        let _ = nix::sys::signal::kill(self.0, Signal::SIGCONT);
    }

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
