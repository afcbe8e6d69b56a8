//! A test's own server: a service's member started from its spec on free
//! ports, in a directory of its own, stopped and removed when dropped. For
//! the tests that must reconfigure or kill a server the other tests share.

use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::{Instance, Paths, Server, Service};

/// How long a private server may take to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);
/// Tries with new ports: a port the kernel just handed out and took back
/// can be taken by someone else before the server binds it.
const TRIES: usize = 5;

/// A private server, killed (and its directory removed) when dropped.
#[derive(Debug)]
pub struct Private {
    child: Child,
    instance: Instance,
    log: PathBuf,
}

impl Private {
    /// Starts `service`'s first member on free ports of 127.0.0.1 with
    /// `extra` arguments after its own (a later option wins for the
    /// servers here), and waits until its probe answers.
    ///
    /// # Errors
    /// When the program cannot start (naming the `services.sh deps`
    /// command that installs it) or does not answer in 30 s (with the end
    /// of its log).
    pub fn start(service: &'static Service, extra: &[&str]) -> Result<Self, String> {
        let member = service
            .members
            .first()
            .ok_or_else(|| format!("{} runs no process", service.name))?;
        let mut last = String::new();
        for _ in 0..TRIES {
            let dir = private_dir(service.name);
            fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let instance = Instance {
                name: format!("{}-private", member.instance),
                number: 1,
                ip: Ipv4Addr::LOCALHOST,
                port: free_port()?,
                peer_ports: member
                    .peer_ports
                    .iter()
                    .map(|_| free_port())
                    .collect::<Result<_, _>>()?,
                cluster: Vec::new(),
                dir: dir.clone(),
                paths: Paths::from_env(),
            };
            let launch = (service.start)(&instance)?;
            let log = dir.join("server.log");
            let out = fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
            let err = out.try_clone().map_err(|e| e.to_string())?;
            let child = Command::new(&launch.program)
                .args(&launch.args)
                .args(extra)
                .current_dir(&launch.dir)
                .envs(launch.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .map_err(|e| {
                    format!(
                        "cannot start {} ({e}): install it with `integration/services.sh deps {}`",
                        launch.program, service.name
                    )
                })?;
            let mut server = Self {
                child,
                instance,
                log,
            };
            let started = Instant::now();
            while started.elapsed() < ANSWER_WITHIN {
                if server.child.try_wait().ok().flatten().is_some() {
                    break; // lost a port, or refused its options: the log says which
                }
                if (service.probe)(&server.instance) {
                    return Ok(server);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            last = format!(
                "a private {} on 127.0.0.1:{} did not answer; its log ends:\n{}",
                service.name,
                server.instance.port,
                server.log_tail()
            );
        }
        Err(last)
    }

    /// Its client port.
    pub fn port(&self) -> u16 {
        self.instance.port
    }

    /// The member as started (ports, directory).
    pub fn instance(&self) -> &Instance {
        &self.instance
    }

    /// `server`'s endpoint form filled with this server's port: the URL
    /// the tests would use for the shared one, pointed here.
    pub fn endpoint(&self, server: &Server) -> String {
        server.endpoint_at(self.instance.port)
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.instance.dir);
    }
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("no free loopback port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

fn private_dir(service: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "fencing-private-{service}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}
