//! Starting the command as the leader of a process group of its own that
//! dies with fence: the `fence __exec` trampoline the child runs first, and
//! the `fence __watch` helper that ends the group if fence is killed.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser};
use fencing_tokens::Lease;
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::exit;

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

/// `fence __exec --parent PID -- COMMAND…`: what fence's child runs before
/// it becomes the command. Asks the kernel for SIGKILL when fence dies
/// (kept across `exec`), checks that fence did not die before that (it
/// would then never come), and execs the command in place, keeping the pid
/// that leads the group.
#[derive(Debug, Args)]
struct ExecArgs {
    /// fence's pid.
    #[arg(long)]
    parent: i32,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// See [`ExecArgs`]; returns only if the command could not be started.
fn exec_child(args: &ExecArgs) -> ExitCode {
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
