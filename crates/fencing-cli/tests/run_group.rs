//! The lease covers the command's whole process group, not just the
//! command: `fence run` and `fence lead` with the real binary, a job the
//! command leaves running (`&`, a grandchild), and members that ignore
//! SIGTERM when the lease is lost, and signals to fence itself (SIGHUP,
//! SIGINT, SIGQUIT, SIGTERM, SIGKILL). SQLite files, and Redis for `lead`.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{FENCE, LEASE_LOST, Scratch, assert_exit, resource_args, text};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Shell that waits until `go` exists (bounded, so a failed test leaves
/// nothing running for long): the job the test lets finish when it wants.
fn wait_for(go: &Path) -> String {
    format!(
        "i=0; while [ ! -e {} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done",
        go.display()
    )
}

/// Shell that writes its own pid to `file`, ignores SIGTERM, and lives up
/// to 20 s: a member of the group that only SIGKILL ends.
fn term_ignoring_member(file: &Path) -> String {
    format!(
        "sh -c 'trap \"\" TERM; echo $$ > {}; i=0; while [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done' >/dev/null 2>&1 &",
        file.display()
    )
}

/// Shell that waits until `file` is written (bounded).
fn wait_written(file: &Path) -> String {
    format!(
        "i=0; while [ ! -s {} ] && [ $i -lt 400 ]; do sleep 0.01; i=$((i+1)); done",
        file.display()
    )
}

/// Shell that gives the lease up behind fence's back: its next renewal is
/// refused, so the lease is lost.
fn release_own_lease() -> String {
    format!(
        "{FENCE} release --issuer \"$FENCING_ISSUER\" --resource \"$FENCING_RESOURCE\" \
         --holder \"$FENCING_HOLDER\" --token \"$FENCING_TOKEN\" >/dev/null"
    )
}

/// `fence ARGS` started, its output piped.
fn spawn(args: &[&str]) -> Child {
    Command::new(FENCE)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fence")
}

/// Waits up to `limit` for `child` to exit; whether it did.
fn exits_within(child: &mut Child, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Waits (bounded) until `file` holds `line`.
fn await_line(file: &Path, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !lines(file).iter().any(|l| l == line) {
        assert!(Instant::now() < deadline, "{line:?} never reached {file:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether the process whose pid `file` holds can still run: not gone and
/// not a zombie (one that pid 1 has not reaped yet cannot act).
fn alive(file: &Path) -> bool {
    let pid = std::fs::read_to_string(file).expect("the member wrote its pid");
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()));
    stat.is_ok_and(|s| {
        let state = s.rsplit_once(')').map(|(_, rest)| rest.trim_start());
        !state.is_some_and(|r| r.starts_with('Z') || r.starts_with('X'))
    })
}

/// The first holder's command exits at once, leaving a job (`&`) that runs
/// with its token until the test lets it finish; a second `fence run` on
/// the same resource, started after the command exited, must not start
/// its command before that job is done. The TTL is short, so the lease
/// is renewed while fence waits for the job.
#[test]
fn a_background_job_keeps_the_lease_until_it_ends() {
    let s = Scratch::new("group-bg");
    let url = s.url();
    let (log, go) = (s.path("log"), s.path("go"));
    let first = format!(
        "( {}; echo job-done >> {log} ) >/dev/null 2>&1 & echo leader-done >> {log}",
        wait_for(&go),
        log = log.display()
    );
    let first = spawn(&resource_args(
        "run",
        &url,
        "nightly",
        &["--ttl", "1s", "--", "sh", "-c", &first],
    ));
    await_line(&log, "leader-done");

    let second = format!("echo second-start >> {}", log.display());
    let mut second = spawn(&resource_args(
        "run",
        &url,
        "nightly",
        &["--ttl", "5s", "--wait", "30s", "--", "sh", "-c", &second],
    ));
    // Nothing announces that the second run is blocked; give it time to
    // get in wrongly (it takes milliseconds), then let the job finish.
    let second_done_early = exits_within(&mut second, Duration::from_secs(3));
    std::fs::write(&go, "").unwrap();

    let (first, second) = (
        first.wait_with_output().unwrap(),
        second.wait_with_output().unwrap(),
    );
    assert_eq!(
        lines(&log),
        ["leader-done", "job-done", "second-start"],
        "the second run started beside the first run's job (second exited early: {second_done_early})\n\
         first: {}\nsecond: {}",
        text(&first),
        text(&second)
    );
    assert_exit(&first, 0);
    assert_exit(&second, 0);
    let err = String::from_utf8_lossy(&first.stderr);
    assert!(err.contains("keeping the lease"), "{err}");
}

/// `--orphans kill`: at the command's exit the rest of its group is sent
/// the signal, and killed after --grace if it ignores it; fence exits with
/// the command's code once they are gone, and releases.
#[test]
fn orphans_kill_ends_the_group_at_the_commands_exit() {
    let s = Scratch::new("group-kill");
    let url = s.url();
    let (polite, stubborn) = (s.path("polite.pid"), s.path("stubborn.pid"));
    let script = format!(
        "sh -c 'echo $$ > {}; sleep 20' >/dev/null 2>&1 & {} {}; {}; exit 3",
        polite.display(),
        term_ignoring_member(&stubborn),
        wait_written(&polite),
        wait_written(&stubborn),
    );
    let started = Instant::now();
    let out = Command::new(FENCE)
        .args(resource_args(
            "run",
            &url,
            "nightly",
            &[
                "--orphans",
                "kill",
                "--grace",
                "1s",
                "--",
                "sh",
                "-c",
                &script,
            ],
        ))
        .output()
        .unwrap();
    assert_exit(&out, 3);
    assert!(!alive(&polite), "the member outlived fence: {}", text(&out));
    assert!(!alive(&stubborn), "the TERM-ignoring member outlived fence");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let holder = Command::new(FENCE)
        .args(resource_args("holder", &url, "nightly", &["--json"]))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&holder.stdout).trim(), "null");
}

/// A lost lease ends every member: the command dies on SIGTERM at once,
/// a member that ignores SIGTERM is killed after --grace all the same, and
/// fence exits (122) only once it is gone. For `run` and `lead`.
fn a_lost_lease_kills_a_term_ignoring_member(command: &str) {
    let s = Scratch::new(&format!("group-lost-{command}"));
    let url = s.url();
    let member = s.path("member.pid");
    let script = format!(
        "{} {}; {}; exec sleep 30",
        term_ignoring_member(&member),
        wait_written(&member),
        release_own_lease(),
    );
    let mut args = resource_args(command, &url, "nightly", &["--ttl", "1s", "--grace", "1s"]);
    args.extend(["--", "sh", "-c", &script]);
    let started = Instant::now();
    let out: Output = Command::new(FENCE).args(&args).output().unwrap();
    assert_exit(&out, LEASE_LOST);
    assert!(
        !alive(&member),
        "a member of the group outlived the lost lease: {}",
        text(&out)
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_lost_lease_kills_a_term_ignoring_member_run() {
    a_lost_lease_kills_a_term_ignoring_member("run");
}

#[test]
fn a_lost_term_kills_a_term_ignoring_member_lead() {
    a_lost_lease_kills_a_term_ignoring_member("lead");
}

/// `fence lead` on Redis: the leader's command starts a child that starts
/// a grandchild in the background and exits; the term must last until the
/// grandchild is done, so the next candidate's command starts after it.
#[test]
fn a_grandchild_keeps_the_term_until_it_ends_lead_on_redis() {
    let server = fencing_harness::env::REDIS_AOF;
    if server.skipped() {
        return;
    }
    let redis = server.endpoint();
    let resource = fencing_testkit::unique_name("group-lead");
    let probe = Command::new(FENCE)
        .args(resource_args("holder", &redis, &resource, &[]))
        .output()
        .unwrap();
    if !probe.status.success() {
        server.unavailable(&text(&probe));
    }

    let s = Scratch::new("group-grandchild");
    let (log, go) = (s.path("log"), s.path("go"));
    s.write(
        "grandchild.sh",
        &format!(
            "{}; echo grandchild-done >> {}\n",
            wait_for(&go),
            log.display()
        ),
    );
    s.write(
        "child.sh",
        &format!(
            "sh {} >/dev/null 2>&1 &\n",
            s.path("grandchild.sh").display()
        ),
    );
    let leader = format!(
        "sh {}; echo leader-done >> {}",
        s.path("child.sh").display(),
        log.display()
    );
    let lead = |candidate: &str, script: &str| {
        let mut args = resource_args("lead", &redis, &resource, &["--ttl", "1s"]);
        args.extend(["--candidate", candidate, "--", "sh", "-c", script]);
        spawn(&args)
    };
    let a = lead("a", &leader);
    await_line(&log, "leader-done");

    let mut b = lead("b", &format!("echo b-start >> {}", log.display()));
    // As above: b would get in within milliseconds if a's term had ended.
    let b_done_early = exits_within(&mut b, Duration::from_secs(3));
    std::fs::write(&go, "").unwrap();

    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert_eq!(
        lines(&log),
        ["leader-done", "grandchild-done", "b-start"],
        "b led beside a's grandchild (b exited early: {b_done_early})\na: {}\nb: {}",
        text(&a),
        text(&b)
    );
    assert_exit(&a, 0);
    assert_exit(&b, 0);
}

/// A member that exited but that nobody reaps (its parent left the group
/// with `setsid` and never waits; pid 1 in a container without an init
/// leaves orphans so too) cannot act: it must not keep the lease forever.
/// The parent, out of the group, is not waited for: the documented limit.
#[test]
fn an_unreaped_zombie_does_not_hold_the_lease() {
    let s = Scratch::new("group-zombie");
    let url = s.url();
    let outside = s.path("outside.pid");
    let script = format!(
        "sh -c 'echo $$ > {}; (exit 0) & exec setsid sleep 20' >/dev/null 2>&1 & {}",
        outside.display(),
        wait_written(&outside),
    );
    let out = Command::new(FENCE)
        .args(resource_args(
            "run",
            &url,
            "nightly",
            &["--", "sh", "-c", &script],
        ))
        .output()
        .unwrap();
    let outside_alive = alive(&outside);
    let pid = std::fs::read_to_string(&outside).unwrap();
    let _ = Command::new("kill").arg(pid.trim()).status();
    assert_exit(&out, 0);
    assert!(
        outside_alive,
        "fence waited for the zombie until its parent exited: {}",
        text(&out)
    );
}

/// Sends `signal` to the process `child`.
fn send(child: &Child, signal: Signal) {
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
    kill(pid, signal).expect("signal fence");
}

/// Waits (bounded) until `file` has something in it.
fn await_written(file: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(file).map_or(true, |s| s.trim().is_empty()) {
        assert!(Instant::now() < deadline, "{file:?} never written");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills the process whose pid `file` holds, if the test left it running.
fn kill_left_over(file: &Path) {
    let pid = std::fs::read_to_string(file).ok();
    if let Some(pid) = pid.and_then(|p| p.trim().parse().ok()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// A closed ssh session (SIGHUP), Ctrl-C, Ctrl-\ and `kill`: fence passes
/// the signal it got on to the command's group, kills what is left after
/// --grace, releases the lease and exits 128 + the signal. The command
/// logs each signal and keeps going, so only the SIGKILL ends it; had
/// fence died of the signal instead, it would run on unrenewed, and the
/// next holder's job beside it.
#[test]
fn a_signal_to_fence_ends_the_group_and_releases_the_lease() {
    let s = Scratch::new("group-signals");
    let url = s.url();
    for signal in [
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGTERM,
    ] {
        let name = &signal.as_str()[3..];
        let (pid, log) = (
            s.path(&format!("{name}.pid")),
            s.path(&format!("{name}.log")),
        );
        let traps: String = ["HUP", "INT", "QUIT", "TERM"]
            .iter()
            .map(|t| format!("trap 'echo {t} >> {}' {t}; ", log.display()))
            .collect();
        let script = format!(
            // In the scratch directory: a SIGQUIT's core dump, if any, lands there.
            "cd {}; {traps}echo $$ > {}; i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done",
            s.dir(),
            pid.display()
        );
        let fence = spawn(&resource_args(
            "run",
            &url,
            name,
            &["--grace", "500ms", "--", "sh", "-c", &script],
        ));
        await_written(&pid);
        send(&fence, signal);
        // The command holds fence's stderr: read it once the command is
        // dead, and whether it is alive once fence is.
        let mut fence = fence;
        let status = fence.wait().unwrap();
        let leader_alive = alive(&pid);
        kill_left_over(&pid);
        let out = fence.wait_with_output().unwrap();
        let out = Output { status, ..out };
        assert_eq!(
            out.status.code(),
            Some(128 + signal as i32),
            "fence got {signal}; the command is {}\n{}",
            if leader_alive {
                "still running"
            } else {
                "gone"
            },
            text(&out)
        );
        assert!(!leader_alive, "the command outlived fence: {}", text(&out));
        assert_eq!(lines(&log), [name], "what the group got: {}", text(&out));
        let holder = Command::new(FENCE)
            .args(resource_args("holder", &url, name, &["--json"]))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&holder.stdout).trim(),
            "null",
            "not released after {signal}"
        );
    }
}

/// fence cannot act on SIGKILL (nor on the OOM killer's): the kernel ends
/// the command (the group's leader) when fence dies, and fence's watcher
/// the rest of the group (here a job left running that ignores SIGTERM),
/// long before the TTL would let the next holder in.
#[test]
fn a_killed_fence_takes_its_command_with_it() {
    let s = Scratch::new("group-sigkill");
    let url = s.url();
    let (pid, member) = (s.path("command.pid"), s.path("member.pid"));
    let script = format!(
        "{} {}; echo $$ > {}; exec sleep 30 2>/dev/null",
        term_ignoring_member(&member),
        wait_written(&member),
        pid.display()
    );
    let mut fence = spawn(&resource_args(
        "run",
        &url,
        "nightly",
        &["--ttl", "30s", "--", "sh", "-c", &script],
    ));
    await_written(&pid);
    send(&fence, Signal::SIGKILL);
    fence.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while (alive(&pid) || alive(&member)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (command_alive, member_alive) = (alive(&pid), alive(&member));
    kill_left_over(&pid);
    kill_left_over(&member);
    assert!(
        !command_alive && !member_alive,
        "2 s after fence was killed (TTL 30 s), still running: the command {command_alive}, \
         the job it left {member_alive}"
    );
}

/// One SIGINT listener for the whole run: a SIGINT that arrives while
/// fence is busy with another turn of its loop (here: stopped with
/// SIGSTOP until its probe of the group is due too, so that both are ready
/// when it resumes) still reaches the group. The member that gets them is
/// a job the command left running, so fence is probing; `env
/// --default-signal` undoes the SIGINT a shell's `&` ignores.
#[test]
fn every_sigint_reaches_the_group_whatever_turn_it_lands_on() {
    let s = Scratch::new("group-sigint");
    let url = s.url();
    let (pid, log, go) = (s.path("job.pid"), s.path("log"), s.path("go"));
    let job = format!(
        "env --default-signal=INT sh -c 'trap \"echo INT >> {log}\" INT; echo $$ > {pid}; {}' >/dev/null 2>&1 & {}",
        wait_for(&go),
        wait_written(&pid),
        log = log.display(),
        pid = pid.display(),
    );
    let fence = spawn(&resource_args(
        "run",
        &url,
        "nightly",
        &["--grace", "20s", "--", "sh", "-c", &job],
    ));
    await_written(&pid);
    const ROUNDS: usize = 5;
    let mut lost = None;
    for round in 1..=ROUNDS {
        send(&fence, Signal::SIGSTOP);
        // Past the longest gap between two probes of the group.
        std::thread::sleep(Duration::from_millis(600));
        send(&fence, Signal::SIGINT);
        send(&fence, Signal::SIGCONT);
        let deadline = Instant::now() + Duration::from_secs(3);
        while lines(&log).len() < round && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if lines(&log).len() < round {
            lost = Some(round);
            break;
        }
    }
    std::fs::write(&go, "").unwrap();
    let out = fence.wait_with_output().unwrap();
    kill_left_over(&pid);
    assert_eq!(
        lost,
        None,
        "SIGINT number {} of {ROUNDS} never reached the group: {}",
        lost.unwrap_or_default(),
        text(&out)
    );
    assert_exit(&out, 130);
}

/// A panic in fence (here in a task, which tokio alone would survive with
/// the lease unrenewed) ends the group as a lost lease does, SIGKILL after
/// --grace, before fence exits 120. `FENCE_TEST_PANIC_AFTER` exists in
/// debug builds only.
#[test]
fn a_panic_in_fence_ends_the_group() {
    let s = Scratch::new("group-panic");
    let url = s.url();
    let member = s.path("member.pid");
    let script = format!(
        "{} {}; exec sleep 30 2>/dev/null",
        term_ignoring_member(&member),
        wait_written(&member)
    );
    let mut fence = Command::new(FENCE)
        .args(resource_args(
            "run",
            &url,
            "nightly",
            &["--grace", "500ms", "--", "sh", "-c", &script],
        ))
        .env("FENCE_TEST_PANIC_AFTER", "300ms")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fence");
    await_written(&member);
    let exited = exits_within(&mut fence, Duration::from_secs(5));
    let member_alive = alive(&member);
    kill_left_over(&member);
    if !exited {
        let _ = fence.kill();
    }
    let out = fence.wait_with_output().unwrap();
    assert!(
        exited,
        "fence still ran 5 s after its panic: {}",
        text(&out)
    );
    assert_exit(&out, common::RUN_FAILED);
    assert!(
        !member_alive,
        "a member of the group outlived the panic: {}",
        text(&out)
    );
}

/// fence cannot wait for its command (the wait fails as ECHILD makes it
/// when something else reaped the child; `FENCE_TEST_WAIT_FAILS`, debug
/// builds only, fails it once the command has exited): the rest of the
/// group, here a job that ignores SIGTERM, is ended all the same (SIGTERM,
/// SIGKILL after --grace) before fence exits 120. Left running, it would
/// hold the token with nothing renewing or watching the lease.
#[test]
fn a_failed_wait_for_the_command_still_ends_its_group() {
    let s = Scratch::new("group-wait-fails");
    let member = s.path("member.pid");
    let script = format!(
        "{} {}; exit 0",
        term_ignoring_member(&member),
        wait_written(&member)
    );
    let started = Instant::now();
    let out = Command::new(FENCE)
        .args(resource_args(
            "run",
            &s.url(),
            "nightly",
            &["--grace", "500ms", "--", "sh", "-c", &script],
        ))
        .env("FENCE_TEST_WAIT_FAILS", "1")
        .output()
        .expect("run fence");
    let member_alive = alive(&member);
    kill_left_over(&member);
    assert_exit(&out, common::RUN_FAILED);
    assert!(
        !member_alive,
        "a member of the group outlived fence's failed wait: {}",
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot wait for the command"),
        "{}",
        text(&out)
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

/// The state letter `/proc` shows for `pid` (`T`: stopped).
fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Ctrl-Z reaches only fence's process group, not the command's. fence
/// must stop the command's group before it stops itself: a stopped fence
/// renews nothing, and the next holder gets in beside a command still
/// writing. Continued within the lease, fence continues the group; once
/// the next holder took the lease meanwhile, the group is ended without
/// ever running again.
#[test]
fn ctrl_z_stops_the_command_and_a_lost_lease_never_lets_it_run_again() {
    let s = Scratch::new("group-tstp");
    let url = s.url();
    let (pid, log) = (s.path("a.pid"), s.path("log"));
    let writer = format!(
        "echo $$ > {pid}; i=0; while [ $i -lt 300 ]; do echo A >> {log}; sleep 0.05; i=$((i+1)); done",
        pid = pid.display(),
        log = log.display()
    );
    let mut a = spawn(&resource_args(
        "run",
        &url,
        "nightly",
        &["--ttl", "2s", "--grace", "500ms", "--", "sh", "-c", &writer],
    ));
    await_written(&pid);
    let written = || lines(&log).len();

    // Stopped briefly, well within the TTL: the command stops too, and
    // runs on once fence is continued.
    send(&a, Signal::SIGTSTP);
    std::thread::sleep(Duration::from_millis(250));
    let (fence_state, before) = (state_of(a.id()), written());
    std::thread::sleep(Duration::from_millis(300));
    let during = written() - before;
    send(&a, Signal::SIGCONT);
    let deadline = Instant::now() + Duration::from_secs(3);
    while written() == before + during && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let resumed = written() > before + during;
    if during > 0 || !resumed {
        let _ = a.kill();
        kill_left_over(&pid);
    }
    assert_eq!(fence_state, Some('T'), "fence did not stop on SIGTSTP");
    assert_eq!(
        during, 0,
        "the command wrote {during} lines while fence was stopped"
    );
    assert!(resumed, "the command did not run on after SIGCONT");

    // Stopped past the TTL: the next holder gets the lease and runs.
    send(&a, Signal::SIGTSTP);
    let b = Command::new(FENCE)
        .args(resource_args(
            "run",
            &url,
            "nightly",
            &[
                "--ttl",
                "5s",
                "--wait",
                "10s",
                "--",
                "sh",
                "-c",
                &format!(
                    "echo B-start >> {log}; sleep 0.5; echo B-end >> {log}",
                    log = log.display()
                ),
            ],
        ))
        .output()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    send(&a, Signal::SIGCONT);
    let exited = exits_within(&mut a, Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    let a_alive = alive(&pid);
    kill_left_over(&pid);
    if !exited {
        let _ = a.kill();
    }
    let a = a.wait_with_output().unwrap();
    let all = lines(&log);
    let after_b: Vec<_> = all
        .iter()
        .skip_while(|l| *l != "B-start")
        .filter(|l| *l == "A")
        .collect();
    assert_exit(&b, 0);
    assert!(
        after_b.is_empty(),
        "A's command wrote {} lines once B held the lease (B: {})\nA: {}",
        after_b.len(),
        text(&b),
        text(&a)
    );
    assert!(
        !a_alive,
        "A's command outlived its lost lease: {}",
        text(&a)
    );
    assert_exit(&a, LEASE_LOST);
}

/// `fence run` as a background job of a terminal with `stty tostop`: a
/// SIGHUP makes fence write its line to the terminal, which from the
/// background raises SIGTTOU. fence finishes all the same (the signal
/// passed on, exit 129): caught, SIGTTOU restarted that write for ever;
/// left to its default, it would stop fence alone with the group running.
/// A real terminal: `common::pty`, bash with job control.
#[test]
fn in_the_background_with_tostop_fence_still_writes_and_finishes() {
    let s = Scratch::new("group-tostop");
    let pid = s.path("command.pid");
    let fence = format!(
        "{FENCE} run --issuer {} --resource r --grace 500ms -- sh -c 'echo $$ > {}; sleep 20'",
        s.url(),
        pid.display()
    );
    let job = format!(
        "set -m; stty tostop; {fence} & f=$!; {}; kill -HUP $f; wait $f; echo rc=$?",
        wait_written(&pid)
    );
    // A fence that never finishes fails the test instead of hanging it.
    let seen = common::pty::session(&job, &[]);
    kill_left_over(&pid);
    assert!(
        seen.contains("rc=129"),
        "fence in the background with tostop did not finish after SIGHUP within 30 s:\n{seen}"
    );
    assert!(
        seen.contains("got SIGHUP"),
        "fence's line was not written:\n{seen}"
    );
}

/// fence killed between the command's start and its watcher's (a test
/// hook waits 300 ms there, then SIGKILLs fence): the command, which
/// waits stopped for the watcher, is killed with fence and never runs.
#[test]
fn a_fence_killed_before_its_watcher_started_never_runs_the_command() {
    let s = Scratch::new("group-before-watch");
    let ran = s.path("ran");
    let out = Command::new(FENCE)
        .args(resource_args(
            "run",
            &s.url(),
            "r",
            &["--", "sh", "-c", &format!("echo ran > {}", ran.display())],
        ))
        .env("FENCE_TEST_KILL_BEFORE_WATCH", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run fence");
    assert_eq!(out.status.signal(), Some(9), "{}", text(&out));
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !ran.exists(),
        "the command ran though fence died before its watcher started"
    );
}
