//! The signals fence catches or blocks while a command runs under it.

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};

/// Blocks SIGTTIN and SIGTTOU in this thread, so in every thread started
/// after it: fence's own writes to the terminal from the background (with
/// `stty tostop`) go through instead of stopping it, and its reads fail.
/// Caught instead, such a signal restarts the write that raised it for
/// ever (the kernel sends it again on every try); left to its default, it
/// stops fence alone while the command's group runs on unrenewed. The
/// command gets the default mask: a child inherits this one (std's spawn
/// keeps it, exec too), and `fence __exec` clears it before it execs the
/// command ([`super::helper`]), but for these two where nothing could
/// continue the command stopped by them
/// ([`super::terminal::stops_can_be_undone`]).
pub(crate) fn write_to_the_terminal_in_the_background() {
    use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
    let mut tty = SigSet::empty();
    tty.add(Signal::SIGTTIN);
    tty.add(Signal::SIGTTOU);
    if let Err(e) = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&tty), None) {
        eprintln!("fence: cannot block SIGTTIN and SIGTTOU: {e}");
    }
}

/// The signals fence catches while the command runs: the terminating ones,
/// a closed terminal or ssh session (SIGHUP), Ctrl-C (SIGINT), Ctrl-\
/// (SIGQUIT), `kill` (SIGTERM); and Ctrl-Z (SIGTSTP). The terminal sends
/// the keys' signals to its foreground group only: the command's when
/// fence gave it the terminal ([`super::terminal`]), else fence's.
/// (SIGTTIN and SIGTTOU are blocked:
/// [`write_to_the_terminal_in_the_background`].)
/// Listened to from before the command starts until fence exits, with one
/// listener each: a listener made anew on each turn of a loop misses the
/// signals that come between two turns.
pub(crate) struct Interrupts([(Signal, tokio::signal::unix::Signal); 5]);

impl Interrupts {
    pub(crate) fn listen() -> std::io::Result<Self> {
        let on = |s: Signal| signal(SignalKind::from_raw(s as i32)).map(|l| (s, l));
        Ok(Self([
            on(Signal::SIGHUP)?,
            on(Signal::SIGINT)?,
            on(Signal::SIGQUIT)?,
            on(Signal::SIGTERM)?,
            on(Signal::SIGTSTP)?,
        ]))
    }

    /// The next signal received.
    pub(super) async fn recv(&mut self) -> Signal {
        let [(hup, a), (int, b), (quit, c), (term, d), (tstp, e)] = &mut self.0;
        tokio::select! {
            _ = a.recv() => *hup,
            _ = b.recv() => *int,
            _ = c.recv() => *quit,
            _ = d.recv() => *term,
            _ = e.recv() => *tstp,
        }
    }
}

/// Whether `signal` asks fence to stop rather than to end.
pub(super) fn stops(signal: Signal) -> bool {
    signal == Signal::SIGTSTP
}
