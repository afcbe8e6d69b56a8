//! Client processes a test starts and signals: one that reports its token
//! on its first line, then is stopped and resumed (SIGSTOP, SIGCONT) as a
//! paused process would be.

use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};

pub use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// The rest of a spawned process's stdout, line by line.
pub type StdoutLines = Lines<BufReader<ChildStdout>>;

/// Sends `signal` to process `pid`, never to a group: pid 0 (and a pid
/// too large to be one) is refused.
///
/// # Errors
/// The pid refused, or what `kill(2)` says (no such process, not ours).
pub fn send_signal(pid: u32, signal: Signal) -> Result<(), String> {
    let raw = i32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| format!("{pid} is not a process id"))?;
    nix::sys::signal::kill(Pid::from_raw(raw), signal)
        .map_err(|e| format!("could not send {signal} to pid {pid}: {e}"))
}

/// [`send_signal`], for a test.
///
/// # Panics
/// If the signal cannot be sent.
pub fn signal(pid: u32, signal: Signal) {
    send_signal(pid, signal).unwrap_or_else(|e| panic!("{e}"));
}

/// Starts `command` with its stdout piped and reads its first line, which
/// must be `PREFIX TOKEN` (`acquired 12`): the process, the rest of its
/// stdout and the token.
///
/// # Panics
/// If it cannot start, or its first line is missing or another.
pub fn spawn_reporting_token(command: &mut Command, prefix: &str) -> (Child, StdoutLines, u64) {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the client process");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a line").expect("readable");
    let token = first
        .strip_prefix(prefix)
        .and_then(|t| t.strip_prefix(' '))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("expected \"{prefix} TOKEN\", got {first:?}"));
    (child, lines, token)
}
