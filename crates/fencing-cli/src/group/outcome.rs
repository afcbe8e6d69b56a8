//! How `run` and `lead` end, and whose exit code they end with: the
//! command's own, passed on, or fence's (120–122, 126/127, 128 + N),
//! which a command may exit with too. `--status-file` tells them apart.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

/// fence's exit code, and whose it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) code: u8,
    /// Whether `code` is the command's own (its exit code, or 128 + the
    /// signal that ended it), else fence's.
    pub(crate) commands: bool,
}

impl Outcome {
    /// The command's own code, passed on.
    pub(crate) fn command(code: u8) -> Self {
        Self {
            code,
            commands: true,
        }
    }

    /// One of fence's own outcomes (`crate::exit`).
    pub(crate) fn fence(code: u8) -> Self {
        Self {
            code,
            commands: false,
        }
    }

    /// The line `--status-file` holds: `command N` or `fence N`.
    fn line(self) -> String {
        let whose = if self.commands { "command" } else { "fence" };
        format!("{whose} {}\n", self.code)
    }
}

impl From<Outcome> for ExitCode {
    fn from(outcome: Outcome) -> Self {
        Self::from(outcome.code)
    }
}

/// `--status-file`, for `run` and `lead`.
#[derive(Debug, Args)]
pub(crate) struct StatusFile {
    /// Write to FILE, as fence exits, whose exit code it exits with: one
    /// line, `command N` (the command's own, passed on, whatever N is) or
    /// `fence N` (fence's own outcome: 120 failed, 121 held, 122 lease
    /// lost, 126/127 not started, 128+N fence got signal N). Emptied before
    /// the lease is taken (fence fails, exit 120, if it cannot be written);
    /// still empty if fence was killed or panicked.
    #[arg(long, value_name = "FILE")]
    status_file: Option<PathBuf>,
}

impl StatusFile {
    /// Empties the file, so that one from an earlier run cannot be read
    /// for this one's, and checks it can be written before anything runs.
    pub(crate) fn empty(&self) -> std::io::Result<()> {
        match &self.status_file {
            Some(path) => std::fs::write(path, "").map_err(|e| in_file(path, &e)),
            None => Ok(()),
        }
    }

    /// Runs `body` (what `run` and `lead` do) with the file emptied first
    /// and written at the end, with the command's outcome or fence's own
    /// failure, whichever way `body` ends.
    pub(crate) async fn around(
        &self,
        body: impl std::future::Future<Output = Result<Outcome, Box<dyn std::error::Error>>>,
    ) -> crate::CliResult {
        self.empty()?;
        match body.await {
            Ok(outcome) => Ok(self.record(outcome).into()),
            Err(e) => {
                self.record(Outcome::fence(crate::error_code(&*e, true)));
                Err(e)
            }
        }
    }

    /// Writes `outcome` to the file, if one was named, and hands it back;
    /// fence's failure (exit 120, the file left empty) if it cannot.
    pub(crate) fn record(&self, outcome: Outcome) -> Outcome {
        let Some(path) = &self.status_file else {
            return outcome;
        };
        match std::fs::write(path, outcome.line()) {
            Ok(()) => outcome,
            Err(e) => {
                eprintln!("fence: {} (it stays empty)", in_file(path, &e));
                let _ = std::fs::write(path, "");
                Outcome::fence(crate::exit::RUN_FAILED)
            }
        }
    }
}

/// `e`, naming the status file.
fn in_file(path: &std::path::Path, e: &std::io::Error) -> std::io::Error {
    std::io::Error::new(
        e.kind(),
        format!("cannot write the status file {}: {e}", path.display()),
    )
}
