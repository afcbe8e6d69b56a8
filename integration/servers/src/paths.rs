//! Where `services` keeps its state: pid files, logs, data, installed tools
//! and the test PKI.

use std::path::{Path, PathBuf};

/// The directories of one checkout's servers.
#[derive(Clone, Debug)]
pub struct Paths {
    /// `FENCING_STATE_DIR`, else `integration/.state`.
    pub state: PathBuf,
    /// `FENCING_TOOLS_DIR`, else `<state>/tools`: the Python venv (moto,
    /// fake-gcs-server, the foreign lock clients) and the npm prefixes.
    pub tools: PathBuf,
    /// `<state>/pids`: `PID STARTTIME` per instance started.
    pub pids: PathBuf,
    /// `<state>/logs`: one log per instance, and the installs'.
    pub logs: PathBuf,
    /// `<state>/data`: one directory per instance.
    pub data: PathBuf,
    /// `<state>/tls`: the throwaway CA and certificates of the TLS variants.
    pub tls: PathBuf,
}

impl Paths {
    /// The directories under `state`.
    pub fn new(state: impl Into<PathBuf>, tools: Option<PathBuf>) -> Self {
        let state = state.into();
        Self {
            tools: tools.unwrap_or_else(|| state.join("tools")),
            pids: state.join("pids"),
            logs: state.join("logs"),
            data: state.join("data"),
            tls: state.join("tls"),
            state,
        }
    }

    /// From `FENCING_STATE_DIR` and `FENCING_TOOLS_DIR`, else this
    /// checkout's `integration/.state`.
    pub fn from_env() -> Self {
        // integration/.state spelled without `..`: FENCING_TLS_DIR in
        // `services env` and the paths in messages read as the bash's did.
        let integration = Path::new(env!("CARGO_MANIFEST_DIR"));
        let integration = integration.parent().unwrap_or(integration);
        let state = std::env::var_os("FENCING_STATE_DIR")
            .map_or_else(|| integration.join(".state"), PathBuf::from);
        Self::new(
            state,
            std::env::var_os("FENCING_TOOLS_DIR").map(PathBuf::from),
        )
    }

    /// The Python of the tools venv.
    pub fn python(&self) -> PathBuf {
        self.tools.join("venv/bin/python")
    }

    /// A file of the test PKI (`ca.pem`, `server.pem`, …).
    pub fn tls_file(&self, name: &str) -> PathBuf {
        self.tls.join(name)
    }
}
