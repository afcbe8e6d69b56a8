//! The servers the nemesis runs inside its hosts: a 3-member etcd cluster, a
//! 3-server ZooKeeper ensemble, PostgreSQL and moto (S3), each a process of
//! its own in its host's namespace, with its data and log under a temporary
//! directory. The binaries are the ones `integration/services.sh` installs.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::net::{Host, Net, run};

/// One server process in a host, restartable with the same command.
#[derive(Debug)]
pub struct Proc {
    /// Where it runs.
    pub host: Host,
    program: String,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Proc {
    fn new(host: &Host, program: &str, args: Vec<String>, log: PathBuf) -> Self {
        Self {
            host: host.clone(),
            program: program.to_owned(),
            args,
            log,
            child: None,
        }
    }

    /// Starts it (again).
    pub fn start(&mut self) -> Result<(), String> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = self
            .host
            .command(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {} in {}: {e}", self.program, self.host.ns))?;
        self.child = Some(child);
        Ok(())
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

/// Sends `sig` to process `pid` (never to a group: pid 0 is refused).
pub fn signal(pid: u32, sig: Signal) {
    if let Ok(pid) = i32::try_from(pid)
        && pid > 0
    {
        let _ = kill(Pid::from_raw(pid), sig);
    }
}

/// Waits until `addr` accepts a connection.
fn wait_port(proc: &Proc, addr: SocketAddr, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "{} in {} did not answer on {addr} within {within:?}; its log ends:\n{}",
        proc.program,
        proc.host.ns,
        proc.log_tail()
    ))
}

/// Which lock service a [`Cluster`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterKind {
    /// etcd, 3 members.
    Etcd,
    /// ZooKeeper, 3 servers.
    ZooKeeper,
}

impl ClusterKind {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Etcd => "etcd-cluster",
            Self::ZooKeeper => "zk-ensemble",
        }
    }

    fn client_port(self) -> u16 {
        match self {
            Self::Etcd => 2379,
            Self::ZooKeeper => 2181,
        }
    }
}

/// A 3-member lock service, one member per host.
#[derive(Debug)]
pub struct Cluster {
    /// etcd or ZooKeeper.
    pub kind: ClusterKind,
    /// The members, in order.
    pub members: Vec<Proc>,
}

/// Java's classpath for ZooKeeper, as `services.sh` builds it.
fn zk_classpath() -> String {
    let mut cp = String::from("/usr/share/java/zookeeper.jar");
    for jar in ["slf4j-log4j12", "slf4j-reload4j", "log4j-1.2", "reload4j"] {
        let path = format!("/usr/share/java/{jar}.jar");
        if Path::new(&path).exists() {
            cp.push(':');
            cp.push_str(&path);
        }
    }
    cp
}

impl Cluster {
    /// Starts the cluster on `hosts` (three), data under `dir`, and waits
    /// until a leader is elected.
    pub fn start(kind: ClusterKind, hosts: &[Host], dir: &Path) -> Result<Self, String> {
        let mut members = Vec::new();
        for (i, host) in hosts.iter().enumerate() {
            let data = dir.join(&host.name);
            fs::create_dir_all(&data).map_err(|e| e.to_string())?;
            let log = dir.join(format!("{}.log", host.name));
            let proc = match kind {
                ClusterKind::Etcd => {
                    let peers: Vec<String> = hosts
                        .iter()
                        .map(|h| format!("{}=http://{}:2380", h.name, h.ip))
                        .collect();
                    let ip = host.ip;
                    let args = [
                        "--name",
                        &host.name,
                        "--data-dir",
                        &data.join("member").display().to_string(),
                        "--listen-client-urls",
                        &format!("http://{ip}:2379"),
                        "--advertise-client-urls",
                        &format!("http://{ip}:2379"),
                        "--listen-peer-urls",
                        &format!("http://{ip}:2380"),
                        "--initial-advertise-peer-urls",
                        &format!("http://{ip}:2380"),
                        "--initial-cluster",
                        &peers.join(","),
                        "--initial-cluster-token",
                        // One token for the cluster: members with different ones never form it.
                        &hosts[0].ns,
                        "--initial-cluster-state",
                        "new",
                        "--log-level",
                        "warn",
                    ]
                    .map(str::to_owned)
                    .to_vec();
                    Proc::new(host, "etcd", args, log)
                }
                ClusterKind::ZooKeeper => {
                    let mut cfg = format!(
                        "tickTime=1000\ninitLimit=10\nsyncLimit=5\ndataDir={}\nclientPort=2181\n\
                         clientPortAddress={}\n4lw.commands.whitelist=*\nadmin.enableServer=false\n",
                        data.display(),
                        host.ip
                    );
                    for (j, h) in hosts.iter().enumerate() {
                        cfg.push_str(&format!("server.{}={}:2888:3888\n", j + 1, h.ip));
                    }
                    let write = |name: &str, text: &str| {
                        fs::write(data.join(name), text).map_err(|e| e.to_string())
                    };
                    write("zoo.cfg", &cfg)?;
                    write("myid", &format!("{}\n", i + 1))?;
                    write(
                        "log4j.properties",
                        "log4j.rootLogger=WARN, CONSOLE\n\
                         log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\n\
                         log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n\
                         log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p %c{1}: %m%n\n",
                    )?;
                    let args = [
                        "-Xms32m",
                        "-Xmx192m",
                        "-XX:+UseSerialGC",
                        &format!(
                            "-Dlog4j.configuration=file:{}",
                            data.join("log4j.properties").display()
                        ),
                        "-cp",
                        &zk_classpath(),
                        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                        &data.join("zoo.cfg").display().to_string(),
                    ]
                    .map(str::to_owned)
                    .to_vec();
                    Proc::new(host, "java", args, log)
                }
            };
            members.push(proc);
        }
        let mut cluster = Self { kind, members };
        for member in &mut cluster.members {
            member.start()?;
        }
        cluster.wait_leader(Duration::from_secs(60))?;
        Ok(cluster)
    }

    /// The client endpoints, `IP:PORT` comma-separated.
    pub fn endpoints(&self) -> String {
        let port = self.kind.client_port();
        self.members
            .iter()
            .map(|m| format!("{}:{port}", m.host.ip))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The issuer URL (registry grammar) for this cluster under `prefix`.
    pub fn issuer_url(&self, prefix: &str) -> String {
        match self.kind {
            ClusterKind::Etcd => format!("etcd://{}?prefix={prefix}/&timeout=2s", self.endpoints()),
            ClusterKind::ZooKeeper => format!("zk://{}/{prefix}", self.endpoints()),
        }
    }

    /// The index of the member that says it leads, if one answers so.
    pub fn leader(&self) -> Option<usize> {
        match self.kind {
            ClusterKind::Etcd => self.etcd_leader(),
            ClusterKind::ZooKeeper => self.members.iter().position(|m| {
                m.running() && zk_four_letter(m.host.ip, "srvr").contains("Mode: leader")
            }),
        }
    }

    fn etcd_leader(&self) -> Option<usize> {
        // etcdctl from the root namespace: it reaches every member through the bridge.
        let mut leader_id = None;
        let mut ids = Vec::new();
        for m in &self.members {
            let endpoint = format!("http://{}:2379", m.host.ip);
            let out = m
                .running()
                .then(|| {
                    run(
                        "etcdctl",
                        &[
                            "--endpoints",
                            &endpoint,
                            "--command-timeout",
                            "1s",
                            "--dial-timeout",
                            "1s",
                            "endpoint",
                            "status",
                            "-w",
                            "json",
                        ],
                    )
                    .ok()
                })
                .flatten();
            let status: Option<serde_json::Value> = out.and_then(|o| serde_json::from_str(&o).ok());
            let status = status
                .as_ref()
                .and_then(|s| s.get(0))
                .and_then(|s| s.get("Status"));
            let id = status
                .and_then(|s| s.pointer("/header/member_id"))
                .and_then(serde_json::Value::as_u64);
            let leader = status
                .and_then(|s| s.get("leader"))
                .and_then(serde_json::Value::as_u64);
            if leader.is_some_and(|l| l != 0) {
                leader_id = leader;
            }
            ids.push(id);
        }
        let leader_id = leader_id?;
        ids.iter().position(|id| *id == Some(leader_id))
    }

    /// Waits until a member leads.
    pub fn wait_leader(&self, within: Duration) -> Result<usize, String> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(leader) = self.leader() {
                return Ok(leader);
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = self
                    .members
                    .iter()
                    .map(|m| format!("--- {}:\n{}", m.host.name, m.log_tail()))
                    .collect();
                return Err(format!(
                    "{} elected no leader within {within:?}:\n{}",
                    self.kind.name(),
                    logs.join("\n")
                ));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// A ZooKeeper four-letter command's answer ("" if none).
fn zk_four_letter(ip: std::net::Ipv4Addr, cmd: &str) -> String {
    let addr = SocketAddr::from((ip, 2181));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut answer = String::new();
    if stream.write_all(cmd.as_bytes()).is_ok() {
        let _ = stream.read_to_string(&mut answer);
    }
    answer
}

/// A PostgreSQL server of its own (initdb'd into `dir`, trust auth from the
/// bridge) in `host`; returns it and its URL.
pub fn postgres(host: &Host, dir: &Path) -> Result<(Proc, String), String> {
    let bin = fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("PostgreSQL is not installed (/usr/lib/postgresql: {e})"))?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("postgres").exists())
        .max()
        .ok_or("no PostgreSQL server under /usr/lib/postgresql")?;
    let data = dir.join("postgres");
    fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    let data_s = data.display().to_string();
    run("chown", &["-R", "postgres:postgres", &data_s])?;
    // The parent of a data directory must be traversable by its owner.
    run("chmod", &["755", &dir.display().to_string()])?;
    let as_postgres = |program: &Path, args: &[&str]| {
        let mut all = vec!["--reuid=postgres", "--regid=postgres", "--init-groups"];
        let program = program.display().to_string();
        all.push(&program);
        all.extend_from_slice(args);
        run("setpriv", &all)
    };
    as_postgres(
        &bin.join("initdb"),
        &["-D", &data_s, "-A", "trust", "-U", "postgres", "--no-sync"],
    )?;
    let mut hba = fs::OpenOptions::new()
        .append(true)
        .open(data.join("pg_hba.conf"))
        .map_err(|e| e.to_string())?;
    writeln!(hba, "host all all 0.0.0.0/0 trust").map_err(|e| e.to_string())?;
    let args = [
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        &bin.join("postgres").display().to_string(),
        "-D",
        &data_s,
        "-c",
        &format!("listen_addresses={}", host.ip),
        "-c",
        "port=5432",
        "-c",
        &format!("unix_socket_directories={data_s}"),
        // The nemesis never crashes PostgreSQL (the restart tests cover
        // durability): commits need not wait for the disk.
        "-c",
        "synchronous_commit=off",
    ]
    .map(str::to_owned)
    .to_vec();
    let mut proc = Proc::new(host, "setpriv", args, dir.join("postgres.log"));
    proc.start()?;
    wait_port(
        &proc,
        SocketAddr::from((host.ip, 5432)),
        Duration::from_secs(30),
    )?;
    Ok((
        proc,
        format!("postgres://postgres@{}:5432/postgres", host.ip),
    ))
}

/// moto (the S3 emulator `services.sh` installs) in `host`, with `bucket`
/// created; returns it and the store URL.
pub fn moto(host: &Host, dir: &Path, bucket: &str) -> Result<(Proc, String), String> {
    let state = std::env::var_os("FENCING_STATE_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join(".state"),
        PathBuf::from,
    );
    let tools =
        std::env::var_os("FENCING_TOOLS_DIR").map_or_else(|| state.join("tools"), PathBuf::from);
    let python = tools.join("venv/bin/python");
    let launcher = tools.join("moto_s3_server.py");
    if !python.exists() || !launcher.exists() {
        return Err(format!(
            "moto is not installed under {}: run `integration/services.sh up s3` once",
            tools.display()
        ));
    }
    let args = vec![
        launcher.display().to_string(),
        host.ip.to_string(),
        "9000".to_owned(),
    ];
    let mut proc = Proc::new(
        host,
        &python.display().to_string(),
        args,
        dir.join("moto.log"),
    );
    proc.start()?;
    wait_port(
        &proc,
        SocketAddr::from((host.ip, 9000)),
        Duration::from_secs(30),
    )?;
    let endpoint = format!("http://{}:9000", host.ip);
    run(
        "curl",
        &[
            "-sS",
            "-f",
            "-m",
            "5",
            "-X",
            "PUT",
            &format!("{endpoint}/{bucket}"),
        ],
    )?;
    Ok((
        proc,
        format!("s3://{bucket}?endpoint={endpoint}&path_style=true&emulator=true&region=us-east-1"),
    ))
}

/// The hosts of a lock-service run: three members, a PostgreSQL host, an
/// S3 host and `clients` client hosts.
#[derive(Debug)]
pub struct Topology {
    /// The bridge; dropped last (after the processes in it).
    pub net: Net,
    /// The lock service's members.
    pub members: Vec<Host>,
    /// PostgreSQL's host.
    pub postgres: Host,
    /// moto's host.
    pub s3: Host,
    /// One host per client.
    pub clients: Vec<Host>,
}

impl Topology {
    /// Builds the namespaces.
    pub fn new(prefix: &str, clients: usize) -> Result<Self, String> {
        let mut net = Net::new()?;
        let members = (1..=3)
            .map(|i| net.add_host(&format!("{prefix}{i}")))
            .collect::<Result<_, _>>()?;
        let postgres = net.add_host("pg")?;
        let s3 = net.add_host("s3")?;
        let clients = (1..=clients)
            .map(|i| net.add_host(&format!("c{i}")))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            net,
            members,
            postgres,
            s3,
            clients,
        })
    }
}

/// A command running `program` in `host`, or in the root namespace.
pub fn client_command(host: Option<&Host>, program: &Path) -> Command {
    match host {
        Some(host) => host.command(&program.display().to_string()),
        None => Command::new(program),
    }
}
