//! What probes and set-ups share: bounded commands, `curl`, a port check.
//! Every call here is bounded in time; none needs anything but curl, nc and
//! the servers' own clients.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Whether something accepts connections on `ip:port` (within 2 s).
pub fn port_open(ip: Ipv4Addr, port: u16) -> bool {
    TcpStream::connect_timeout(&SocketAddr::from((ip, port)), Duration::from_secs(2)).is_ok()
}

/// `program args…` under `timeout SECS`, stdin closed: its stdout when it
/// exits 0, `None` otherwise (stderr is dropped).
pub fn output(secs: u32, program: &str, args: &[&str], env: &[(&str, &str)]) -> Option<String> {
    let out = Command::new("timeout")
        .arg(secs.to_string())
        .arg(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Like [`output`], with stdout and stderr together and the exit status:
/// for set-up steps whose message, not status, tells.
pub fn output_all(
    secs: u32,
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: Option<&str>,
) -> (bool, String) {
    use std::io::Write;
    let child = Command::new("timeout")
        .arg(secs.to_string())
        .arg(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return (false, format!("cannot run {program}: {e}")),
    };
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let _ = pipe.write_all(text.as_bytes());
    }
    match child.wait_with_output() {
        Ok(out) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            (out.status.success(), text)
        }
        Err(e) => (false, e.to_string()),
    }
}

/// `curl -sS -m 3 args…`: the body (or what `args` ask for) when curl exits 0.
pub fn curl(args: &[&str]) -> Option<String> {
    let mut all = vec!["-sS", "-m", "3"];
    all.extend_from_slice(args);
    output(5, "curl", &all, &[])
}

/// Whether `program` is on `PATH`.
pub fn have(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| is_executable(&dir.join(program)))
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Writes `text` to `path`, creating its directory.
pub fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}
