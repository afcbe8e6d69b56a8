//! `fence lead`, run as a user runs it: the real binary, a real SQLite file
//! as both the issuer and the fenced store.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{FENCE, LEASE_LOST, RUN_FAILED, Scratch, fence, json, text};

fn lead(url: &str, candidate: &str, extra: &[&str], script: &str) -> Command {
    let mut cmd = Command::new(FENCE);
    cmd.args(["lead", "--issuer", url, "--resource", "jobs/leader"])
        .args(["--ttl", "1s", "--candidate", candidate])
        .args(extra)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn one_leader_at_a_time_each_term_fenced_with_a_higher_token() {
    let s = Scratch::new("terms");
    terms(&s.url(), &s);
}

/// The same on one S3 bucket as both the issuer (its lease record) and the
/// fenced store.
#[tokio::test]
async fn one_leader_at_a_time_on_a_bucket() {
    let Some(bucket) = common::emulator_bucket(&fencing_harness::env::S3).await else {
        return;
    };
    let s = Scratch::new("bucket-terms");
    terms(&format!("{}&emulator=true", bucket.url), &s);
}

/// Three candidates lead `url` in turn, each term fencing `url#state`.
fn terms(url: &str, s: &Scratch) {
    let url = url.to_owned();
    let log = s.path("log").display().to_string();
    let fence_arg = format!("{url}#state");
    // Each term: log its start with the token, work a moment, log its end.
    let script = format!(
        "echo \"start $FENCING_TOKEN\" >> {log}; sleep 0.4; echo \"end $FENCING_TOKEN\" >> {log}"
    );
    let leaders: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            lead(&url, name, &["--fence", &fence_arg], &script)
                .spawn()
                .expect("start fence lead")
        })
        .collect();
    for leader in leaders {
        let out = leader.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
    }

    let lines = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 6, "{lines:?}");
    let mut tokens = Vec::new();
    for term in lines.chunks(2) {
        let start = term[0].strip_prefix("start ").expect("a start");
        assert_eq!(term[1], format!("end {start}"), "terms overlap: {lines:?}");
        tokens.push(start.parse::<u64>().unwrap());
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");

    // Every term fenced the store before its command started.
    let mark = json(&fence(&["mark", "--store", &url, "state", "--json"]));
    assert_eq!(mark["mark"], tokens[2]);
}

#[test]
fn a_lost_term_signals_the_command_and_exits_lease_lost_and_the_exit_code_passes_through() {
    let s = Scratch::new("lost");
    let url = s.url();
    // The command gives its own term up behind fence's back: the next
    // renewal is refused, and the command must be stopped.
    let script = format!(
        "{FENCE} release --issuer \"$FENCING_ISSUER\" --resource \"$FENCING_RESOURCE\" \
         --holder \"$FENCING_HOLDER\" --token \"$FENCING_TOKEN\" >/dev/null; \
         trap 'echo got-term; kill $!; exit 0' TERM; sleep 30 >/dev/null 2>&1 & wait"
    );
    let started = Instant::now();
    let out = lead(&url, "a", &["--grace", "5s"], &script)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(LEASE_LOST), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("got-term"),
        "{}",
        text(&out)
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );

    let out = lead(&url, "b", &[], "exit 7").output().unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("b leads \"jobs/leader\""), "{err}");
}

/// Bad input to `lead` is fence's own failure (120), not a 2 its command
/// could have exited with.
#[test]
fn a_malformed_fence_is_bad_input() {
    let out = fence(&[
        "lead",
        "--issuer",
        "sqlite:///tmp/x.db",
        "--resource",
        "r",
        "--fence",
        "no-key-here",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(RUN_FAILED), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("STORE_URL#KEY"));
}

/// A lost term stops the command's own children too: here the shell waits
/// on a job of its own that would leave a mark after 3 s. The shell alone
/// dying on SIGTERM is not enough; the job must not outlive the term.
#[test]
fn a_lost_term_stops_the_commands_children_too() {
    let s = Scratch::new("group");
    let url = s.url();
    let marker = s.path("marker");
    let script = format!(
        "{FENCE} release --issuer \"$FENCING_ISSUER\" --resource \"$FENCING_RESOURCE\" \
         --holder \"$FENCING_HOLDER\" --token \"$FENCING_TOKEN\" >/dev/null; \
         sh -c 'sleep 3; touch {}'; true",
        marker.display()
    );
    let out = lead(&url, "a", &["--grace", "1s"], &script)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(LEASE_LOST), "{}", text(&out));
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        !marker.exists(),
        "the command's child outlived the lost term: {}",
        text(&out)
    );
}
