//! Client processes a test starts and signals: one that reports its token
//! on its first line, then is stopped and resumed (SIGSTOP, SIGCONT) as a
//! paused process would be.

use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};

/// The rest of a spawned process's stdout, line by line.
pub type StdoutLines = Lines<BufReader<ChildStdout>>;

/// Sends `signal` (`"STOP"`, `"CONT"`, `"KILL"`, `"9"`) to `pid` with
/// `kill`.
///
/// # Panics
/// If `kill` fails.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "could not send SIG{signal} to pid {pid}");
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
