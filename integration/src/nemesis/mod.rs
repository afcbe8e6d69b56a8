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
pub mod schedule;
pub mod servers;
pub mod suite;
pub mod timeline;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencing_harness::process::Signal;
use tokio::io::{AsyncBufReadExt, BufReader};

use schedule::{Fault, Step};
use servers::{Cluster, Proc, Topology};
use timeline::{Event, FaultSpan, RunReport, Timeline, real_monotonic_ns};

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

/// One issuer × store run.
#[derive(Clone, Debug)]
pub struct PairSpec {
    /// How reports name it.
    pub label: String,
    /// The issuer's URL (registry grammar).
    pub issuer_url: String,
    /// The store's URL.
    pub store_url: String,
    /// Lease TTL.
    pub ttl: Duration,
    /// Seeds the schedule and the clients.
    pub seed: u64,
    /// How long the clients run.
    pub length: Duration,
    /// One entry per client: its host (None: the root namespace) and clock.
    pub clients: Vec<(Option<net::Host>, Clock)>,
    /// The faults to draw from.
    pub menu: schedule::Menu,
    /// Writes a lease, at most.
    pub writes_max: u32,
    /// The chance that a write is followed by a slow step past the TTL.
    pub slow_step_chance: f64,
    /// Independent locks (each with its own key) the clients pick from.
    pub lanes: u32,
    /// The negative control: clients present a constant huge token instead
    /// of their lease's (events still name the lease's).
    pub unfenced: bool,
}

/// Runs `spec` with the `nemesis-client` at `client_bin`: opens the issuer
/// and store once (creating tables), starts the clients, plays a random
/// schedule, stops the clients, reads the key's final state and judges the
/// run. Returns the report and the timeline (for [`Timeline::svg`]).
pub async fn run_pair(
    nemesis: &mut Nemesis,
    client_bin: &Path,
    spec: &PairSpec,
    work: &Path,
) -> Result<(RunReport, Timeline), String> {
    let prefix = fencing_testkit::unique_prefix();
    let (resource, key) = (format!("{prefix}/lock"), format!("{prefix}/key"));
    // A run starts on a settled service: the last run's heal may have just
    // restarted a member, and the cluster may still be electing.
    if let Some(cluster) = &nemesis.cluster {
        tokio::task::block_in_place(|| cluster.wait_leader(Duration::from_secs(60)))?;
    }
    let issuer = open_settled(|| fencing_tokens::open_issuer(&spec.issuer_url))
        .await
        .map_err(|e| {
            format!(
                "{}: cannot open the issuer {}: {e}",
                spec.label, spec.issuer_url
            )
        })?;
    let store = fencing_tokens::open_store(&spec.store_url)
        .await
        .map_err(|e| {
            format!(
                "{}: cannot open the store {}: {e}",
                spec.label, spec.store_url
            )
        })?;
    drop(issuer);

    let mut timeline = Timeline::start();
    let events = Arc::new(Mutex::new(Vec::new()));
    let mut children = Vec::new();
    let mut readers = Vec::new();
    nemesis.clients.clear();
    nemesis.clock_files.clear();
    for (i, (host, clock)) in spec.clients.iter().enumerate() {
        let mut cmd = servers::client_command(host.as_ref(), client_bin);
        cmd.args([
            &i.to_string(),
            &spec.issuer_url,
            &spec.store_url,
            &resource,
            &key,
            &spec.ttl.as_millis().to_string(),
            &spec.seed.to_string(),
            &spec.writes_max.to_string(),
            &spec.slow_step_chance.to_string(),
            &spec.lanes.to_string(),
        ]);
        let mut clock_file = None;
        match clock {
            Clock::Real => {}
            Clock::Offset(secs) => {
                cmd.env("LD_PRELOAD", LIBFAKETIME)
                    .env("FAKETIME", faketime_spec(*secs).trim())
                    .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
            }
            Clock::Jumping { all_clocks } => {
                let file = work.join(format!("clock-{prefix}-{i}"));
                std::fs::write(&file, faketime_spec(0)).map_err(|e| e.to_string())?;
                cmd.env("LD_PRELOAD", LIBFAKETIME)
                    .env("FAKETIME_TIMESTAMP_FILE", &file)
                    // Re-read the file each second: a jump lands within one.
                    .env("FAKETIME_CACHE_DURATION", "1");
                if !all_clocks {
                    cmd.env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
                }
                clock_file = Some(ClockFile {
                    path: file,
                    all_clocks: *all_clocks,
                    offset: 0,
                });
            }
        }
        if *clock != Clock::Real && !Path::new(LIBFAKETIME).exists() {
            return Err(format!(
                "clock runs need libfaketime ({LIBFAKETIME}): run `integration/services.sh deps` (Debian faketime)"
            ));
        }
        if spec.unfenced {
            cmd.env(UNFENCED_VAR, "1");
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", client_bin.display()))?;
        nemesis.clients.push(child.id().unwrap_or(0));
        nemesis.clock_files.push(clock_file);
        let stdout = child.stdout.take().expect("piped");
        let events = events.clone();
        readers.push(tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some((at, event)) = Event::parse(&line) {
                    events.lock().expect("poisoned").push((i, at, event));
                }
            }
        }));
        children.push(child);
    }

    // Faults for the first three quarters, then all healed: the last
    // quarter shows the service recover (Jepsen's final phase), so a run
    // whose faults starved it still ends with grants to judge.
    let faulty = spec.length * 3 / 4;
    let steps = schedule::random(spec.seed, faulty, &spec.menu);
    let faults = Arc::new(Mutex::new(Vec::new()));
    let mut moved = std::mem::take(nemesis);
    let recorded = faults.clone();
    let played = tokio::task::spawn_blocking(move || {
        moved.play(&steps, faulty, &recorded);
        if let Err(e) = moved.heal() {
            eprintln!("nemesis: heal failed: {e}");
        }
        moved
    })
    .await
    .map_err(|e| format!("the nemesis panicked: {e}"))?;
    *nemesis = played;
    tokio::time::sleep(spec.length - faulty).await;

    // Stop: close every stdin, let each finish its call, then kill stragglers.
    // The run's windows end here; what the clients answer after still counts.
    timeline.span.1 = real_monotonic_ns();
    for child in &mut children {
        drop(child.stdin.take());
    }
    let grace = spec.ttl * 4 + Duration::from_secs(10);
    for child in &mut children {
        if tokio::time::timeout(grace, child.wait()).await.is_err() {
            let _ = child.kill().await;
        }
    }
    for reader in readers {
        let _ = reader.await;
    }
    timeline.events = std::mem::take(&mut *events.lock().expect("poisoned"));
    timeline.faults = std::mem::take(&mut *faults.lock().expect("poisoned"));

    let mut finals = std::collections::BTreeMap::new();
    for lane in timeline.lanes() {
        let key = format!("{key}/{lane}");
        let value = store
            .get(&key)
            .await
            .map_err(|e| format!("final get: {e}"))?;
        let mark = store
            .mark(&key)
            .await
            .map_err(|e| format!("final mark: {e}"))?;
        finals.insert(lane, (value, mark));
    }
    let report = timeline.check(&spec.label, spec.seed, &finals);
    Ok((report, timeline))
}

/// Opens a backend, retrying retryable errors for up to 30 s.
async fn open_settled<T, F, Fut>(open: F) -> fencing_tokens::Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = fencing_tokens::Result<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match open().await {
            Err(e) if e.is_retryable() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            result => return result,
        }
    }
}

/// Writes the timeline of a run (SVG and the raw events) under `dir`;
/// returns where.
pub fn write_evidence(dir: &Path, report: &RunReport, timeline: &Timeline) -> String {
    let stem: String = format!("{}-{}", report.label, report.seed)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let _ = std::fs::create_dir_all(dir);
    let svg = dir.join(format!("{stem}.svg"));
    let log = dir.join(format!("{stem}.events"));
    let _ = std::fs::write(&svg, timeline.svg(&report.to_string()));
    let mut text = String::new();
    for f in &timeline.faults {
        text.push_str(&format!(
            "{} fault {} {} until {}\n",
            f.start, f.kind, f.detail, f.end
        ));
    }
    for (c, at, e) in &timeline.events {
        text.push_str(&format!("{at} client {} {e:?}\n", c + 1));
    }
    let _ = std::fs::write(&log, text);
    format!("{} and {}", svg.display(), log.display())
}
