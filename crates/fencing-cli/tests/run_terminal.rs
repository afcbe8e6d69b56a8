//! `fence run` at a terminal is transparent: the command starts with the
//! default signal mask and, when fence runs in the terminal's foreground,
//! gets the terminal (a prompt reads what the user types); fence takes it
//! back on every way out; Ctrl-Z stops the command and fence together for
//! the shell, and `fg` continues both. A real pty with bash on it
//! (`common::pty`), the real binary, a SQLite issuer.

mod common;

use common::{FENCE, Scratch, pty};

/// A command that prints the signals it starts with blocked and ignored
/// (bash, which keeps the mask it starts with, unlike dash, and gives it
/// to its children), then asks and echoes the answer: what `sudo`, `psql`
/// or a script's "Proceed? [y/N]" do at a terminal.
const ASK: &str = r#"grep -E '^Sig(Blk|Ign)' /proc/self/status
printf 'Proceed? [y/N] '
read -r answer
echo "answer=[$answer]"
"#;

/// A command that asks twice, to be stopped between the two questions.
const ASK_TWICE: &str = r#"printf 'first? '
read a
echo "got [$a]"
printf 'second? '
read b
echo "got [$b]"
"#;

/// `fence run` of `bash FILE` on the scratch directory's SQLite issuer,
/// as a line of shell.
fn fence_run(s: &Scratch, file: &str) -> String {
    format!(
        "{FENCE} run --issuer {} --resource tty --ttl 5s -- bash {}",
        s.url(),
        s.path(file).display()
    )
}

/// bash with job control (`set -m`, as an interactive shell) runs fence
/// in the foreground; the command must start with no signal blocked or
/// ignored, and read the answer typed at the terminal. Without the
/// terminal, its read from a background group fails (EIO with SIGTTIN
/// blocked) or stops it (SIGTTIN) while fence renews the lease for ever.
#[test]
fn a_prompt_under_fence_reads_what_the_user_types() {
    let s = Scratch::new("tty-prompt");
    s.write("ask.sh", ASK);
    let script = format!("set -m; {}; echo rc=$?", fence_run(&s, "ask.sh"));
    let seen = pty::session(&script, &[("Proceed? [y/N] ", "y\n")]);
    assert_eq!(
        signals(&seen, "SigBlk"),
        Some(0),
        "the command started with signals blocked:\n{seen}"
    );
    assert_eq!(
        signals(&seen, "SigIgn").map(|ignored| ignored & !GLIBC_SPAWN_IGNORES),
        Some(0),
        "the command started with signals ignored:\n{seen}"
    );
    assert!(
        seen.contains("answer=[y]"),
        "the command did not read what was typed:\n{seen}"
    );
    assert!(seen.contains("rc=0"), "fence did not exit 0:\n{seen}");
}

/// The set of signals the line `field:` of a /proc status in `seen` shows.
fn signals(seen: &str, field: &str) -> Option<u64> {
    let line = seen
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))?;
    u64::from_str_radix(line.trim(), 16).ok()
}

/// Signals 32 and 33, glibc's own (below SIGRTMIN, no program's):
/// glibc's posix_spawn, which std's spawn uses, leaves them ignored in
/// the program it starts, and `exec` keeps that; fence cannot undo it
/// without `unsafe` (the workspace forbids it).
const GLIBC_SPAWN_IGNORES: u64 = 0b11 << 31;

/// The fields `pgrp` and `tpgid` of the shell's own /proc stat: whose the
/// terminal is, after each fence.
const WHOSE: &str =
    r#"read -r _ _ _ _ pgrp _ _ tpgid _ < /proc/$$/stat; echo "pgrp=$pgrp tpgid=$tpgid""#;

/// Whether each `pgrp=… tpgid=…` line `seen` holds names one group, and
/// how many there are.
fn terminal_back(seen: &str) -> (usize, bool) {
    let lines: Vec<_> = seen
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pgrp="))
        .collect();
    let all_back = lines.iter().all(|l| {
        let (pgrp, tpgid) = l.split_once(" tpgid=").expect("pgrp=N tpgid=N");
        pgrp == tpgid
    });
    (lines.len(), all_back)
}

/// bash without job control: fence shares the shell's process group, so
/// nothing but fence gives the terminal back to it when the command's
/// group is done, whether the command exits, fence is signalled (SIGTERM
/// from the command itself) or fence fails. Ctrl-Z at the prompt: the
/// command stops, but nothing above fence could continue fence (its group
/// is orphaned, the kernel would discard the stop for it), so fence
/// continues the command at once rather than hang the terminal.
#[test]
fn fence_takes_the_terminal_back_on_every_way_out() {
    let s = Scratch::new("tty-back");
    s.write("ask.sh", ASK);
    s.write(
        "term.sh",
        "printf 'Name? '; read n; echo \"hello [$n]\"; kill -TERM $PPID; sleep 5\n",
    );
    s.write("hook.sh", "printf 'Name? '; read n; echo \"hello [$n]\"\n");
    let script = [
        format!("{}; echo rc=$?; {WHOSE}", fence_run(&s, "ask.sh")),
        format!("{}; echo rc=$?; {WHOSE}", fence_run(&s, "term.sh")),
        format!(
            "FENCE_TEST_WAIT_FAILS=1 {}; echo rc=$?; {WHOSE}",
            fence_run(&s, "hook.sh")
        ),
    ]
    .join("; ");
    let seen = pty::session(
        &script,
        &[
            ("Proceed? [y/N] ", "\x1a"),
            ("continuing it", "yes\n"),
            ("Name? ", "Ann\n"),
            ("Name? ", "Bob\n"),
        ],
    );
    assert!(
        seen.contains("answer=[yes]"),
        "after Ctrl-Z the command did not read what was typed:\n{seen}"
    );
    assert!(seen.contains("hello [Ann]"), "{seen}");
    assert!(seen.contains("hello [Bob]"), "{seen}");
    for rc in ["rc=0", "rc=143", "rc=120"] {
        assert!(seen.contains(rc), "no {rc}:\n{seen}");
    }
    assert_eq!(
        terminal_back(&seen),
        (3, true),
        "the terminal was not given back to the shell's group after each fence:\n{seen}"
    );
}

/// bash with job control: Ctrl-Z at the command's second question stops
/// the command, then fence, and the shell gets its terminal back (the
/// job shows as stopped); `fg` continues fence, which renews the lease,
/// gives the command the terminal again and continues it, and the
/// command reads the second answer.
#[test]
fn ctrl_z_then_fg_stops_and_continues_the_command_with_fence() {
    let s = Scratch::new("tty-fg");
    s.write("ask.sh", ASK_TWICE);
    let script = format!(
        "set -m; {}; echo stopped=$?; {WHOSE}; fg >/dev/null; echo rc=$?",
        fence_run(&s, "ask.sh")
    );
    let seen = pty::session(
        &script,
        &[
            ("first? ", "one\n"),
            ("second? ", "\x1a"),
            ("stopped=", ""),
            ("tpgid=", "two\n"),
        ],
    );
    assert!(seen.contains("got [one]"), "{seen}");
    let stopped = seen
        .split("stopped=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|c| c.parse::<i32>().ok());
    assert!(
        stopped.is_some_and(|c| c > 128),
        "fence did not stop with the command (its status {stopped:?}):\n{seen}"
    );
    assert_eq!(
        terminal_back(&seen),
        (1, true),
        "the shell did not get the terminal while fence was stopped:\n{seen}"
    );
    assert!(
        seen.contains("got [two]"),
        "after fg the command did not read what was typed:\n{seen}"
    );
    assert!(seen.contains("rc=0"), "{seen}");
}

/// fence started in the background (`&`) of a shell with job control:
/// the command's read stops its group (SIGTTIN), fence stops too, so the
/// shell sees the job stopped; `fg` gives fence the terminal, fence hands
/// it on and continues the command, which reads the answer.
#[test]
fn a_background_fence_stops_when_its_command_reads_and_fg_continues_it() {
    let s = Scratch::new("tty-bg");
    s.write("ask.sh", "printf 'Name? '; read n; echo \"hello [$n]\"\n");
    let script = format!(
        "set -m; {} & f=$! i=0; \
         while read -r _ _ state _ < /proc/$f/stat && [ \"$state\" != T ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; \
         echo fence-stopped; fg >/dev/null; echo rc=$?",
        fence_run(&s, "ask.sh")
    );
    let seen = pty::session(&script, &[("fence-stopped", "Ann\n")]);
    assert!(
        seen.contains("hello [Ann]"),
        "the command did not read what was typed after fg:\n{seen}"
    );
    assert!(seen.contains("rc=0"), "{seen}");
}

/// fence in the background with no job control directly above it
/// (`bash -c 'fence run …' &` from an interactive shell): nothing would
/// ever continue the command's group if its read of the terminal stopped
/// it (SIGTTIN), so the command starts with SIGTTIN and SIGTTOU blocked
/// and its read fails (EIO) at once; the command ends, fence exits and
/// releases, rather than renew the lease for ever over a stopped group.
#[test]
fn a_background_fence_without_job_control_above_does_not_leave_its_command_stopped() {
    let s = Scratch::new("tty-bg-nojc");
    s.write("read.sh", "read -r x; echo \"got=[$x] read=$?\"\n");
    let script = format!(
        "set -m; bash -c '{}; echo fence-rc=$?' & wait $!; \
         {FENCE} run --issuer {} --resource tty --ttl 5s --wait 0s -- true; echo second-rc=$?",
        fence_run(&s, "read.sh"),
        s.url()
    );
    let seen = pty::session(&script, &[]);
    assert!(
        seen.contains("got=[] read=1"),
        "the command's read of the terminal did not fail at once:\n{seen}"
    );
    assert!(seen.contains("fence-rc=0"), "fence did not exit 0:\n{seen}");
    assert!(
        seen.contains("second-rc=0"),
        "fence did not release the lease:\n{seen}"
    );
}
