//! The process group `run` and `lead` run their command in, under a lease:
//! starting it (`fence __exec`, with a parent-death signal), watching it
//! from outside (`fence __watch`), handing it the terminal, passing
//! fence's signals on, stopping with it, and ending it when the lease is
//! lost or fence panics.

mod on_panic;
mod outcome;
mod signals;
mod spawn;
mod terminal;

pub(crate) use on_panic::end_the_group_on_panic;
pub(crate) use outcome::{Outcome, StatusFile};
pub(crate) use signals::{Interrupts, write_to_the_terminal_in_the_background};
pub(crate) use spawn::{Leader, helper, spawn_with_lease};

use std::time::Duration;

use clap::Args;
use fencing_tokens::keepalive::Lost;
use fencing_tokens::{Error, Lease, TokenIssuer};
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, sleep_until};

use crate::exit;
use on_panic::PanicGuard;
use signals::stops;
use spawn::own_binary;

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
    /// The command was never started (not found, not executable): the
    /// leader exited with this code of fence's, and had no other member.
    NotStarted(u8),
}

impl Ended {
    /// fence's exit code: the command's, [`exit::LEASE_LOST`], or 128 + the
    /// signal fence got (as a shell reports a command that signal ended,
    /// whatever the command made of it).
    pub(crate) fn outcome(&self) -> Outcome {
        match *self {
            Self::Exited(code) => Outcome::command(code),
            Self::Lost => Outcome::fence(exit::LEASE_LOST),
            Self::Interrupted(signal) => Outcome::fence(exit::signalled(signal)),
            Self::NotStarted(code) => Outcome::fence(code),
        }
    }
}

/// Waits for `child` and the rest of its process group while the lease is
/// kept, so that the lease is given up only when no member that holds its
/// token is left: when the command exits first, waits for the others or
/// ends them (`--orphans`); when `lost` resolves, sends the group the
/// configured signal; when fence gets one of `interrupts`, passes that
/// signal on (every one of them, as the terminal would have sent it to a
/// command in its own group). Either way the group is killed after the
/// grace period, whatever the command itself did. Err (fence cannot wait
/// for the command) only once the group has been ended the same way.
///
/// At a terminal, the group gets it while fence is in its foreground
/// ([`terminal`]), and fence takes it back on every way out of here. When
/// the group stops for job control (Ctrl-Z, a read or write from the
/// background), fence stops too, so that its shell sees the job stopped
/// and `fg` or `bg` it: see [`Group::stop_with`].
pub(crate) async fn supervise(
    leader: &mut Leader,
    lost: impl Future<Output = Lost>,
    supervision: &Supervision,
    interrupts: &mut Interrupts,
    held: &Held<'_>,
) -> std::io::Result<Ended> {
    let Leader { child, report } = leader;
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
    // Before the watcher's start, which gives the leader time to stop:
    // a stop that came before the listener would wake nothing.
    let mut children = signal(SignalKind::child()).ok();
    let _watcher = group.watch();
    // Before the command runs (it waits, stopped, for `go`): its first
    // read of the terminal must find it its own.
    let _terminal = terminal::Handover;
    terminal::give(group.0);
    group.go(&mut children).await;
    let at_a_terminal = terminal::at_a_terminal();
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
    // fence could not wait for the command: the group is ended, then fence fails.
    let mut failed: Option<std::io::Error> = None;
    let mut probe = PROBE_FIRST;
    let stop = |kill_at: &mut Option<Instant>| {
        if kill_at.is_none() {
            group.signal(supervision.signal);
            *kill_at = Some(Instant::now() + supervision.grace);
        }
    };

    loop {
        // Set when the group is to stop, and fence with it.
        let mut stopping = false;
        tokio::select! {
            status = child.wait(), if code.is_none() && failed.is_none() => {
                #[cfg(debug_assertions)]
                let status = status.and_then(wait_fails_in_tests);
                let status = match status {
                    Ok(status) => exit_code(status),
                    Err(e) => {
                        // Left running, the group would hold the token
                        // with nothing to renew or watch its lease.
                        eprintln!(
                            "fence: cannot wait for the command: {e}; sending {} to its process \
                             group",
                            supervision.signal
                        );
                        stop(&mut kill_at);
                        failed = Some(e);
                        continue;
                    }
                };
                if let Some(own) = report.not_started() {
                    // `fence __exec` said why on stderr; it forked nothing.
                    return Ok(Ended::NotStarted(own));
                }
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
            () = tokio::time::sleep(probe), if code.is_some() || failed.is_some() => {
                if !group.alive() {
                    break;
                }
                probe = (probe * 2).min(PROBE_MAX);
            }
            // Only the leader's stops: the kernel tells fence of its own
            // child's, and job control stops every member alike.
            () = next(&mut children), if at_a_terminal && code.is_none() && failed.is_none() => {
                let Some(signal) = group.stopped_for_job_control() else {
                    continue;
                };
                if !terminal::job_control_above() {
                    if signal == Signal::SIGTSTP {
                        // As the kernel discards a stop that no shell
                        // could undo; rather than leave the terminal to a
                        // stopped group and fence waiting on it.
                        eprintln!(
                            "fence: the command stopped ({signal}), but nothing above fence \
                             would continue it (no job control); continuing it"
                        );
                        group.signal(Signal::SIGCONT);
                    } else if kill_at.is_none() {
                        // Blocked for it where this could happen
                        // (`__exec` without `--job-control`), unless the
                        // terminal changed hands since or the command
                        // unblocked them: continued, it would stop again
                        // at its next try, and stopped, nothing would
                        // ever continue it while fence renews the lease.
                        eprintln!(
                            "fence: the command stopped ({signal}) using the terminal from the                              background, and nothing above fence would continue it (no job                              control); sending {} to its process group",
                            supervision.signal
                        );
                        stop(&mut kill_at);
                        group.signal(Signal::SIGCONT);
                    } else {
                        // Let it act on the signal; killed after --grace.
                        group.signal(Signal::SIGCONT);
                    }
                    continue;
                }
                eprintln!(
                    "fence: the command stopped ({signal}); stopping fence too (continued, fence \
                     renews the lease before it continues the command)"
                );
                group.settle().await;
                stopping = true;
            }
            signal = interrupts.recv() => {
                if stops(signal) {
                    // Stopping fence alone would leave the group running
                    // with nothing renewing or watching its lease.
                    eprintln!(
                        "fence: got {signal}; stopping the command's process group, then fence \
                         (continued, fence renews the lease before it continues the group)"
                    );
                    stopping = true;
                } else {
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
        if stopping && let Err(why) = group.stop_with(held, was_lost).await {
            // It cannot act on --signal without running, and running is
            // writing on a lost lease.
            eprintln!(
                "fence: continued, but {why}; killing the stopped command's process group \
                 (SIGKILL) without letting it run again"
            );
            group.signal(Signal::SIGKILL);
            let _ = child.start_kill();
            was_lost = true;
            killed = true;
            kill_at.get_or_insert_with(Instant::now);
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(match (code, interrupted) {
        _ if was_lost => Ended::Lost,
        (_, Some(signal)) => Ended::Interrupted(signal),
        (Some(code), None) => Ended::Exited(code),
        (None, None) => Ended::Lost,
    })
}

/// How soon after the command's exit the group is first probed, and the
/// longest gap between probes.
const PROBE_FIRST: Duration = Duration::from_millis(10);
const PROBE_MAX: Duration = Duration::from_millis(500);

/// How long the group's members have to stop after its leader did for job
/// control, before fence stops them.
const SETTLE: Duration = Duration::from_secs(1);

/// The next SIGCHLD, or never without a listener.
async fn next(children: &mut Option<tokio::signal::unix::Signal>) {
    match children {
        Some(children) => {
            children.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// The command's process group: it leads one of its own
/// (`process_group(0)`), so the group's id is its pid.
///
/// A process that leaves the group (`setsid`, `setpgid`, a daemon's double
/// fork) is out of sight: neither waited for nor signalled.
#[derive(Clone, Copy, Debug)]
struct Group(Pid);

impl Group {
    /// Starts `fence __watch` ([`helper`]) on the group; killed when dropped. In a
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
    /// itself before it becomes the command ([`helper`]). A continue
    /// sent before that stop would be lost, so it waits (bounded) until the
    /// leader is stopped.
    ///
    /// `children`: SIGCHLD, which the kernel sends fence when its child
    /// stops, to look again at once rather than at the next poll (every
    /// `run` waits here for its helper to start).
    async fn go(self, children: &mut Option<tokio::signal::unix::Signal>) {
        if !cfg!(target_os = "linux") {
            return;
        }
        let stat = format!("/proc/{}/stat", self.0);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            // The state is the field after the command's name, in parens.
            let state = std::fs::read_to_string(&stat).ok().and_then(|s| {
                let (_, rest) = s.rsplit_once(')')?;
                rest.split_whitespace().next().map(str::to_owned)
            });
            // `T` only: a traced child (`strace -f`) shows `t` at each
            // syscall, before it has stopped itself, and a continue sent
            // then would be lost and leave it stopped for ever. Traced,
            // its own stop shows `t` too: it gets the deadline's continue.
            if matches!(state.as_deref(), Some("T" | "Z" | "X") | None)
                || Instant::now() >= deadline
            {
                break;
            }
            // Another child's SIGCHLD (the watcher's) only means one more look.
            tokio::select! {
                () = next(children) => {}
                () = tokio::time::sleep(Duration::from_millis(1)) => {}
            }
        }
        let _ = nix::sys::signal::kill(self.0, Signal::SIGCONT);
    }

    /// The job-control signal (SIGTSTP, SIGTTIN, SIGTTOU) that stopped the
    /// leader since fence last looked, if one did; a SIGSTOP (a debugger,
    /// `kill -STOP`, fence's own) is none, as a stop fence already saw.
    /// Only while the leader is not reaped: its pid is still its own.
    fn stopped_for_job_control(self) -> Option<Signal> {
        #[cfg(target_os = "linux")]
        {
            use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
            // WSTOPPED without WEXITED: its exit stays for tokio to reap.
            let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG;
            match waitid(Id::Pid(self.0), flags) {
                Ok(WaitStatus::Stopped(_, signal))
                    if matches!(signal, Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU) =>
                {
                    Some(signal)
                }
                _ => None,
            }
        }
        #[cfg(not(target_os = "linux"))]
        None
    }

    /// Waits, up to [`SETTLE`], until every member has stopped after the
    /// leader: one that handles SIGTSTP (an editor putting the terminal
    /// back) stops itself once done, and fence's SIGSTOP to stragglers
    /// would cut that short.
    async fn settle(self) {
        let deadline = Instant::now() + SETTLE;
        while !all_stopped(self.0) && Instant::now() < deadline {
            tokio::time::sleep(PROBE_FIRST).await;
        }
    }

    /// Stops the group (any member still running) and fence, the terminal
    /// given back to fence's shell first; continued (`fg`, `bg`, SIGCONT),
    /// renews the lease, gives the group the terminal again if fence is
    /// now in its foreground (not after `bg`), and continues the group.
    /// Err: why the group must not run again; it is left stopped.
    async fn stop_with(self, held: &Held<'_>, was_lost: bool) -> Result<(), String> {
        self.signal(Signal::SIGSTOP);
        terminal::take_back();
        let _ = nix::sys::signal::kill(Pid::this(), Signal::SIGSTOP);
        // Continued. The lease may have run out meanwhile and another
        // holder be writing: the group runs again only once a renewal
        // says the lease is still ours.
        if was_lost {
            return Err("the lease was lost".to_owned());
        }
        held.confirm().await?;
        terminal::give(self.0);
        self.signal(Signal::SIGCONT);
        Ok(())
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
    let members = members(pgid);
    !members.is_empty()
        && members.iter().all(|member| {
            // A main thread that exited shows `Z` while the other threads run.
            let threads =
                std::fs::read_dir(format!("/proc/{}/task", member.pid)).map_or(1, Iterator::count);
            member.gone() && threads <= 1
        })
}

/// Whether every member of group `pgid` that `/proc` shows and that has
/// not exited is stopped. True when unsure (no `/proc`): fence then stops
/// the group itself.
fn all_stopped(pgid: Pid) -> bool {
    members(pgid)
        .iter()
        .all(|member| member.gone() || matches!(member.state, 'T' | 't'))
}

/// A process of a group, as `/proc` shows it.
struct Member {
    pid: String,
    /// `R`, `S`, `T` (stopped), `Z` (exited, not reaped)…
    state: char,
}

impl Member {
    fn gone(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// The members of group `pgid` that `/proc` shows: none without `/proc`.
fn members(pgid: Pid) -> Vec<Member> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut members = Vec::new();
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
        let Some(state) = state.chars().next() else {
            continue;
        };
        members.push(Member {
            pid: pid.to_owned(),
            state,
        });
    }
    members
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

/// Tests only: `FENCE_TEST_WAIT_FAILS` makes waiting for the command fail
/// once it has exited (what ECHILD does when something else reaped it),
/// to show the group is ended all the same. Debug builds only.
#[cfg(debug_assertions)]
fn wait_fails_in_tests(
    status: std::process::ExitStatus,
) -> std::io::Result<std::process::ExitStatus> {
    if std::env::var_os("FENCE_TEST_WAIT_FAILS").is_some() {
        return Err(std::io::Error::other("FENCE_TEST_WAIT_FAILS"));
    }
    Ok(status)
}
