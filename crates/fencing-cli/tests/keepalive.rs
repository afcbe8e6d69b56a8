//! `fence run` and `acquire --hold` keep their lease alive (the core's
//! `KeepAlive`) and report it lost: the real binary, a real SQLite file.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const FENCE: &str = env!("CARGO_BIN_EXE_fence");

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("fence-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
    fn url(&self) -> String {
        format!("sqlite://{}", self.0.join("db.sqlite").display())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fence(args: &[&str]) -> Output {
    Command::new(FENCE).args(args).output().expect("run fence")
}

fn text(out: &Output) -> String {
    format!(
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn kill(signal: &str, group: &str) {
    assert!(
        Command::new("kill")
            .args([signal, "--", group])
            .status()
            .unwrap()
            .success()
    );
}

/// A command that runs for several TTLs keeps the lease all along.
#[test]
fn run_keeps_the_lease_past_its_ttl() {
    let s = Scratch::new("keep-run");
    let url = s.url();
    let run = Command::new(FENCE)
        .args([
            "run",
            "--issuer",
            &url,
            "--resource",
            "job",
            "--ttl",
            "400ms",
            "--",
            "sleep",
            "1.5",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let other = fence(&[
        "acquire",
        "--issuer",
        &url,
        "--resource",
        "job",
        "--ttl",
        "5s",
    ]);
    assert_eq!(
        other.status.code(),
        Some(5),
        "granted during the run, 2.5 TTLs in: {}",
        text(&other)
    );
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let free = fence(&["holder", "--issuer", &url, "--resource", "job", "--json"]);
    assert_eq!(String::from_utf8_lossy(&free.stdout).trim(), "null");
}

/// `acquire --hold` stopped (SIGSTOP) past its TTL while another holder
/// takes the resource: when it wakes it reports the lease lost (exit 4)
/// instead of renewing, and the new holder keeps it.
#[test]
fn a_held_lease_paused_past_its_deadline_is_lost() {
    let s = Scratch::new("keep-hold");
    let url = s.url();
    let mut hold = Command::new(FENCE)
        .args([
            "acquire",
            "--issuer",
            &url,
            "--resource",
            "job",
            "--ttl",
            "1s",
            "--hold",
            "--json",
        ])
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let group = format!("-{}", hold.id());
    std::thread::sleep(Duration::from_millis(600));
    kill("-STOP", &group);
    let next = fence(&[
        "acquire",
        "--issuer",
        &url,
        "--resource",
        "job",
        "--ttl",
        "30s",
        "--wait",
        "10s",
        "--json",
    ]);
    kill("-CONT", &group);
    assert!(next.status.success(), "{}", text(&next));

    let status = hold.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(hold.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(4), "stderr: {stderr}");
    assert!(stderr.contains("no longer held"), "{stderr}");
    let next: serde_json::Value = serde_json::from_slice(&next.stdout).unwrap();
    let holder = fence(&["holder", "--issuer", &url, "--resource", "job", "--json"]);
    let holder: serde_json::Value = serde_json::from_slice(&holder.stdout).unwrap();
    assert_eq!(
        holder["token"], next["token"],
        "the new holder was disturbed"
    );
}
