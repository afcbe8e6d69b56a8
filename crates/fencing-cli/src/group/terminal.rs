//! The terminal on fence's stdin: handed to the command's process group
//! when fence runs in its foreground, so that the command reads it and
//! gets Ctrl-C, Ctrl-\ and Ctrl-Z as it would without fence; taken back
//! for fence's group, which its shell waits on, when the group is done,
//! when fence stops, and when fence panics.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use nix::unistd::{Pid, getpgid, getpgrp, getppid, getsid, tcgetpgrp, tcsetpgrp};

/// The group fence gave the terminal to, 0 if it has not: one per fence
/// process, for the panic hook too.
static GIVEN_TO: AtomicI32 = AtomicI32::new(0);

/// Whether fence's stdin is a terminal, where job control applies to the
/// command (not in CI, a pipe, a cron job).
pub(super) fn at_a_terminal() -> bool {
    std::io::stdin().is_terminal()
}

/// Whether fence's process group is the foreground group of that terminal:
/// the shell ran fence as its foreground job (or `fg` made it one).
fn in_the_foreground() -> bool {
    at_a_terminal() && tcgetpgrp(std::io::stdin()).is_ok_and(|group| group == getpgrp())
}

/// Whether the command may be stopped for job control (SIGTTIN, SIGTTOU
/// unblocked): at a terminal, with fence in its foreground at the start
/// (the command gets the terminal, and a stop fence sees it can undo or
/// follow) or a job-control shell above fence (that stops fence with the
/// command, and `fg` continues both). Otherwise (fence in the background
/// of `sh -c … &`, no terminal on stdin) nothing would ever continue a
/// command stopped reading the terminal: it starts with both blocked, so
/// such a read fails (EIO) and a write goes through.
pub(super) fn stops_can_be_undone() -> bool {
    at_a_terminal() && (in_the_foreground() || job_control_above())
}

/// Gives the terminal to `group` if fence is in its foreground; nothing
/// otherwise (a background job, no terminal). Until [`take_back`].
pub(super) fn give(group: Pid) {
    if !in_the_foreground() {
        return;
    }
    match set_foreground(group) {
        Ok(()) => GIVEN_TO.store(group.as_raw(), Ordering::SeqCst),
        Err(e) => eprintln!("fence: cannot give the terminal to the command's process group: {e}"),
    }
}

/// Gives fence's own group the terminal back if fence gave it away: its
/// shell, which waits on fence, finds it as it left it. Called when the
/// command's group is done (on every way out of supervising it, through
/// [`Handover`]), before fence stops, and by the panic hook.
pub(super) fn take_back() {
    if GIVEN_TO.swap(0, Ordering::SeqCst) == 0 {
        return;
    }
    if let Err(e) = set_foreground(getpgrp()) {
        eprintln!("fence: cannot take the terminal back from the command's process group: {e}");
    }
}

/// Takes the terminal back when dropped ([`take_back`]).
pub(super) struct Handover;

impl Drop for Handover {
    fn drop(&mut self) {
        take_back();
    }
}

/// `tcsetpgrp` on stdin with SIGTTOU blocked in this thread: fence calls
/// it from what is, or is about to become, a background group, which the
/// kernel would otherwise stop with SIGTTOU instead. (fence blocks SIGTTOU
/// anyway, [`super::write_to_the_terminal_in_the_background`]; this does
/// not depend on it.)
fn set_foreground(group: Pid) -> nix::Result<()> {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let mut before = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut before))?;
    let set = tcsetpgrp(std::io::stdin(), group);
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&before), None);
    set
}

/// Whether a job-control shell can continue fence once it stops: fence's
/// parent is in its session but in another process group, so fence's
/// group is not orphaned (the kernel's own test, for the one link fence
/// knows of). Not so under `sh -c` without job control, `ssh -t host
/// fence …`, `setsid`: nothing there would ever continue a stopped fence.
pub(super) fn job_control_above() -> bool {
    let parent = getppid();
    getpgid(Some(parent)).is_ok_and(|group| group != getpgrp())
        && getsid(Some(parent)).ok() == getsid(None).ok()
}
