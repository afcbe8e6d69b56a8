//! `Error::Busy` ("held by someone else: try again when it is free") exits
//! with code 5, like a resource held past `--wait`: the real binary, real
//! SQLite files.

use std::path::PathBuf;
use std::process::{Command, Output};

const FENCE: &str = env!("CARGO_BIN_EXE_fence");

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("fence-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
    fn url(&self, db: &str) -> String {
        format!("sqlite://{}", self.0.join(db).display())
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

/// Migrating onto an issuer where the resource is already held: raising
/// the new issuer's floor needs the resource free, so it is refused as
/// busy (exit 5, not 2: the input is fine, the timing is not), and
/// succeeds once the holder has released it.
#[test]
fn a_floor_on_a_held_resource_is_busy_exit_5() {
    let s = Scratch::new("busy");
    let (old, new) = (s.url("old.sqlite"), s.url("new.sqlite"));
    let held = fence(&[
        "acquire",
        "--issuer",
        &new,
        "--resource",
        "jobs/a",
        "--ttl",
        "60s",
        "--json",
    ]);
    assert!(held.status.success(), "{}", text(&held));
    let lease: serde_json::Value = serde_json::from_slice(&held.stdout).expect("json");

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
    assert_eq!(busy.status.code(), Some(5), "{}", text(&busy));
    let stderr = String::from_utf8_lossy(&busy.stderr);
    assert!(
        stderr.contains("\"jobs/a\" is held") && stderr.contains("raise_floor"),
        "{stderr}"
    );

    let released = fence(&[
        "release",
        "--issuer",
        &new,
        "--resource",
        "jobs/a",
        "--holder",
        lease["holder"].as_str().expect("holder"),
        "--token",
        &lease["token"].to_string(),
    ]);
    assert!(released.status.success(), "{}", text(&released));
    let done = migrate();
    assert!(done.status.success(), "{}", text(&done));
}
