//! The servers the nemesis runs inside its hosts: a 3-member etcd cluster, a
//! 3-server ZooKeeper ensemble, PostgreSQL and moto (S3), each a process of
//! its own in its host's namespace, with its data and log under the run's
//! temporary directory. Each is started from its spec in `fencing-servers`
//! (the start functions `integration/services.sh` runs, with the binaries it
//! installs), on the spec's ports at its host's address: every host has an
//! address of its own, so every member listens on the same ports.

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fencing_harness::process::{Signal, send_signal};
use fencing_servers::{Instance, Launch, Member, Paths, Peer};

use super::net::{Host, Net};

mod cluster;
mod stores;
pub use cluster::{Cluster, ClusterKind};
pub use stores::{dynamodb_url, moto, postgres};

/// One server process in a host, restartable with the same command.
#[derive(Debug)]
pub struct Proc {
    /// Where it runs.
    pub host: Host,
    /// Its instance's name (its log is `<name>.log`).
    name: String,
    /// Its client port.
    port: u16,
    launch: Launch,
    log: PathBuf,
    child: Option<Child>,
}

impl Proc {
    /// `launch`, the start of `instance`, to run in `host`: not started
    /// yet. Its output goes to `<logs>/<instance name>.log`, where the
    /// spec's own preparatory steps (initdb) log too.
    fn new(host: &Host, instance: &Instance, launch: Launch) -> Self {
        Self {
            host: host.clone(),
            name: instance.name.clone(),
            port: instance.port,
            log: instance.paths.logs.join(format!("{}.log", instance.name)),
            launch,
            child: None,
        }
    }

    /// Starts it (again), with the program, arguments, directory and
    /// environment of its spec's start.
    pub fn start(&mut self) -> Result<(), String> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: log {}: {e}", self.name, self.log.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = self
            .host
            .command(&self.launch.program)
            .args(&self.launch.args)
            .current_dir(&self.launch.dir)
            .envs(self.launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start {} ({}) for {}:{} in {}: {e}; log {}",
                    self.name,
                    self.launch.program,
                    self.host.ip,
                    self.port,
                    self.host.ns,
                    self.log.display()
                )
            })?;
        self.child = Some(child);
        Ok(())
    }

    /// Starts it and waits until it accepts connections on its port.
    fn serving(mut self) -> Result<Self, String> {
        self.start()?;
        let addr = SocketAddr::from((self.host.ip, self.port));
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok() {
                return Ok(self);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "{} in {} did not answer on {addr} within 30 s; its log {} ends:\n{}",
            self.name,
            self.host.ns,
            self.log.display(),
            self.log_tail()
        ))
    }

    /// Whether it was started and not killed.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    fn signal(&self, signal: Signal) {
        if let Some(child) = &self.child {
            self::signal(child.id(), signal);
        }
    }

    /// SIGKILL, and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP: it keeps its sockets but answers nothing.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// The last lines of its log, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.resume();
        self.kill();
    }
}

/// Sends `sig` to process `pid`, if it is still there (a fault on a
/// process that already exited is no fault).
pub fn signal(pid: u32, sig: Signal) {
    let _ = send_signal(pid, sig);
}

/// The [`Instance`] of a spec's `member` in `host`, called `name`, member
/// `number` of `cluster` (empty for a lone server): the member's ports at
/// the host's address, its directory `dir/<name>` (made here). The
/// checkout's tools and PKI, with logs under `dir`, so that nothing of the
/// run lands among the standard servers' logs.
fn instance(
    name: &str,
    number: usize,
    host: &Host,
    member: &Member,
    cluster: Vec<Peer>,
    dir: &Path,
) -> Result<Instance, String> {
    let data = dir.join(name);
    fs::create_dir_all(&data).map_err(|e| {
        format!(
            "{name} ({}:{}): {}: {e}",
            host.ip,
            member.port,
            data.display()
        )
    })?;
    Ok(Instance {
        name: name.to_owned(),
        number,
        ip: host.ip,
        port: member.port,
        peer_ports: member.peer_ports.to_vec(),
        cluster,
        dir: data,
        paths: Paths {
            logs: dir.to_path_buf(),
            data: dir.to_path_buf(),
            ..Paths::from_env()
        },
    })
}

/// The hosts of a run: the lock service's, the stores', and one per client.
#[derive(Debug)]
pub struct Topology {
    /// The bridge; dropped last (after the processes in it).
    pub net: Net,
    /// The issuer's hosts, which client-link faults cut a client off from:
    /// the lock service's three members, or the one server that is issuer
    /// and store.
    pub members: Vec<Host>,
    /// PostgreSQL's host (none in a single-server run).
    pub postgres: Option<Host>,
    /// moto's host.
    pub s3: Host,
    /// One host per client.
    pub clients: Vec<Host>,
}

impl Topology {
    /// Builds the namespaces of a cluster run: three members, PostgreSQL,
    /// moto and the clients.
    pub fn new(prefix: &str, clients: usize) -> Result<Self, String> {
        let mut net = Net::new()?;
        let members = (1..=3)
            .map(|i| net.add_host(&format!("{prefix}{i}")))
            .collect::<Result<_, _>>()?;
        let postgres = Some(net.add_host("pg")?);
        let s3 = net.add_host("s3")?;
        let clients = Self::clients(&mut net, clients)?;
        Ok(Self {
            net,
            members,
            postgres,
            s3,
            clients,
        })
    }

    /// Builds the namespaces of a single-server run: moto, which is both the
    /// issuer and the store (so the clients' links to it are the ones
    /// faults cut), and the clients.
    pub fn single_server(clients: usize) -> Result<Self, String> {
        let mut net = Net::new()?;
        let s3 = net.add_host("moto")?;
        let clients = Self::clients(&mut net, clients)?;
        Ok(Self {
            net,
            members: vec![s3.clone()],
            postgres: None,
            s3,
            clients,
        })
    }

    fn clients(net: &mut Net, clients: usize) -> Result<Vec<Host>, String> {
        (1..=clients)
            .map(|i| net.add_host(&format!("c{i}")))
            .collect()
    }
}

/// A command running `program` in `host`, or in the root namespace.
pub fn client_command(host: Option<&Host>, program: &Path) -> Command {
    match host {
        Some(host) => host.command(&program.display().to_string()),
        None => Command::new(program),
    }
}
