//! One process of a [`Private`](super::Private) server: spawned from its
//! spec, its output appended to its log, stopped as `services` stops it.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::util::output_all;
use crate::{Instance, Service, Stop};

/// How a member failed to start or answer.
#[derive(Debug)]
pub(super) enum NoAnswer {
    /// Its spec could not say how to start it, or its program could not
    /// be run.
    NotStarted(String),
    /// It exited first: a port lost to someone else between the kernel
    /// handing it out and the server binding it, or options it refused.
    Exited(String),
    /// It ran but did not answer in time.
    TimedOut(String),
}

impl NoAnswer {
    pub(super) fn message(self) -> String {
        match self {
            Self::NotStarted(m) | Self::Exited(m) | Self::TimedOut(m) => m,
        }
    }
}

/// A member as started (or stopped).
#[derive(Debug)]
pub(super) struct Running {
    /// Where and how it runs.
    pub(super) instance: Instance,
    child: Option<Child>,
    log: PathBuf,
}

impl Running {
    /// A member not started yet, its data directory made.
    pub(super) fn new(instance: Instance) -> Result<Self, String> {
        fs::create_dir_all(&instance.dir).map_err(|e| {
            format!(
                "{}: cannot create its data directory {}: {e}",
                instance.name,
                instance.dir.display()
            )
        })?;
        let log = instance.paths.logs.join(format!("{}.log", instance.name));
        Ok(Self {
            instance,
            child: None,
            log,
        })
    }

    /// Spawns it from `service`'s spec with `extra` after the spec's own
    /// arguments, its output appended to its log.
    pub(super) fn spawn(&mut self, service: &Service, extra: &[String]) -> Result<(), String> {
        let name = &self.instance.name;
        let launch = (service.start)(&self.instance)?;
        let mut out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{name}: cannot open its log {}: {e}", self.log.display()))?;
        // A header per start: a restarted member's log shows each run.
        let _ = writeln!(
            out,
            "\n=== a private test server: {} {} {}",
            launch.program,
            launch.args.join(" "),
            extra.join(" ")
        );
        let err = out
            .try_clone()
            .map_err(|e| format!("{name}: {}: {e}", self.log.display()))?;
        let child = Command::new(&launch.program)
            .args(&launch.args)
            .args(extra)
            .current_dir(&launch.dir)
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| {
                format!(
                    "{name}: cannot start {} ({e}): install it with `integration/services.sh deps {}`",
                    launch.program, service.name
                )
            })?;
        self.child = Some(child);
        Ok(())
    }

    /// How it exited, if it has.
    fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Whether its process runs (started and not exited).
    pub(super) fn running(&mut self) -> bool {
        self.child.is_some() && self.exited().is_none()
    }

    /// Waits until `service`'s probe answers for it.
    pub(super) fn wait_answering(
        &mut self,
        service: &Service,
        within: Duration,
    ) -> Result<(), NoAnswer> {
        let started = Instant::now();
        loop {
            if (service.probe)(&self.instance) {
                return Ok(());
            }
            let at = format!(
                "a private {} ({}) on {}:{}",
                service.name, self.instance.name, self.instance.ip, self.instance.port
            );
            if let Some(status) = self.exited() {
                return Err(NoAnswer::Exited(format!(
                    "{at} exited before answering ({status}); {}",
                    self.log_tail()
                )));
            }
            if started.elapsed() >= within {
                return Err(NoAnswer::TimedOut(format!(
                    "{at} did not answer within {within:?}; {}",
                    self.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILL, at once (a crash).
    pub(super) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `stop`'s signal, then SIGCONT: a test may have SIGSTOPped it,
    /// and a stopped process ignores SIGTERM until continued.
    fn ask_to_stop(&mut self, stop: Stop) {
        let signal = match stop {
            // PostgreSQL's fast shutdown: rolls back open transactions.
            Stop::Int => "-INT",
            Stop::Term | Stop::TermTwice => "-TERM",
        };
        if let Some(child) = &self.child {
            let pid = child.id().to_string();
            // kill(1), not libc: unsafe code is allowed in run/sys.rs alone.
            let _ = output_all(5, "kill", &[signal, &pid], &[], None);
            let _ = output_all(5, "kill", &["-CONT", &pid], &[], None);
        }
    }

    /// Reaps it if it has exited; whether it has (or never ran).
    fn reap(&mut self) -> bool {
        if self.child.is_none() || self.exited().is_some() {
            self.child = None;
            return true;
        }
        false
    }

    /// Stops it as `services down` does: `stop`'s signal, SIGTERM again
    /// after a second for [`Stop::TermTwice`] (Azurite closes on the
    /// first, then idles on its timers), SIGKILL after `grace`.
    pub(super) fn stop(&mut self, stop: Stop, grace: Duration) {
        self.ask_to_stop(stop);
        let started = Instant::now();
        let mut resent = false;
        while !self.reap() {
            if !resent && stop == Stop::TermTwice && started.elapsed() >= Duration::from_secs(1) {
                self.ask_to_stop(Stop::Term);
                resent = true;
            }
            if started.elapsed() >= grace {
                self.kill();
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The end of its log, saying which file it is.
    pub(super) fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "its log ({}) ends:\n{}",
            self.log.display(),
            lines[lines.len().saturating_sub(30)..].join("\n")
        )
    }
}
