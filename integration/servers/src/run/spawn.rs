//! Starting a member detached and waiting until it answers.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::pids::{self, Recorded};
use super::{log, sys, wait_secs};
use crate::{Instance, Launch, Paths, Service};

/// The log of `instance`.
pub(crate) fn log_file(paths: &Paths, instance: &str) -> PathBuf {
    paths.logs.join(format!("{instance}.log"))
}

/// Starts `launch` as `instance`'s process, detached from the caller (own
/// session, no inherited descriptors, stdin closed), its output appended
/// to the instance's log, and records it as ours.
pub(crate) fn spawn(paths: &Paths, instance: &str, launch: &Launch) -> Result<Recorded, String> {
    pids::forget(paths, instance);
    let log_path = log_file(paths, instance);
    let mut out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| {
            format!(
                "{instance}: cannot open its log {}: {e}",
                log_path.display()
            )
        })?;
    let mut command_line = launch.program.clone();
    for arg in &launch.args {
        command_line.push(' ');
        command_line.push_str(arg);
    }
    writeln!(
        out,
        "\n=== {} started by services.sh: {command_line}",
        sys::local_time()
    )
    .map_err(|e| {
        format!(
            "{instance}: cannot write its log {}: {e}",
            log_path.display()
        )
    })?;
    let err = out
        .try_clone()
        .map_err(|e| format!("{instance}: {}: {e}", log_path.display()))?;
    let mut command = Command::new(&launch.program);
    command
        .args(&launch.args)
        .current_dir(&launch.dir)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out.try_clone().map_err(|e| e.to_string())?)
        .stderr(err);
    sys::detach(&mut command);
    let mut child = command.spawn().map_err(|e| {
        let _ = writeln!(out, "services: cannot start {}: {e}", launch.program);
        format!(
            "{instance} did not start ({}: {e}); see {}",
            launch.program,
            log_path.display()
        )
    })?;
    let recorded = pids::record(paths, instance, child.id())?;
    // Reap it when it ends, so that a caller that lives on (a test calling
    // `up` in-process) keeps no zombie: a zombie's port is closed, but
    // `kill -0` still finds it.
    std::thread::Builder::new()
        .name(format!("reap-{instance}"))
        .spawn(move || {
            let _ = child.wait();
        })
        .map_err(|e| format!("{instance}: no thread to reap it: {e}"))?;
    log(format!(
        "{instance}: started, pid {}, log {}",
        recorded.pid,
        log_path.display()
    ));
    Ok(recorded)
}

/// Waits until `instance` answers `service`'s probe; fails fast if the
/// process we started died, and after `FENCING_WAIT_SECS` otherwise.
pub(crate) fn wait_answering(
    paths: &Paths,
    service: &Service,
    instance: &Instance,
) -> Result<(), String> {
    let ours = pids::ours(paths, &instance.name);
    let secs = wait_secs();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let log_path = log_file(paths, &instance.name);
    let (name, port) = (&instance.name, instance.port);
    loop {
        if (service.probe)(instance) {
            return Ok(());
        }
        if let Some(r) = ours.filter(|r| !r.alive()) {
            eprint!("{}", tail(&log_path, 30));
            return Err(format!(
                "{name} (pid {}) exited before answering on 127.0.0.1:{port}; see {}",
                r.pid,
                log_path.display()
            ));
        }
        if Instant::now() >= deadline {
            return Err(match ours {
                Some(r) => {
                    eprint!("{}", tail(&log_path, 30));
                    format!(
                        "{name} (pid {}) did not answer on 127.0.0.1:{port} within {secs}s; see {}",
                        r.pid,
                        log_path.display()
                    )
                }
                None => format!(
                    "{name}: something listens on 127.0.0.1:{port} but does not answer like {} \
                     within {secs}s (not started by services.sh; free the port or fix that server)",
                    service.name
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The last `lines` lines of a file (empty if it cannot be read), each
/// ending in a newline.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    // Logs grow over many runs: read only their end.
    const MOST: u64 = 256 * 1024;
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(MOST)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    last_lines(&String::from_utf8_lossy(&bytes), lines)
}

fn last_lines(text: &str, n: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    for line in &all[all.len().saturating_sub(n)..] {
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stop;

    /// Field `n` (from 1) of `/proc/PID/stat`.
    fn stat_field(pid: u32, n: usize) -> String {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        rest.split_whitespace().nth(n - 3).unwrap().to_owned()
    }

    #[test]
    fn a_spawned_server_is_detached_recorded_and_stopped_even_when_sigstopped() {
        let dir = std::env::temp_dir().join(format!("fencing-spawn-test-{}", std::process::id()));
        let paths = Paths::new(&dir, None);
        std::fs::create_dir_all(&paths.logs).unwrap();
        let launch = Launch::new("sleep", ["30"], &dir);
        let recorded = spawn(&paths, "sleeper", &launch).unwrap();
        assert_eq!(pids::ours(&paths, "sleeper"), Some(recorded));
        // Its own session (field 6), led by itself.
        assert_eq!(stat_field(recorded.pid, 6), recorded.pid.to_string());
        let log = std::fs::read_to_string(log_file(&paths, "sleeper")).unwrap();
        assert!(log.contains(" started by services.sh: sleep 30"), "{log}");

        // A test may have SIGSTOPped it: the stop continues it.
        sys::signal(recorded.pid, sys::Signal::Stop);
        let asked = Instant::now();
        super::super::stop::stop_instances(&paths, &[("sleeper", Stop::Term)]);
        assert!(asked.elapsed() < Duration::from_secs(5));
        assert!(!recorded.alive());
        assert!(!pids::pid_file(&paths, "sleeper").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_program_that_cannot_start_is_an_error_naming_its_log() {
        let dir = std::env::temp_dir().join(format!("fencing-nostart-test-{}", std::process::id()));
        let paths = Paths::new(&dir, None);
        std::fs::create_dir_all(&paths.logs).unwrap();
        let launch = Launch::new("/nonexistent/server", Vec::<String>::new(), &dir);
        let error = spawn(&paths, "ghost", &launch).unwrap_err();
        assert!(error.contains("ghost did not start"), "{error}");
        assert!(error.contains("ghost.log"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a", 5), "a\n");
        assert_eq!(last_lines("", 5), "");
    }
}
