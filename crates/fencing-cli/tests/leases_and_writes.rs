//! `fence run`, `acquire`/`renew`/`release`/`holder` and `put`/`get`/`mark`/
//! `fence`, run as a user runs them: the real binary, a real SQLite file.

mod common;

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{
    FENCE, HELD, LEASE_LOST, RUN_FAILED, Scratch, assert_exit, fence, json, on_resource, put,
    resource_args, text,
};

#[test]
fn put_get_mark_fence_and_the_stale_exit_code() {
    let s = Scratch::new("kv");
    let url = s.url();
    let ok = put(&url, "k", "5", "hello");
    assert_exit(&ok, 0);
    let stale = put(&url, "k", "4", "zombie");
    assert_exit(&stale, 3);
    let err = String::from_utf8_lossy(&stale.stderr);
    assert!(
        err.contains("presented 4")
            && err.contains("already accepted 5")
            && err.contains("nothing was written"),
        "{err}"
    );

    let got = json(&fence(&["get", "--store", &url, "k", "--json"]));
    assert_eq!(
        got,
        serde_json::json!({"key": "k", "token": 5, "value": "hello"})
    );

    let fenced = fence(&["fence", "--store", &url, "k", "--token", "9"]);
    assert_exit(&fenced, 0);
    let mark = json(&fence(&["mark", "--store", &url, "k", "--json"]));
    assert_eq!(mark["mark"], 9);
    assert_eq!(put(&url, "k", "8", "x").status.code(), Some(3));
    assert_eq!(
        fence(&["get", "--store", &url, "missing"]).status.code(),
        Some(6)
    );

    // Bad input: exit 2 with a message, nothing written.
    let big = put(&url, "k", "18446744073709551615", "x");
    assert_exit(&big, 2);
    assert!(String::from_utf8_lossy(&big.stderr).contains("out of range"));
    let bad_url = fence(&["get", "--store", "ftp://x", "k"]);
    assert_eq!(bad_url.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_url.stderr).contains("is not a store URL"));
}

/// `fence floor`: none at first; raised, it refuses at or below it on
/// every key (exit 3) and removes the marks it covers; never lowered
/// (exit 2).
#[test]
fn floor_refuses_on_every_key_and_removes_the_marks_it_covers() {
    let s = Scratch::new("floor");
    let url = s.url();
    assert_exit(&put(&url, "live", "5", "kept"), 0);
    assert_exit(
        &fence(&["fence", "--store", &url, "only-fenced", "--token", "7"]),
        0,
    );
    assert_eq!(
        json(&fence(&["floor", "--store", &url, "--json"])),
        serde_json::json!({"floor": null})
    );
    let raised = fence(&[
        "floor",
        "--store",
        &url,
        "--raise",
        "10",
        "--remove-marks",
        "--json",
    ]);
    assert_eq!(
        json(&raised),
        serde_json::json!({"floor": 10, "removed": 1})
    );
    let mark = json(&fence(&["mark", "--store", &url, "only-fenced", "--json"]));
    assert_eq!(mark["mark"], serde_json::Value::Null, "its mark went");
    assert_exit(&put(&url, "only-fenced", "7", "zombie"), 3);
    assert_exit(&put(&url, "never-written", "9", "zombie"), 3);
    assert_exit(&put(&url, "live", "11", "next"), 0);
    let lowered = fence(&["floor", "--store", &url, "--raise", "5"]);
    assert_exit(&lowered, 2);
    assert!(String::from_utf8_lossy(&lowered.stderr).contains("never lowered"));
}

#[test]
fn acquire_renew_release_holder() {
    let s = Scratch::new("lease");
    let url = s.url();
    let job = |command, more: &[&str]| on_resource(command, &url, "job", more);
    let out = job("acquire", &["--ttl", "30s", "--json"]);
    assert_exit(&out, 0);
    let lease = json(&out);
    let (token, holder) = (
        lease["token"].to_string(),
        lease["holder"].as_str().unwrap().to_owned(),
    );
    let first: u64 = token.parse().unwrap();

    let busy = job("acquire", &[]);
    assert_exit(&busy, HELD);
    assert!(String::from_utf8_lossy(&busy.stderr).contains(&holder));

    let who = job("holder", &["--json"]);
    let who = json(&who);
    assert_eq!(who["holder"], holder.as_str());

    let renew = job("renew", &["--holder", &holder, "--token", &token, "--json"]);
    assert_exit(&renew, 0);
    let wrong = job("renew", &["--holder", "someone-else", "--token", &token]);
    assert_exit(&wrong, LEASE_LOST);

    let release = job("release", &["--holder", &holder, "--token", &token]);
    assert_exit(&release, 0);
    let free = job("holder", &["--json"]);
    assert_eq!(String::from_utf8_lossy(&free.stdout).trim(), "null");
    let next = job("acquire", &["--json"]);
    let next = json(&next);
    assert!(next["token"].as_u64().unwrap() > first, "{next}");
}

/// Without `--key`, `fence token` would print whoever holds the resource,
/// one of our own leases too: a script that left it out would write with
/// another holder's token. So it is a usage error, and no token is printed.
#[test]
fn token_without_key_is_a_usage_error() {
    let s = Scratch::new("token-no-key");
    let url = s.url();
    let held = on_resource("acquire", &url, "report", &["--ttl", "30s"]);
    assert_exit(&held, 0);
    let out = on_resource("token", &url, "report", &[]);
    assert_exit(&out, 2);
    assert!(out.stdout.is_empty(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--key"),
        "{}",
        text(&out)
    );
}

#[test]
fn run_passes_the_token_releases_and_keeps_the_exit_code() {
    let s = Scratch::new("run");
    let url = s.url();
    let job = |command, more: &[&str]| on_resource(command, &url, "job", more);
    let script = format!(
        "{FENCE} put --store {url} job-output --token $FENCING_TOKEN \"ran with $FENCING_TOKEN\" && exit 7"
    );
    let out = job("run", &["--ttl", "2s", "--", "sh", "-c", &script]);
    assert_exit(&out, 7);
    let got = fence(&["get", "--store", &url, "job-output", "--json"]);
    let got = json(&got);
    assert_eq!(got["value"], format!("ran with {}", got["token"]));
    let free = job("holder", &["--json"]);
    assert_eq!(
        String::from_utf8_lossy(&free.stdout).trim(),
        "null",
        "released after the command"
    );

    // Held by someone else: not run, exit 121.
    let held = job("acquire", &["--ttl", "30s"]);
    assert!(held.status.success());
    let marker = s.path("ran");
    let touch = format!("touch {}", marker.display());
    let out = job("run", &["--", "sh", "-c", &touch]);
    assert_exit(&out, HELD);
    assert!(
        !marker.exists(),
        "the command ran although the lease was held"
    );
}

/// `run`'s own outcomes have codes of their own, apart from the 1 and 2 a
/// command exits with: fence failing (bad arguments, an issuer it cannot
/// open) is 120, a command that cannot start 127 as in a shell, and then
/// the lease is released.
#[test]
fn run_exits_apart_from_its_command_when_fence_itself_fails() {
    let s = Scratch::new("run-own");
    let url = s.url();
    let job = |command, more: &[&str]| on_resource(command, &url, "job", more);
    let bad_ttl = job("run", &["--ttl", "soon", "--", "true"]);
    assert_exit(&bad_ttl, RUN_FAILED);
    let nowhere = s.sqlite("no-such-dir/db.sqlite");
    let no_issuer = on_resource("run", &nowhere, "job", &["--", "true"]);
    assert_exit(&no_issuer, RUN_FAILED);
    let missing = job("run", &["--", "no-such-command-anywhere"]);
    assert_exit(&missing, 127);
    let free = job("holder", &["--json"]);
    assert_eq!(String::from_utf8_lossy(&free.stdout).trim(), "null");
}

/// A command may exit 120–122, 126, 127 or 128+N itself: `--status-file`
/// says whose code fence exits with, `command N` or `fence N`, for `run`
/// and `lead`, whichever way fence ends; a file fence cannot write fails
/// it (120) before the command runs.
#[test]
fn a_status_file_tells_the_commands_code_from_fences() {
    let s = Scratch::new("status-file");
    let url = s.url();
    let status = s.path("status");
    let status_arg = status.to_str().unwrap();
    let lose = format!(
        "{FENCE} release --issuer \"$FENCING_ISSUER\" --resource \"$FENCING_RESOURCE\" \
         --holder \"$FENCING_HOLDER\" --token \"$FENCING_TOKEN\" >/dev/null; sleep 10"
    );
    let lose = ["sh", "-c", &lose];
    let nowhere = s.sqlite("no-such-dir/db.sqlite");
    assert_exit(&on_resource("acquire", &url, "taken", &["--ttl", "60s"]), 0);
    /// `fence COMMAND --issuer ISSUER --resource RESOURCE -- ARGV`, the
    /// exit code and status line it must end with.
    struct Case<'a> {
        command: &'a str,
        issuer: &'a str,
        resource: &'a str,
        argv: &'a [&'a str],
        code: i32,
        line: &'a str,
    }
    let case = |command, issuer, resource, argv, code, line| Case {
        command,
        issuer,
        resource,
        argv,
        code,
        line,
    };
    let cases = [
        case(
            "run",
            &url,
            "job",
            &["sh", "-c", "exit 121"],
            121,
            "command 121",
        ),
        case(
            "run",
            &url,
            "job",
            &["sh", "-c", "exit 122"],
            122,
            "command 122",
        ),
        case(
            "run",
            &url,
            "job",
            &["sh", "-c", "exit 127"],
            127,
            "command 127",
        ),
        case("run", &url, "taken", &["true"], HELD, "fence 121"),
        case("run", &url, "job", &lose, LEASE_LOST, "fence 122"),
        case(
            "run",
            &url,
            "job",
            &["no-such-command-anywhere"],
            127,
            "fence 127",
        ),
        case("run", &nowhere, "job", &["true"], RUN_FAILED, "fence 120"),
        case(
            "lead",
            &url,
            "leader",
            &["sh", "-c", "exit 122"],
            122,
            "command 122",
        ),
    ];
    for Case {
        command,
        issuer,
        resource,
        argv,
        code,
        line,
    } in cases
    {
        std::fs::write(&status, "left from an earlier run\n").unwrap();
        let mut args = vec![
            "--ttl",
            "1s",
            "--grace",
            "500ms",
            "--status-file",
            status_arg,
        ];
        args.push("--");
        args.extend(argv);
        let out = on_resource(command, issuer, resource, &args);
        let written = std::fs::read_to_string(&status).unwrap();
        assert_eq!(
            (out.status.code(), written.as_str()),
            (Some(code), format!("{line}\n").as_str()),
            "fence {command} -- {argv:?}: {}",
            text(&out)
        );
    }

    let marker = s.path("ran");
    let touch = format!("touch {}", marker.display());
    let unwritable = s.path("no-such-dir/status");
    let out = on_resource(
        "run",
        &url,
        "job",
        &[
            "--status-file",
            unwritable.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &touch,
        ],
    );
    assert_exit(&out, RUN_FAILED);
    assert!(
        !marker.exists(),
        "the command ran although its status file cannot be written"
    );
}

/// `kill SIGNAL -- GROUP`: stops or resumes a whole process group.
fn kill(signal: &str, group: &str) {
    let status = Command::new("kill").args([signal, "--", group]).status();
    assert!(status.unwrap().success(), "kill {signal} -- {group}");
}

/// Stops (`-STOP`) or resumes (`-CONT`) a whole `fence run` job, as a
/// paused machine would: `fence`'s own process group, and the group its
/// command leads (`fence` starts the command in a group of its own).
fn pause_job(signal: &str, fence: &Child, group: &str) {
    let pid = fence.id();
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .expect("the children of fence");
    for child in children.split_whitespace() {
        kill(signal, &format!("-{child}"));
    }
    kill(signal, group);
}

/// `fence ARGS` started in a process group of its own (so `kill` stops its
/// command too), output piped, and the group to signal.
fn spawn_in_group(args: &[&str]) -> (Child, String) {
    let child = Command::new(FENCE)
        .args(args)
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let group = format!("-{}", child.id());
    (child, group)
}

/// Waits for a `fence` that must have exited with 4 (lease lost, "no
/// longer held"); `what` for the message.
fn assert_lost_lease(child: Child, what: &str) {
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(LEASE_LOST),
        "{what}; stderr: {stderr}"
    );
    assert!(stderr.contains("no longer held"), "{stderr}");
}

/// The batch job from the field: `fence run` is stopped (SIGSTOP) past its
/// TTL, a second run takes the lease and writes, and when the first wakes
/// its command's write is refused and `fence` exits with "lease lost".
#[test]
fn a_stopped_run_is_refused_after_it_wakes() {
    let s = Scratch::new("sigstop");
    let url = s.url();
    let result = s.path("zombie-exit-code");
    // The command writes once, then (after the pause) writes again with the
    // same token. SIGWINCH, which sh ignores, is the "lease lost" signal,
    // so the command really attempts its late write.
    let script = format!(
        "{FENCE} put --store {url} report --token $FENCING_TOKEN 'first run, early' || exit 1; \
         sleep 2; {FENCE} put --store {url} report --token $FENCING_TOKEN 'first run, late'; echo $? > {}",
        result.display()
    );
    let (first, group) = spawn_in_group(&resource_args(
        "run",
        &url,
        "report",
        &[
            "--ttl", "1s", "--signal", "SIGWINCH", "--grace", "20s", "--", "sh", "-c", &script,
        ],
    ));
    std::thread::sleep(Duration::from_millis(700));
    pause_job("-STOP", &first, &group);

    // Paused past its TTL: the second run gets the lease and writes.
    std::thread::sleep(Duration::from_millis(1600));
    let second_script =
        format!("{FENCE} put --store {url} report --token $FENCING_TOKEN 'second run'");
    let second = on_resource(
        "run",
        &url,
        "report",
        &[
            "--ttl",
            "10s",
            "--wait",
            "10s",
            "--",
            "sh",
            "-c",
            &second_script,
        ],
    );
    assert_exit(&second, 0);

    pause_job("-CONT", &first, &group);
    assert_lost_lease(first, "the first run must exit with 'lease lost'");

    let code = std::fs::read_to_string(&result).expect("the zombie command tried its late write");
    assert_eq!(
        code.trim(),
        "3",
        "the zombie's late write must be refused as stale"
    );
    let got = fence(&["get", "--store", &url, "report", "--json"]);
    let got = json(&got);
    assert_eq!(got["value"], "second run");
}

#[test]
fn a_closed_pipe_ends_quietly() {
    let s = Scratch::new("pipe");
    let url = s.url();
    let mut child = Command::new(FENCE)
        .args(resource_args("acquire", &url, "job", &[]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader (`| head -0`) is gone
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "{stderr}");
}

/// A command that runs for several TTLs keeps the lease all along.
#[test]
fn run_keeps_the_lease_past_its_ttl() {
    let s = Scratch::new("keep-run");
    let url = s.url();
    let job = |command, more: &[&str]| on_resource(command, &url, "job", more);
    let run = Command::new(FENCE)
        .args(resource_args(
            "run",
            &url,
            "job",
            &["--ttl", "1s", "--", "sleep", "3"],
        ))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    let other = job("acquire", &["--ttl", "5s"]);
    assert_eq!(
        other.status.code(),
        Some(HELD),
        "granted during the run, two TTLs in: {}",
        text(&other)
    );
    let out = run.wait_with_output().unwrap();
    assert_exit(&out, 0);
    let free = job("holder", &["--json"]);
    assert_eq!(String::from_utf8_lossy(&free.stdout).trim(), "null");
}

/// `acquire --hold` stopped (SIGSTOP) past its TTL while another holder
/// takes the resource: when it wakes it reports the lease lost (exit 122)
/// instead of renewing, and the new holder keeps it.
#[test]
fn a_held_lease_paused_past_its_deadline_is_lost() {
    let s = Scratch::new("keep-hold");
    let url = s.url();
    let job = |command, more: &[&str]| on_resource(command, &url, "job", more);
    let hold = resource_args("acquire", &url, "job", &["--ttl", "1s", "--hold", "--json"]);
    let (hold, group) = spawn_in_group(&hold);
    std::thread::sleep(Duration::from_millis(600));
    kill("-STOP", &group);
    let next = job("acquire", &["--ttl", "30s", "--wait", "10s", "--json"]);
    kill("-CONT", &group);
    assert_exit(&next, 0);

    assert_lost_lease(hold, "the paused holder must exit with 'lease lost'");
    let next = json(&next);
    let holder = job("holder", &["--json"]);
    let holder = json(&holder);
    assert_eq!(
        holder["token"], next["token"],
        "the new holder was disturbed"
    );
}

/// Migrating onto an issuer where the resource is already held: raising
/// the new issuer's floor needs the resource free, so it is refused as
/// busy (exit 121, not 2: the input is fine, the timing is not), and
/// succeeds once the holder has released it.
#[test]
fn a_floor_on_a_held_resource_is_busy_exit_5() {
    let s = Scratch::new("busy");
    let sqlite = |name: &str| format!("sqlite://{}", s.path(name).display());
    let (old, new) = (sqlite("old.sqlite"), sqlite("new.sqlite"));
    let held = on_resource("acquire", &new, "jobs/a", &["--ttl", "60s", "--json"]);
    assert_exit(&held, 0);
    let lease = json(&held);

    let migrate = || {
        fence(&[
            "migrate",
            "issuer",
            "--from",
            &old,
            "--to",
            &new,
            "--resource",
            "jobs/a",
        ])
    };
    let busy = migrate();
    assert_exit(&busy, HELD);
    let stderr = String::from_utf8_lossy(&busy.stderr);
    assert!(
        stderr.contains("\"jobs/a\" is held") && stderr.contains("raise_floor"),
        "{stderr}"
    );

    let released = on_resource(
        "release",
        &new,
        "jobs/a",
        &[
            "--holder",
            lease["holder"].as_str().expect("holder"),
            "--token",
            &lease["token"].to_string(),
        ],
    );
    assert_exit(&released, 0);
    let done = migrate();
    assert_exit(&done, 0);
}

/// `remove-idle` on a SQLite lease table: a name released long enough ago
/// is removed and its next grant is above every token it gave; a held one
/// is in use; one never used is absent; names also come from stdin.
#[test]
fn remove_idle_removes_only_idle_names_and_tokens_go_on_rising() {
    let s = Scratch::new("idle");
    let url = format!("sqlite://{}", s.path("leases.sqlite").display());
    let first = json(&on_resource("acquire", &url, "task-1", &["--json"]));
    let token = |lease: &serde_json::Value| lease["token"].as_u64().expect("a token");
    let released = on_resource(
        "release",
        &url,
        "task-1",
        &[
            "--holder",
            first["holder"].as_str().expect("holder"),
            "--token",
            &token(&first).to_string(),
        ],
    );
    assert_exit(&released, 0);
    assert_exit(
        &on_resource("acquire", &url, "task-held", &["--ttl", "60s"]),
        0,
    );
    std::thread::sleep(Duration::from_millis(1200));

    let swept = fence(&[
        "remove-idle",
        "--issuer",
        &url,
        "--idle",
        "1s",
        "task-1",
        "task-held",
        "task-never",
    ]);
    common::assert_prints(
        &swept,
        0,
        &[
            "removed \"task-1\"",
            "in-use \"task-held\"",
            "absent \"task-never\"",
        ],
    );
    let next = json(&on_resource("acquire", &url, "task-1", &["--json"]));
    assert!(token(&next) > token(&first), "{next} after {first}");

    let mut from_stdin = Command::new(FENCE)
        .args([
            "remove-idle",
            "--issuer",
            &url,
            "--idle",
            "1s",
            "--json",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("fence");
    use std::io::Write;
    let mut stdin = from_stdin.stdin.take().expect("stdin");
    stdin.write_all(b"task-never\n\n").expect("write");
    drop(stdin);
    let from_stdin = from_stdin.wait_with_output().expect("fence");
    assert_eq!(
        json(&from_stdin)["removal"],
        "absent",
        "{}",
        text(&from_stdin)
    );
}
