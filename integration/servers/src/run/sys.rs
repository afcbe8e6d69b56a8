//! The few system calls std has no safe form of: a new session and no
//! inherited descriptors for the servers `services` starts, signals for
//! those it stops, the local time for log headers. The only unsafe code of
//! the crate, each block a single libc call.
#![allow(unsafe_code)]

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// A signal `services` sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    Term,
    Int,
    Kill,
    Cont,
    /// For the tests: what a fault test does to a server.
    #[cfg(test)]
    Stop,
}

impl Signal {
    /// Its name, as the logs show it (`SIGTERM`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Term => "SIGTERM",
            Self::Int => "SIGINT",
            Self::Kill => "SIGKILL",
            Self::Cont => "SIGCONT",
            #[cfg(test)]
            Self::Stop => "SIGSTOP",
        }
    }

    fn number(self) -> libc::c_int {
        match self {
            Self::Term => libc::SIGTERM,
            Self::Int => libc::SIGINT,
            Self::Kill => libc::SIGKILL,
            Self::Cont => libc::SIGCONT,
            #[cfg(test)]
            Self::Stop => libc::SIGSTOP,
        }
    }
}

/// Sends `signal` to the process `pid` (never to a group). Errors (it is
/// gone already) are ignored, as `kill … || true` did.
pub(crate) fn signal(pid: u32, signal: Signal) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    if pid <= 0 {
        return; // 0 and negatives address groups
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(pid, signal.number());
    }
}

/// Makes `command` start its process detached: in a session of its own (a
/// Ctrl-C in the terminal running the tests does not reach it), and with
/// every descriptor above 2 closed at exec (a caller's pipe held open by a
/// server would hang whoever waits for its end).
pub(crate) fn detach(command: &mut Command) {
    // The fallback's bound, read before fork (sysconf is no async-signal-safe call).
    // SAFETY: sysconf takes an integer and returns one.
    let open_max = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) };
    let open_max = libc::c_int::try_from(open_max)
        .ok()
        .filter(|n| *n > 0)
        .unwrap_or(4096);
    let before_exec = move || {
        // SAFETY: between fork and exec only async-signal-safe calls run:
        // setsid, close_range and fcntl, on integers.
        unsafe {
            if libc::setsid() == -1 {
                return Err(io::Error::last_os_error());
            }
            // Close-on-exec rather than closed: std's own pipe, which
            // reports a failed exec to the parent, stays open until exec.
            let cloexec = libc::c_int::try_from(libc::CLOSE_RANGE_CLOEXEC).unwrap_or(0);
            if libc::close_range(3, libc::c_uint::MAX, cloexec) == -1 {
                // A kernel before 5.11: descriptor by descriptor.
                for fd in 3..open_max {
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                }
            }
        }
        Ok(())
    };
    // SAFETY: the closure makes only async-signal-safe calls (see above)
    // and allocates nothing.
    unsafe {
        command.pre_exec(before_exec);
    }
}

/// The local time as `date '+%F %T'` prints it.
pub(crate) fn local_time() -> String {
    // SAFETY: time(NULL) reads the clock; localtime_r writes only into
    // `tm`, which lives on this stack frame.
    let tm = unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&now, &mut tm).is_null() {
            return String::from("(unknown time)");
        }
        tm
    };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}
