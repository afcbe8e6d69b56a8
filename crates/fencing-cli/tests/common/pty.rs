//! A real terminal for the tests of `fence run` at a terminal: a pty from
//! Python's `pty` module, bash in a session of its own on it (so the pty
//! is its controlling terminal, and `set -m` gives job control), and
//! keys typed into it as a user types them.

use std::process::Command;

/// Runs `bash -c script` on a fresh pty and types each step's `send`
/// once the terminal has shown its `expect` (after the previous step's);
/// returns everything the terminal showed, once bash has exited. The
/// whole session gives up after 30 s (a step never shown, a hung fence):
/// the text then ends with a `<<pty: …>>` line saying what it waited for,
/// so a hang fails the test instead of hanging it, and what is left of
/// the session is killed.
pub(crate) fn session(script: &str, steps: &[(&str, &str)]) -> String {
    let mut args = vec!["-c", DRIVER, script];
    for (expect, send) in steps {
        args.extend([*expect, *send]);
    }
    let out = Command::new("python3")
        .args(&args)
        .output()
        .expect("python3 with its pty module");
    assert!(
        out.status.success(),
        "the pty driver failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `python3 -c DRIVER SCRIPT [EXPECT SEND]…`; see [`session`].
const DRIVER: &str = r#"
import os, pty, select, signal, sys, time
script, steps = sys.argv[1], sys.argv[2:]
steps = list(zip(steps[0::2], steps[1::2]))
child, fd = pty.fork()
if child == 0:
    # A login terminal's start: no signal blocked or ignored (Python
    # ignores some, and so may whatever started the tests).
    for sig in range(1, signal.NSIG):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.execvp("bash", ["bash", "-c", script])
seen, matched, deadline = b"", 0, time.time() + 30
waiting = None
while time.time() < deadline:
    if steps:
        expect, send = steps[0]
        at = seen.find(expect.encode(), matched)
        if at >= 0:
            matched = at + len(expect)
            os.write(fd, send.encode())
            steps.pop(0)
            continue
        waiting = expect
    else:
        waiting = "bash to exit"
    ready, _, _ = select.select([fd], [], [], 0.1)
    if ready:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            chunk = b""
        if not chunk:
            waiting = None if not steps else steps[0][0]
            break
        seen += chunk
text = seen.decode(errors="replace")
if waiting is not None:
    text += "\n<<pty: gave up waiting for %r>>" % waiting
sys.stdout.write(text)
# Whatever is left in the session (a fence stopped for ever): killed.
for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
    try:
        if os.getsid(pid) == child:
            os.kill(pid, 9)
    except OSError:
        pass
"#;
