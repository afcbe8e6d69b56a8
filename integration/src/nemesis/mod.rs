//! The nemesis: real network partitions, process faults and skewed clocks
//! against lock holders that write through a fenced store, Jepsen-style.
//!
//! - [`net`]: hosts in network namespaces on one bridge; partitions and
//!   lossy links are iptables rules inside them. Everything is removed on
//!   drop (and by [`net::sweep`] after a killed run).
//! - [`servers`]: a 3-member etcd cluster or ZooKeeper ensemble, PostgreSQL
//!   and moto, each in a host of its own; or moto alone, as issuer and store.
//! - [`schedule`]: seeded random fault schedules.
//! - [`timeline`]: the clients' events in one clock and the run's verdict.
//! - [`suite`]: the partition and clock runs CI and the long mode make.
//!
//! Clients are `nemesis-client` processes (one per host, or under
//! `faketime` for the clock runs) looping acquire → fence → write → release.
//! [`run_pair`] plays a schedule against them and judges the run.

pub mod net;
mod run;
pub mod schedule;
pub mod servers;
pub mod suite;
pub mod timeline;

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use fencing_harness::process::Signal;

use schedule::{Fault, Step};
use servers::{Cluster, Proc, Topology};
use timeline::{FaultSpan, real_monotonic_ns};

pub use run::{PairSpec, run_pair, write_evidence};

/// Set for `nemesis-client`: present a constant token far above any
/// lease's instead of the lease's own (the negative control).
pub const UNFENCED_VAR: &str = "FENCING_NEMESIS_UNFENCED";

/// libfaketime's preload library (Debian `libfaketime`).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// How a client's clocks run.
#[derive(Clone, Debug, PartialEq)]
pub enum Clock {
    /// The machine's.
    Real,
    /// The wall clock off by this many seconds (the monotonic one true):
    /// a host whose NTP is wrong.
    Offset(i64),
    /// The wall clock set by the schedule's clock jumps (`all_clocks`: the
    /// monotonic clock jumps too, as after a VM is frozen and thawed).
    Jumping {
        /// Whether the monotonic clock moves too.
        all_clocks: bool,
    },
}

/// What the nemesis acts on: the topology and cluster (partition runs) or
/// only the clients' clocks (skew runs).
#[derive(Default)]
pub struct Nemesis {
    /// The lock service, if it runs in the topology.
    pub cluster: Option<Cluster>,
    /// Other servers in the topology (PostgreSQL, moto).
    pub servers: Vec<Proc>,
    /// The namespaces; dropped after the processes in them.
    pub topology: Option<Topology>,
    clients: Vec<u32>,
    clock_files: Vec<Option<ClockFile>>,
}

/// A jumping client's faketime file.
#[derive(Debug)]
struct ClockFile {
    path: PathBuf,
    /// The monotonic clock jumps too: offsets only grow (a monotonic clock
    /// going back would stall every timer of the process for hours).
    all_clocks: bool,
    /// The offset in force, in seconds.
    offset: i64,
}

impl Nemesis {
    /// A nemesis over `topology`, its lock service and other servers.
    pub fn cluster(topology: Topology, cluster: Cluster, servers: Vec<Proc>) -> Self {
        Self {
            cluster: Some(cluster),
            servers,
            topology: Some(topology),
            ..Self::default()
        }
    }

    /// A nemesis over `topology` whose one server (`server`, on the
    /// topology's only member host) is both the issuer and the store.
    pub fn single_server(topology: Topology, server: Proc) -> Self {
        Self {
            servers: vec![server],
            topology: Some(topology),
            ..Self::default()
        }
    }

    fn member_host(&self, i: usize) -> Option<&net::Host> {
        self.cluster.as_ref().map(|c| &c.members[i].host)
    }

    fn leader(&self) -> Option<usize> {
        self.cluster.as_ref().and_then(Cluster::leader)
    }

    /// Injects `fault`; says what it did (or why it could not).
    fn inject(&mut self, fault: &Fault) -> Result<String, String> {
        let topo = self.topology.as_ref();
        let net = || topo.map(|t| &t.net).ok_or("no topology");
        let members = || topo.map(|t| t.members.clone()).unwrap_or_default();
        let cut_off = |me: usize| -> Result<String, String> {
            let all = members();
            for (j, other) in all.iter().enumerate() {
                if j != me {
                    net()?.partition(&all[me], other)?;
                }
            }
            Ok(format!("{} | the other members", all[me].name))
        };
        match *fault {
            Fault::PartitionMember(m) => cut_off(m),
            Fault::PartitionLeader => {
                let leader = self.leader().ok_or("no leader to partition")?;
                cut_off(leader).map(|d| format!("{d} (the leader)"))
            }
            Fault::IsolateClient(c) | Fault::LossyClient(c, _) => {
                let client = &topo.ok_or("no topology")?.clients[c];
                for member in members() {
                    match *fault {
                        Fault::LossyClient(_, loss) => net()?.lossy(client, &member, loss)?,
                        _ => net()?.partition(client, &member)?,
                    }
                }
                Ok(match *fault {
                    Fault::LossyClient(_, loss) => {
                        let to = if self.cluster.is_some() {
                            "members"
                        } else {
                            "server"
                        };
                        format!("{} ↔ {to} lose {:.0}%", client.name, loss * 100.0)
                    }
                    _ if self.cluster.is_none() => {
                        format!("{} | the server (issuer and store)", client.name)
                    }
                    _ => format!("{} | every member (the store still reachable)", client.name),
                })
            }
            Fault::SlowClient(c, kbit) => {
                let client = &topo.ok_or("no topology")?.clients[c];
                net()?.throttle(client, kbit)?;
                Ok(format!(
                    "{} sends at {kbit} kbit/s (deep queue)",
                    client.name
                ))
            }
            Fault::PauseClient(c) => {
                let pid = *self.clients.get(c).ok_or("no such client")?;
                servers::signal(pid, Signal::SIGSTOP);
                Ok(format!("client {} stopped", c + 1))
            }
            Fault::KillMember(m) | Fault::PauseMember(m) => self.member_fault(fault, m),
            Fault::KillLeader => {
                let leader = self.leader().ok_or("no leader to kill")?;
                self.member_fault(&Fault::KillMember(leader), leader)
                    .map(|d| format!("{d} (the leader)"))
            }
            Fault::ClockJump {
                client,
                offset_secs,
                ..
            } => {
                let file = self
                    .clock_files
                    .get_mut(client)
                    .and_then(Option::as_mut)
                    .ok_or("no jumping clock")?;
                file.offset = if file.all_clocks {
                    file.offset + offset_secs.abs()
                } else {
                    offset_secs
                };
                std::fs::write(&file.path, faketime_spec(file.offset))
                    .map_err(|e| e.to_string())?;
                Ok(format!(
                    "client {} {} to {:+.2} h",
                    client + 1,
                    if file.all_clocks {
                        "clocks"
                    } else {
                        "wall clock"
                    },
                    file.offset as f64 / 3600.0
                ))
            }
        }
    }

    fn member_fault(&mut self, fault: &Fault, m: usize) -> Result<String, String> {
        let name = self
            .member_host(m)
            .map(|h| h.name.clone())
            .ok_or("no cluster")?;
        let cluster = self.cluster.as_mut().ok_or("no cluster")?;
        match fault {
            Fault::PauseMember(_) => cluster.members[m].pause(),
            _ => cluster.members[m].kill(),
        }
        Ok(match fault {
            Fault::PauseMember(_) => format!("{name} stopped"),
            _ => format!("{name} killed"),
        })
    }

    /// Undoes every fault: rules flushed, processes continued, killed
    /// members restarted, clocks back to true time.
    fn heal(&mut self) -> Result<(), String> {
        if let Some(topo) = &self.topology {
            topo.net.heal()?;
        }
        for &pid in &self.clients {
            servers::signal(pid, Signal::SIGCONT);
        }
        if let Some(cluster) = &mut self.cluster {
            for member in &mut cluster.members {
                member.resume();
                if !member.running() {
                    member.start()?;
                }
            }
        }
        // A wall clock steps back to true time (NTP); all clocks stay ahead.
        for file in self.clock_files.iter_mut().flatten() {
            if !file.all_clocks {
                file.offset = 0;
                std::fs::write(&file.path, faketime_spec(0)).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    /// Plays `steps` until `length` has passed, recording each fault.
    fn play(&mut self, steps: &[Step], length: Duration, faults: &Mutex<Vec<FaultSpan>>) {
        let end = std::time::Instant::now() + length;
        for step in steps {
            if !sleep_until_before(step.quiet, end) {
                break;
            }
            let start = real_monotonic_ns();
            let mut held = Vec::new();
            for fault in &step.faults {
                let detail = self
                    .inject(fault)
                    .unwrap_or_else(|e| format!("not injected: {e}"));
                held.push((fault.kind().to_owned(), detail));
            }
            sleep_until_before(step.hold, end);
            if let Err(e) = self.heal() {
                eprintln!("nemesis: heal failed: {e}");
            }
            let stop = real_monotonic_ns();
            let mut faults = faults.lock().expect("poisoned");
            for (kind, detail) in held {
                if !detail.starts_with("not injected") {
                    faults.push(FaultSpan {
                        kind,
                        detail,
                        start,
                        end: stop,
                    });
                }
            }
        }
    }
}

/// Sleeps `d`, but not past `end`; false if `end` came first.
fn sleep_until_before(d: Duration, end: std::time::Instant) -> bool {
    let now = std::time::Instant::now();
    let left = end.saturating_duration_since(now);
    std::thread::sleep(d.min(left));
    d < left
}

/// libfaketime's relative offset syntax.
fn faketime_spec(offset_secs: i64) -> String {
    format!("{offset_secs:+}s\n")
}
