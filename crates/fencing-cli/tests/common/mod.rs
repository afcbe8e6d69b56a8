//! What the CLI tests share: the real `fence` binary run as a user runs it,
//! what it printed, a scratch directory, and a fresh bucket on an object
//! store emulator by URL. Each test binary uses its own part.
#![allow(dead_code)]

pub(crate) mod pty;
pub(crate) mod turns;

use std::path::PathBuf;
use std::process::{Command, Output};

use fencing_harness::env::Server;

/// The binary under test.
pub(crate) const FENCE: &str = env!("CARGO_BIN_EXE_fence");

/// `fence`'s exit codes for its own outcomes, apart from any code the
/// command of `run` or `lead` exits with: fence failed, the resource is
/// held, the lease was lost.
pub(crate) const RUN_FAILED: i32 = 120;
pub(crate) const HELD: i32 = 121;
pub(crate) const LEASE_LOST: i32 = 122;

/// `fence ARGS`, run to the end.
pub(crate) fn fence(args: &[&str]) -> Output {
    Command::new(FENCE).args(args).output().expect("run fence")
}

/// `fence put --store STORE KEY --token TOKEN VALUE`.
pub(crate) fn put(store: &str, key: &str, token: &str, value: &str) -> Output {
    fence(&["put", "--store", store, key, "--token", token, value])
}

/// `COMMAND --issuer ISSUER --resource RESOURCE MORE…`: the arguments of
/// the lease commands (`acquire`, `renew`, `release`, `holder`, `run`).
pub(crate) fn resource_args<'a>(
    command: &'a str,
    issuer: &'a str,
    resource: &'a str,
    more: &[&'a str],
) -> Vec<&'a str> {
    let head = [command, "--issuer", issuer, "--resource", resource];
    [&head[..], more].concat()
}

/// `fence` with [`resource_args`], run to the end.
pub(crate) fn on_resource(command: &str, issuer: &str, resource: &str, more: &[&str]) -> Output {
    fence(&resource_args(command, issuer, resource, more))
}

/// What `out` printed, for failure messages.
pub(crate) fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The JSON `out` printed; it must have succeeded.
pub(crate) fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", text(out));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// Asserts `out` exited with `code`.
pub(crate) fn assert_exit(out: &Output, code: i32) {
    assert_eq!(out.status.code(), Some(code), "{}", text(out));
}

/// Asserts `out` exited with `code` and printed each of `wanted` on stdout.
pub(crate) fn assert_prints(out: &Output, code: i32, wanted: &[&str]) {
    assert_exit(out, code);
    let stdout = String::from_utf8_lossy(&out.stdout);
    for w in wanted {
        assert!(stdout.contains(w), "missing {w:?} in {}", text(out));
    }
}

/// A directory of its own for one test, removed when dropped.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    /// A fresh `fence-cli-NAME-PID` under the temporary directory.
    pub(crate) fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("fence-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// A SQLite URL in the directory.
    pub(crate) fn url(&self) -> String {
        self.sqlite("db.sqlite")
    }

    /// The SQLite URL of the file `name` in the directory.
    pub(crate) fn sqlite(&self, name: &str) -> String {
        format!("sqlite://{}", self.path(name).display())
    }

    /// The path of `name` in the directory.
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The directory itself.
    pub(crate) fn dir(&self) -> &str {
        self.0.to_str().unwrap()
    }

    /// Writes `contents` to `path` in the directory, making its parents.
    pub(crate) fn write(&self, path: &str, contents: &str) -> &Self {
        let path = self.path(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
        self
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh bucket (or container) on an object-store emulator.
pub(crate) struct Bucket {
    /// Its name.
    pub(crate) name: String,
    /// `s3://NAME?endpoint=…`, `gs://…` or `az://…`, without `emulator=true`.
    pub(crate) url: String,
}

/// Creates a fresh bucket on `server` (`S3`, `GCS` or `AZURE` of
/// `fencing_harness::env`): `None` when the run skips the server; a server
/// that does not answer fails the test.
pub(crate) async fn emulator_bucket(server: &Server) -> Option<Bucket> {
    if server.skipped() {
        return None;
    }
    let (endpoint, name) = (server.endpoint(), fencing_testkit::unique_prefix());
    let (scheme, created) = match server.service {
        "s3" => {
            let client = fencing_s3::emulator::client(&endpoint);
            let created = fencing_s3::emulator::create_bucket(&client, &name).await;
            ("s3", created)
        }
        "gcs" => {
            let created = fencing_gcs::emulator::create_bucket(&endpoint, &name).await;
            ("gs", created)
        }
        "azurite" => {
            let created = fencing_azure::emulator::store(&endpoint, &name).await;
            ("az", created.map(drop))
        }
        other => panic!("no object-store emulator for {other}"),
    };
    if let Err(e) = created {
        server.unavailable(&e);
    }
    let url = format!("{scheme}://{name}?endpoint={endpoint}");
    Some(Bucket { name, url })
}
