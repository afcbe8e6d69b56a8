//! Starting the command as the leader of a process group of its own that
//! dies with fence: the `fence __exec` trampoline the child runs first, and
//! the `fence __watch` helper that ends the group if fence is killed.

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser};
use fencing_tokens::Lease;
use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg, pthread_sigmask};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::exit;

/// The command's process, which leads its group, and the pipe on which its
/// `fence __exec` says that it could not become the command.
pub(crate) struct Leader {
    pub(crate) child: Child,
    pub(crate) report: Report,
}

/// The read end of [`Leader`]'s pipe (non-blocking). The write end closes
/// when `__exec` execs the command (close-on-exec), or first carries one
/// byte, the exit code `__exec` exits with, when it cannot. None: no pipe
/// (fence could not make one; said on stderr).
pub(crate) struct Report(Option<std::fs::File>);

impl Report {
    /// Once the leader has exited: the exit code of fence's own it exited
    /// with (126, 127, 120) if it never became the command, None if the
    /// code is the command's. The write end is closed by then: whatever
    /// `__exec` wrote is there.
    pub(crate) fn not_started(&mut self) -> Option<u8> {
        use std::io::Read;
        let mut code = [0; 1];
        match self.0.as_mut()?.read(&mut code) {
            Ok(1) => Some(code[0]),
            _ => None,
        }
    }
}

/// Starts `command` with the lease's `FENCING_TOKEN`, `FENCING_RESOURCE`,
/// `FENCING_HOLDER` and `FENCING_ISSUER` in its environment, leading a
/// process group of its own. On Linux the kernel kills it (SIGKILL) if
/// fence dies, see [`exec_child`]. Err: the command could not be started,
/// said on stderr; the exit code for it (126, 127 as a shell's); on Linux
/// that is known only once the leader exits (`Leader::not_started`).
pub(crate) fn spawn_with_lease(
    command: &[String],
    lease: &Lease,
    issuer_url: &str,
) -> Result<Leader, u8> {
    let program = command.first().expect("clap requires a command");
    let mut cmd = trampoline();
    let (report, report_end) = report_pipe()
        .inspect_err(|e| {
            eprintln!(
                "fence: cannot make the pipe on which the command's start is reported: {e}; \
                 a command not found or not executable will look as if it exited 127 or 126"
            );
        })
        .ok()
        .unzip();
    if let Some(end) = &report_end {
        cmd.arg("--report-fd").arg(end.as_raw_fd().to_string());
    }
    if super::terminal::stops_can_be_undone() {
        cmd.arg("--job-control");
    }
    cmd.arg("--").args(command);
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
    // Only `__exec` may hold the write end: at its exit or exec the
    // pipe then reads to its end.
    drop(report_end);
    eprintln!(
        "fence: {:?} held with token {}; running {program}",
        lease.resource(),
        lease.token()
    );
    Ok(Leader {
        child,
        report: Report(report.map(std::fs::File::from)),
    })
}

/// The pipe of [`Leader`]: both ends non-blocking, the read end
/// close-on-exec, the write end not, for the child to inherit.
fn report_pipe() -> nix::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    fcntl(&write, FcntlArg::F_SETFD(FdFlag::empty()))?;
    Ok((read, write))
}

/// The process that becomes the command: fence itself (`fence __exec`,
/// [`exec_child`]), which on Linux asks for a parent-death signal, and
/// everywhere gives the command the default signal mask before it execs
/// it (the workspace forbids the `unsafe` a `pre_exec` hook would need).
///
/// The parent-death signal fires when the *thread* that forked the child
/// exits, not the process: this must run on the main thread, which lives
/// as long as fence (`Runtime::block_on` polls `main`'s future there; a
/// tokio worker thread may be retired while fence runs on).
fn trampoline() -> Command {
    #[cfg(target_os = "linux")]
    debug_assert_eq!(std::thread::current().name(), Some("main"));
    let mut cmd = Command::new(own_binary());
    cmd.arg(crate::EXEC_CHILD)
        .arg("--parent")
        .arg(std::process::id().to_string());
    cmd
}

/// This very binary, to start again as a helper.
pub(super) fn own_binary() -> std::path::PathBuf {
    // /proc/self/exe, read by the forked child, is this binary even if the
    // file was replaced or removed since fence started.
    if cfg!(target_os = "linux") {
        "/proc/self/exe".into()
    } else {
        std::env::current_exe().unwrap_or_else(|_| "fence".into())
    }
}

/// The hidden subcommands, parsed apart from `fence`'s own command line:
/// building that one (every subcommand, the backends' URL grammar for the
/// help text) is work a helper started on each `run` would pay for nothing.
#[derive(Debug, Parser)]
#[command(name = "fence")]
enum Helper {
    /// What `run` and `lead` start: it asks to be killed with fence, then
    /// becomes the command.
    #[command(name = crate::EXEC_CHILD)]
    ExecChild(ExecArgs),
    /// What `run` and `lead` start beside the command: it ends the
    /// command's process group if fence is killed.
    #[command(name = crate::WATCH_GROUP)]
    WatchGroup(WatchArgs),
}

/// Runs `fence __exec` or `fence __watch` if that is what this process
/// is, with nothing else started first (no runtime, no thread: they only
/// ask the kernel, exec, or poll); None for any other command line.
pub(crate) fn helper() -> Option<ExitCode> {
    let first = std::env::args_os().nth(1)?;
    if first != crate::EXEC_CHILD && first != crate::WATCH_GROUP {
        return None;
    }
    Some(match Helper::parse() {
        Helper::ExecChild(args) => exec_child(&args),
        Helper::WatchGroup(args) => watch_group(&args),
    })
}

/// `fence __watch --parent PID --group PGID`: ends the command's group if
/// fence dies without ending it (SIGKILL, the OOM killer), which the
/// parent-death signal does only for the group's leader. Exits once the
/// group is gone; fence kills it when it is done with the group.
#[derive(Debug, Args)]
struct WatchArgs {
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
fn watch_group(args: &WatchArgs) -> ExitCode {
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

/// `fence __exec --parent PID [--report-fd FD] -- COMMAND…`: what fence's
/// child runs before it becomes the command. Asks the kernel for SIGKILL
/// when fence dies (kept across `exec`), checks that fence did not die
/// before that (it would then never come), unblocks every signal (but
/// SIGTTIN and SIGTTOU without `--job-control`), and execs the command in place, keeping the pid that leads the group.
#[derive(Debug, Args)]
struct ExecArgs {
    /// fence's pid.
    #[arg(long)]
    parent: i32,
    /// The write end of [`Leader`]'s pipe, inherited: where to write the
    /// exit code this exits with if it does not become the command.
    #[arg(long)]
    report_fd: Option<i32>,
    /// Unblock SIGTTIN and SIGTTOU too: something can continue the command
    /// if its use of the terminal from the background stops it
    /// ([`super::terminal::stops_can_be_undone`]). Without it they stay
    /// blocked: a read from the background fails (EIO), a write goes
    /// through, rather than stop the command for ever.
    #[arg(long)]
    job_control: bool,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// See [`ExecArgs`]; returns only if the command could not be started,
/// its exit code then also written to the report pipe.
fn exec_child(args: &ExecArgs) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let (program, rest) = args.command.split_first().expect("clap requires a command");
    let report = args.report_fd.and_then(report_end);
    let fail = |code: u8| {
        use std::io::Write;
        if let Some(mut report) = report.as_ref() {
            let _ = report.write_all(&[code]);
        }
        ExitCode::from(code)
    };
    #[cfg(target_os = "linux")]
    {
        if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
            eprintln!("fence: cannot ask to be killed with fence (prctl): {e}");
            return fail(exit::RUN_FAILED);
        }
        if nix::unistd::getppid() != Pid::from_raw(args.parent) {
            eprintln!("fence: exited before {program:?} could start; not starting it");
            return fail(exit::RUN_FAILED);
        }
        // Wait, stopped, for fence to start the watcher of the group
        // ([`Group::go`]): until then the parent-death signal alone covers
        // it, and it reaches this process only, not what the command would
        // have forked. A fence killed meanwhile kills this one stopped.
        let _ = nix::sys::signal::raise(Signal::SIGSTOP);
        if nix::unistd::getppid() != Pid::from_raw(args.parent) {
            return fail(exit::RUN_FAILED);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = args.parent;
    // fence blocks SIGTTIN and SIGTTOU for itself, and a child inherits
    // the mask (std's spawn keeps it, and exec does too): the command's
    // reads from the terminal would fail with EIO instead of stopping it
    // in the background, its writes pass `stty tostop`. That is kept where
    // nothing could continue such a stop (no `--job-control`); every
    // other signal is unblocked. Signals fence catches are back to their
    // default at exec.
    let mut mask = SigSet::empty();
    if !args.job_control {
        mask.add(Signal::SIGTTIN);
        mask.add(Signal::SIGTTOU);
    }
    if let Err(e) = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&mask), None) {
        eprintln!("fence: cannot unblock signals for {program:?}: {e}");
        return fail(exit::RUN_FAILED);
    }
    let e = std::process::Command::new(program).args(rest).exec();
    eprintln!("fence: cannot start {program:?}: {e}");
    fail(exit::cannot_start(&e))
}

/// The report pipe's write end, inherited as `fd`, as a file that closes
/// at exec; `fd` itself closed, so that the command does not inherit it
/// (it would keep the pipe open past the exec). Reopened through
/// `/dev/fd`: the workspace forbids the `unsafe` of taking `fd` as it is.
/// Non-blocking: an open of a pipe for writing waits for a reader, and
/// fence's read end, gone with fence, would never come.
fn report_end(fd: i32) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let end = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(format!("/dev/fd/{fd}"))
        .ok();
    let _ = nix::unistd::close(fd);
    end
}
