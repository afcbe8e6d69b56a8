//! Trying start functions for real (the etcd and ZooKeeper tests): a
//! service's members on free ports of 127.0.0.1, in a temporary directory,
//! spawned as `services` would, probed until they answer, killed when
//! dropped. Never on the standard ports the running servers hold.

use std::fs::File;
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Instance, Paths, Peer, Service};

/// How long members get to answer: JVMs on a busy two-core machine.
const WAIT: Duration = Duration::from_secs(120);

/// One started member.
pub(crate) struct Running {
    /// What it was started as.
    pub(crate) instance: Instance,
    child: Option<Child>,
    log: PathBuf,
}

/// Members of one service on free ports; killed, and their directory
/// removed, on drop.
pub(crate) struct Trial {
    /// The members, in order.
    pub(crate) members: Vec<Running>,
    service: &'static Service,
    root: PathBuf,
}

impl Trial {
    /// Starts `count` members of `service` (a cluster when more than one)
    /// with `paths` (its PKI for the TLS variants) and waits until each
    /// answers its probe. Panics (never skips) when one cannot start,
    /// naming what to install, or does not answer, with its log's tail.
    pub(crate) fn start(service: &'static Service, count: usize, paths: Paths) -> Self {
        let root = std::env::temp_dir().join(format!(
            "fencing-trial-{}-{}-{}",
            service.name,
            std::process::id(),
            free_port()
        ));
        let peers: Vec<Peer> = (0..count)
            .map(|_| Peer {
                ip: Ipv4Addr::LOCALHOST,
                port: free_port(),
                peer_ports: service.members[0]
                    .peer_ports
                    .iter()
                    .map(|_| free_port())
                    .collect(),
            })
            .collect();
        let mut members = Vec::new();
        for (n, peer) in peers.iter().enumerate() {
            let name = format!("{}-trial-{}", service.name, n + 1);
            let dir = root.join(&name);
            std::fs::create_dir_all(&dir).unwrap();
            let instance = Instance {
                name,
                number: n + 1,
                ip: peer.ip,
                port: peer.port,
                peer_ports: peer.peer_ports.clone(),
                cluster: if count > 1 { peers.clone() } else { Vec::new() },
                dir: dir.clone(),
                paths: paths.clone(),
            };
            members.push(Running {
                log: dir.join("server.log"),
                instance,
                child: None,
            });
        }
        let mut trial = Self {
            members,
            service,
            root,
        };
        for n in 0..count {
            trial.spawn(n);
        }
        for n in 0..count {
            trial.wait_answering(n);
        }
        trial
    }

    /// Spawns member `n` (again, after [`Trial::kill`]).
    pub(crate) fn spawn(&mut self, n: usize) {
        let member = &mut self.members[n];
        let launch = (self.service.start)(&member.instance).unwrap_or_else(|e| panic!("{e}"));
        let out = File::options()
            .create(true)
            .append(true)
            .open(&member.log)
            .unwrap();
        let child = Command::new(&launch.program)
            .args(&launch.args)
            .current_dir(&launch.dir)
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{}: cannot run {}: {e} (run: integration/services.sh deps {})",
                    member.instance.name, launch.program, self.service.name
                )
            });
        member.child = Some(child);
    }

    /// Kills member `n` (SIGKILL).
    pub(crate) fn kill(&mut self, n: usize) {
        if let Some(mut child) = self.members[n].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits until member `n` answers its probe.
    pub(crate) fn wait_answering(&mut self, n: usize) {
        let deadline = Instant::now() + WAIT;
        let probe = self.service.probe;
        loop {
            let member = &mut self.members[n];
            if probe(&member.instance) {
                return;
            }
            let exited = member.child.as_mut().and_then(|c| c.try_wait().unwrap());
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "{} on 127.0.0.1:{} {}; its log:\n{}",
                member.instance.name,
                member.instance.port,
                exited.map_or_else(
                    || format!("did not answer within {WAIT:?}"),
                    |s| format!("exited before answering ({s})")
                ),
                member.log_tail()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Waits until `holds` holds, else panics with `what` and every log.
    pub(crate) fn wait_until(&self, what: &str, holds: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !holds(self) {
            if Instant::now() > deadline {
                let logs: Vec<String> = self
                    .members
                    .iter()
                    .map(|m| format!("--- {}:\n{}", m.instance.name, m.log_tail()))
                    .collect();
                panic!("{what} within {WAIT:?}; logs:\n{}", logs.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// The members' client endpoints.
    pub(crate) fn endpoints(&self) -> Vec<(Ipv4Addr, u16)> {
        self.members
            .iter()
            .map(|m| (m.instance.ip, m.instance.port))
            .collect()
    }
}

impl Running {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Trial {
    fn drop(&mut self) {
        for n in 0..self.members.len() {
            self.kill(n);
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A port nothing listens on now.
pub(crate) fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    listener.local_addr().unwrap().port()
}

/// The [`Instance`] of a member of `service` on its standard port, as
/// `services` runs it (for probing the running servers).
pub(crate) fn standard(service: &Service, n: usize) -> Instance {
    let paths = Paths::from_env();
    let m = &service.members[n];
    Instance {
        name: m.instance.to_owned(),
        number: n + 1,
        ip: Ipv4Addr::LOCALHOST,
        port: m.port,
        peer_ports: m.peer_ports.to_vec(),
        cluster: Vec::new(),
        dir: paths.data.join(m.instance),
        paths,
    }
}

/// A state directory of its own (logs, the test PKI), removed on drop.
pub(crate) struct TempState {
    /// Its directories.
    pub(crate) paths: Paths,
}

impl TempState {
    /// A new one under the temporary directory, its logs directory made.
    pub(crate) fn new(what: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "fencing-{what}-{}-{}",
            std::process::id(),
            free_port()
        ));
        let paths = Paths::new(dir, None);
        std::fs::create_dir_all(&paths.logs).unwrap();
        Self { paths }
    }
}

impl Drop for TempState {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.paths.state);
    }
}
