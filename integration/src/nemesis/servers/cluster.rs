//! The lock service of a partition run: three etcd members or ZooKeeper
//! servers, one per host, started from the cluster specs (`etcd-cluster`,
//! `zk-ensemble`), and which of them leads, asked as `services` asks.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use fencing_servers::{Peer, Service, specs};

use super::{Proc, instance};
use crate::nemesis::net::Host;

/// Which lock service a [`Cluster`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterKind {
    /// etcd, 3 members.
    Etcd,
    /// ZooKeeper, 3 servers.
    ZooKeeper,
}

impl ClusterKind {
    /// Its name in reports: its spec's (`etcd-cluster`, `zk-ensemble`).
    pub fn name(self) -> &'static str {
        self.service().name
    }

    /// The spec whose start runs each member.
    fn service(self) -> &'static Service {
        match self {
            Self::Etcd => &specs::etcd::CLUSTER,
            Self::ZooKeeper => &specs::zookeeper::ENSEMBLE,
        }
    }

    /// What the nemesis adds to the spec's command line.
    fn extra_args(self) -> &'static [&'static str] {
        match self {
            // Faults make members log every lost heartbeat: warnings keep
            // the log (whose tail a failure shows) to what matters.
            Self::Etcd => &["--log-level", "warn"],
            Self::ZooKeeper => &[],
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

impl Cluster {
    /// Starts the cluster on `hosts` (three), data under `dir`, and waits
    /// until a leader is elected. Every member takes the ports of the
    /// spec's first member, at its own host's address.
    pub fn start(kind: ClusterKind, hosts: &[Host], dir: &Path) -> Result<Self, String> {
        let service = kind.service();
        let member = service
            .members
            .first()
            .ok_or_else(|| format!("{}: the spec has no member", service.name))?;
        let peers: Vec<Peer> = hosts
            .iter()
            .map(|h| Peer {
                ip: h.ip,
                port: member.port,
                peer_ports: member.peer_ports.to_vec(),
            })
            .collect();
        let mut members = Vec::new();
        for (n, host) in hosts.iter().enumerate() {
            let instance = instance(&host.name, n + 1, host, member, peers.clone(), dir)?;
            let mut launch = (service.start)(&instance)?;
            launch
                .args
                .extend(kind.extra_args().iter().map(|a| (*a).to_owned()));
            members.push(Proc::new(host, &instance, launch));
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
        self.members
            .iter()
            .map(|m| format!("{}:{}", m.host.ip, m.port))
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
    /// Killed members are not asked (a paused one is, and answers nothing).
    pub fn leader(&self) -> Option<usize> {
        let running: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].running())
            .collect();
        let endpoints: Vec<(Ipv4Addr, u16)> = running
            .iter()
            .map(|&i| (self.members[i].host.ip, self.members[i].port))
            .collect();
        // Asked from the root namespace: it reaches every member through
        // the bridge.
        let leads = match self.kind {
            ClusterKind::Etcd => specs::etcd::leader_of(&endpoints),
            ClusterKind::ZooKeeper => zk_leader(&endpoints),
        };
        leads.map(|k| running[k])
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
                    .map(|m| format!("--- {} ({}):\n{}", m.name, m.log.display(), m.log_tail()))
                    .collect();
                return Err(format!(
                    "{} on {} elected no leader within {within:?}:\n{}",
                    self.kind.name(),
                    self.endpoints(),
                    logs.join("\n")
                ));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// The index of the ZooKeeper server whose `srvr` says `Mode: leader`. The
/// servers are asked at once: a paused one takes its whole timeout.
fn zk_leader(endpoints: &[(Ipv4Addr, u16)]) -> Option<usize> {
    let modes: Vec<Option<String>> = std::thread::scope(|s| {
        let asks: Vec<_> = endpoints
            .iter()
            .map(|&(ip, port)| s.spawn(move || specs::zookeeper::mode(ip, port)))
            .collect();
        asks.into_iter()
            .map(|ask| ask.join().ok().flatten())
            .collect()
    });
    modes.iter().position(|m| m.as_deref() == Some("leader"))
}
