//! A foreign lock client (redis-py, kazoo) run by Python, for the tests
//! that hold a lock the way another program does.

/// A foreign lock client run by Python (`FENCING_PYTHON`, default the
/// venv `integration/services.sh` installs), talking in lines: it prints
/// what it did, and acts on each line it reads.
pub struct Python {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Python {
    /// Runs `script` with `args`. Fails, naming how to install it, if the
    /// interpreter or `module` (the pip package `requirement`) is missing.
    pub fn run(module: &str, requirement: &str, script: &str, args: &[&str]) -> Self {
        use std::process::Stdio;
        let python = std::env::var_os("FENCING_PYTHON").map_or_else(
            || {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../.state/tools/venv/bin/python")
            },
            std::path::PathBuf::from,
        );
        let how = format!(
            "install it with `integration/.state/tools/venv/bin/pip install {requirement}` \
             (integration/services.sh installs it into that venv), or point FENCING_PYTHON at a \
             Python that has it"
        );
        match std::process::Command::new(&python)
            .args(["-c", &format!("import {module}")])
            .output()
        {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!(
                "{} cannot import {module}: {}\n{how}",
                python.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => panic!("no Python at {} ({e}): {how}", python.display()),
        }
        let mut child = tokio::process::Command::new(&python)
            .arg("-c")
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", python.display()));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        Self {
            child,
            stdin,
            stdout: tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout)),
        }
    }

    /// The next line the script prints (bounded: a hung client fails the
    /// test).
    pub async fn line(&mut self) -> String {
        let next =
            tokio::time::timeout(std::time::Duration::from_secs(30), self.stdout.next_line());
        match next.await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => {
                let status = self.child.wait().await;
                panic!("the Python client exited ({status:?}); its error is above")
            }
            Ok(Err(e)) => panic!("read from the Python client: {e}"),
            Err(_) => panic!("the Python client said nothing for 30 s"),
        }
    }

    /// Sends `line` to the script.
    pub async fn send(&mut self, line: &str) {
        use tokio::io::AsyncWriteExt;
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write to the Python client");
        self.stdin.flush().await.expect("flush");
    }
}
