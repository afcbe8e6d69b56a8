//! Stopping servers: ours by their pid files, or (for `restart`) whoever
//! listens on a port.

use std::time::{Duration, Instant};

use super::pids::{self, Recorded};
use super::sys::{self, Signal};
use super::{log, port_open};
use crate::{Paths, Stop};

/// The SIGTERM grace before SIGKILL; an etcd member without quorum needs
/// more than 10 s.
const GRACE: Duration = Duration::from_secs(15);
/// When a [`Stop::TermTwice`] server gets its second SIGTERM.
const RESEND_AFTER: Duration = Duration::from_secs(1);

/// The first signal of a stop.
fn first_signal(stop: Stop) -> Signal {
    match stop {
        // PostgreSQL's fast shutdown: rolls back open transactions, then exits.
        Stop::Int => Signal::Int,
        Stop::Term | Stop::TermTwice => Signal::Term,
    }
}

/// Sends the stop signal, then SIGCONT: a test may have SIGSTOPped it, and a
/// stopped process ignores SIGTERM until continued.
fn ask_to_stop(pid: u32, stop: Stop) -> Signal {
    let signal = first_signal(stop);
    sys::signal(pid, signal);
    sys::signal(pid, Signal::Cont);
    signal
}

/// Stops every instance whose recorded process still runs: its stop
/// signal, SIGTERM again after a second for [`Stop::TermTwice`] (Azurite
/// closes on the first but then idles ~10 s on its timers), SIGKILL after
/// the grace period. Never signals anything we did not record; removes
/// the pid files.
pub(crate) fn stop_instances(paths: &Paths, instances: &[(&str, Stop)]) {
    let mut targets: Vec<(&str, Stop, Recorded)> = Vec::new();
    for &(instance, stop) in instances {
        if let Some(recorded) = pids::ours(paths, instance) {
            let signal = ask_to_stop(recorded.pid, stop);
            log(format!(
                "{instance}: stopping pid {} ({})",
                recorded.pid,
                signal.name()
            ));
            targets.push((instance, stop, recorded));
        } else {
            pids::forget(paths, instance); // its process is gone already
        }
    }
    let started = Instant::now();
    let mut resent = false;
    loop {
        let alive: Vec<&(&str, Stop, Recorded)> =
            targets.iter().filter(|(_, _, r)| r.alive()).collect();
        if alive.is_empty() {
            break;
        }
        if !resent && started.elapsed() >= RESEND_AFTER {
            for (_, _, r) in alive.iter().filter(|(_, s, _)| *s == Stop::TermTwice) {
                sys::signal(r.pid, Signal::Term);
            }
            resent = true;
        }
        if started.elapsed() >= GRACE {
            for (instance, _, r) in &alive {
                log(format!(
                    "{instance}: still running after {}s, SIGKILL",
                    GRACE.as_secs()
                ));
                sys::signal(r.pid, Signal::Kill);
            }
            std::thread::sleep(Duration::from_millis(500));
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for (instance, _, _) in &targets {
        pids::forget(paths, instance);
    }
}

/// Stops `pid`, whoever started it, and waits until it is gone and `port`
/// is free (SIGKILL after the grace period). For `restart`: a fault test's
/// server, ours or not.
pub(crate) fn stop_listener(instance: &str, pid: u32, port: u16, stop: Stop) -> Result<(), String> {
    let signal = ask_to_stop(pid, stop);
    log(format!(
        "{instance}: restarting, stopping pid {pid} ({})",
        signal.name()
    ));
    let start = pids::proc_start(pid);
    let alive = || start.is_some() && pids::proc_start(pid) == start;
    let started = Instant::now();
    let mut resent = false;
    while alive() || port_open(port) {
        let waited = started.elapsed();
        if !resent && stop == Stop::TermTwice && waited >= RESEND_AFTER {
            sys::signal(pid, Signal::Term);
            resent = true;
        }
        if waited >= GRACE {
            sys::signal(pid, Signal::Kill);
        }
        // Bounded, unlike the bash's loop: a port held by another process
        // than the one killed would have kept it waiting forever.
        if waited >= GRACE * 2 {
            return Err(format!(
                "{instance}: 127.0.0.1:{port} still listens {}s after stopping pid {pid}; \
                 free the port",
                waited.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_gets_sigint_the_others_sigterm() {
        assert_eq!(first_signal(Stop::Int), Signal::Int);
        assert_eq!(first_signal(Stop::Term), Signal::Term);
        assert_eq!(first_signal(Stop::TermTwice), Signal::Term);
    }
}
