//! [`PrivateState`]: the state directory of a test's own servers.

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::Paths;

/// A state directory of a test's own, laid out as `services` lays out
/// `integration/.state` (`logs/<instance>.log`, `data/<instance>/`,
/// `tls/`), removed when dropped. Its tools are the checkout's (the venv
/// and npm prefixes `services.sh deps` installed); its TLS directory is
/// its own and empty until [`PrivateState::make_pki`] (a
/// [`Private`](super::Private) started without a state of its own uses the
/// checkout's PKI instead).
#[derive(Debug)]
pub struct PrivateState {
    paths: Paths,
}

impl PrivateState {
    /// A new, empty state directory under `/tmp`, named after `label`.
    ///
    /// # Errors
    /// When its directories cannot be made.
    pub fn new(label: &str) -> Result<Self, String> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        // Short and under /tmp, not the temporary directory a test runner
        // may point deep: MariaDB's socket lives under it, and a socket
        // path must fit in 108 bytes.
        let root = PathBuf::from("/tmp").join(format!(
            "fp-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&root);
        let paths = Paths::new(&root, Some(Paths::from_env().tools));
        for dir in [&paths.logs, &paths.data] {
            fs::create_dir_all(dir)
                .map_err(|e| format!("a private state directory: {}: {e}", dir.display()))?;
        }
        Ok(Self { paths })
    }

    /// Makes the full test PKI (CA, server and client certificates, a
    /// wrong CA) in its TLS directory with [`crate::specs::pki::ensure`];
    /// `Ok(true)` when it made one, `Ok(false)` when a valid one was there.
    ///
    /// # Errors
    /// What `ensure` returns (openssl missing or failing; see `pki.log`).
    pub fn make_pki(&self) -> Result<bool, String> {
        crate::specs::pki::ensure(&self.paths)
    }

    /// Its directories.
    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    /// Points its TLS directory at the checkout's test PKI (the one the
    /// tests trust through `FENCING_TLS_DIR`).
    pub(super) fn use_checkout_pki(&mut self) {
        self.paths.tls = PathBuf::from(crate::TLS_DIR.endpoint());
    }
}

impl Drop for PrivateState {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.paths.state);
    }
}
