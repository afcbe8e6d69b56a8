//! Ending the supervised group when fence panics.

use std::time::Duration;

use nix::sys::signal::Signal;

use super::{Group, PROBE_FIRST, Supervision};
use crate::exit;

/// The group a panic must end: fence's supervision is then in doubt
/// (a panicked keep-alive renews nothing), and a process that dies leaves
/// the group running unrenewed. Set while [`supervise`](super::supervise) runs.
static PANIC_GROUP: std::sync::Mutex<Option<(Group, Signal, Duration)>> =
    std::sync::Mutex::new(None);

/// Arms the panic hook for one supervised group; disarms when dropped.
pub(super) struct PanicGuard;

impl PanicGuard {
    pub(super) fn arm(group: Group, supervision: &Supervision) -> Self {
        *PANIC_GROUP
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((group, supervision.signal, supervision.grace));
        Self
    }
}

impl Drop for PanicGuard {
    fn drop(&mut self) {
        PANIC_GROUP
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }
}

/// Installs a panic hook that, after the usual report, ends the supervised
/// group as a lost lease does (--signal, SIGKILL after --grace), takes the
/// terminal back if fence gave it away, and exits [`exit::RUN_FAILED`]; the lease is not released (it expires). A panic in
/// any thread counts: tokio would keep the process alive after a task's.
pub(crate) fn end_the_group_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        let armed = PANIC_GROUP
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let Some((group, signal, grace)) = armed else {
            return;
        };
        eprintln!("fence: panicked; sending {signal} to the command's process group");
        group.signal(signal);
        let deadline = std::time::Instant::now() + grace;
        while group.alive() && std::time::Instant::now() < deadline {
            std::thread::sleep(PROBE_FIRST);
        }
        group.signal(Signal::SIGKILL);
        super::terminal::take_back();
        std::process::exit(i32::from(exit::RUN_FAILED));
    }));
}
