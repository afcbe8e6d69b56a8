//! The lock service of a partition run: three etcd members or ZooKeeper
//! servers, one per host, and which of them leads.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use super::Proc;
use crate::nemesis::net::{Host, run};

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
