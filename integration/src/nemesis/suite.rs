//! The nemesis runs, shared by the CI test (`tests/nemesis.rs`) and the
//! `nemesis` binary (long mode, RELIABILITY.md):
//! - partition runs: the etcd cluster or the ZooKeeper ensemble in three
//!   namespaces, PostgreSQL and moto in their own, four clients in theirs,
//!   under a random schedule of partitions, lossy links, kills and pauses;
//! - single-server runs: moto alone in a namespace as issuer and store (the
//!   bucket issuer on its bucket, DynamoDB on its table), four clients whose
//!   links to it are cut, lossy or slow, or who are paused;
//! - clock runs: every issuer on this checkout's servers with PostgreSQL as
//!   the store, five clients whose clocks are true, 5 h slow, 7 h fast,
//!   jumping (wall clock) and jumping forward (every clock).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::schedule::Menu;
use super::servers::{self, Cluster, ClusterKind, Topology};
use super::timeline::RunReport;
use super::{Clock, Nemesis, PairSpec, net, run_pair, write_evidence};

/// How much to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One run per pair, sized for CI.
    Ci,
    /// Runs per pair until this many fenced calls were made.
    Long(usize),
}

impl Mode {
    fn run_length(self) -> Duration {
        match self {
            Self::Ci => Duration::from_secs(20),
            Self::Long(_) => Duration::from_secs(120),
        }
    }

    fn clock_run_length(self) -> Duration {
        match self {
            Self::Ci => Duration::from_secs(12),
            Self::Long(_) => Duration::from_secs(120),
        }
    }

    /// A run of `issuer_url` × `store_url` with this mode's client load:
    /// the long mode writes more per lease on four locks at once, for
    /// volume; CI makes more zombies per write on one lock. No clients and
    /// no faults yet.
    fn spec(
        self,
        label: String,
        issuer_url: String,
        store_url: String,
        ttl: Duration,
        seed: u64,
    ) -> PairSpec {
        let (writes_max, slow_step_chance, lanes) = match self {
            Self::Ci => (30, 0.04, 1),
            Self::Long(_) => (120, 0.01, 4),
        };
        PairSpec {
            label,
            issuer_url,
            store_url,
            ttl,
            seed,
            length: self.run_length(),
            clients: Vec::new(),
            menu: Menu::default(),
            writes_max,
            slow_step_chance,
            lanes,
            unfenced: false,
        }
    }

    fn enough(self, operations: usize) -> bool {
        match self {
            Self::Ci => true,
            Self::Long(target) => operations >= target,
        }
    }
}

/// Where failing runs' timelines go (every run's with `FENCING_NEMESIS_KEEP`
/// set): `target/nemesis`.
pub fn evidence_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/nemesis")
}

/// One pair's runs: the reports, and where the last one's timeline was
/// written when a run broke the contract.
#[derive(Debug)]
pub struct PairRuns {
    /// `issuer × store`.
    pub label: String,
    /// One report per run.
    pub runs: Vec<RunReport>,
    /// Timelines of runs with violations.
    pub evidence: Vec<String>,
}

impl PairRuns {
    /// Panics if any run broke the contract or proved nothing.
    pub fn assert_clean(&self) {
        for (i, run) in self.runs.iter().enumerate() {
            run.assert_clean(self.evidence.get(i).map_or("-", String::as_str));
        }
    }

    /// Fenced calls over every run.
    pub fn operations(&self) -> usize {
        self.runs.iter().map(|r| r.operations).sum()
    }
}

/// Runs `spec` (seeds `seed`, `seed + 1`, … in long mode) until `mode` has
/// enough, writing the timeline of any run with violations.
async fn repeat(
    nemesis: &mut Nemesis,
    client_bin: &Path,
    spec: &mut PairSpec,
    mode: Mode,
    work: &Path,
) -> Result<PairRuns, String> {
    let mut pair = PairRuns {
        label: spec.label.clone(),
        runs: Vec::new(),
        evidence: Vec::new(),
    };
    let first_seed = spec.seed;
    loop {
        let (report, timeline) = run_pair(nemesis, client_bin, spec, work).await?;
        println!("{report}");
        let keep = std::env::var_os("FENCING_NEMESIS_KEEP").is_some();
        let evidence = if report.violations.is_empty() && !keep {
            "-".to_owned()
        } else {
            write_evidence(&evidence_dir(), &report, &timeline)
        };
        pair.evidence.push(evidence);
        pair.runs.push(report);
        if mode.enough(pair.operations()) {
            return Ok(pair);
        }
        spec.seed = spec.seed.wrapping_add(1);
        if spec.seed == first_seed {
            return Ok(pair);
        }
    }
}

/// The partition runs on `kind` × `stores` (`postgres`, `s3`: moto).
pub async fn partition_runs(
    kind: ClusterKind,
    stores: &[&str],
    mode: Mode,
    seed: u64,
    client_bin: &Path,
) -> Result<Vec<PairRuns>, String> {
    net::preflight()?;
    let work = tempdir(kind.name())?;
    let clients = 4;
    let topology = Topology::new(&kind.name()[..4], clients)?;
    let cluster = Cluster::start(kind, &topology.members, &work)?;
    let pg_host = topology.postgres.as_ref().ok_or("no PostgreSQL host")?;
    let (pg, pg_url) = servers::postgres(pg_host, &work)?;
    let (moto, s3_url) = servers::moto(&topology.s3, &work, "nemesis")?;
    let client_hosts: Vec<_> = topology.clients.clone();
    let issuer_url = cluster.issuer_url(&fencing_testkit::unique_prefix());
    let mut nemesis = Nemesis::cluster(topology, cluster, vec![pg, moto]);
    let ttl = Duration::from_secs(2);
    let mut pairs = Vec::new();
    for (store, store_url) in [("postgres", pg_url), ("s3", s3_url)] {
        if !stores.contains(&store) {
            continue;
        }
        let mut spec = PairSpec {
            length: mode.run_length(),
            clients: client_hosts
                .iter()
                .map(|h| (Some(h.clone()), Clock::Real))
                .collect(),
            menu: Menu {
                members: 3,
                clients,
                ttl,
                cluster_faults: true,
                client_links: false,
                jumping_clocks: Vec::new(),
            },
            ..mode.spec(
                format!("{} × {store}", kind.name()),
                issuer_url.clone(),
                store_url,
                ttl,
                seed,
            )
        };
        pairs.push(repeat(&mut nemesis, client_bin, &mut spec, mode, &work).await?);
    }
    drop(nemesis);
    let _ = std::fs::remove_dir_all(&work);
    Ok(pairs)
}

/// The single-server pairs, where one server is both issuer and store:
/// the bucket issuer on the bucket it fences (`bucket-s3`) and DynamoDB on
/// its table (`dynamodb-dynamodb`), both on moto.
pub const SINGLE_SERVERS: &[&str] = &["bucket-s3", "dynamodb-dynamodb"];

/// The partition runs of the single-server pairs named in `pairs` (of
/// [`SINGLE_SERVERS`]): moto in a namespace, four clients in theirs, whose
/// links to it the schedule cuts, loses and slows, and whose processes it
/// stops. No member faults: there are no members. An isolated client's
/// lease expires while it cannot even write; healed, its old token must be
/// refused.
pub async fn single_server_runs(
    pairs: &[&str],
    mode: Mode,
    seed: u64,
    client_bin: &Path,
) -> Result<Vec<PairRuns>, String> {
    net::preflight()?;
    let work = tempdir("single")?;
    let clients = 4;
    let topology = Topology::single_server(clients)?;
    let (moto, bucket_url) = servers::moto(&topology.s3, &work, "nemesis")?;
    let prefix = fencing_testkit::unique_prefix();
    let urls = [
        (
            "bucket-s3",
            "s3 bucket issuer × s3, one server",
            // One URL, both roles: lease records under the prefix, the
            // store's objects beside them.
            format!("{bucket_url}&lease_prefix={prefix}-lease/"),
        ),
        (
            "dynamodb-dynamodb",
            "dynamodb × dynamodb, one server",
            servers::dynamodb_url(&topology.s3, "nemesis"),
        ),
    ];
    let client_hosts: Vec<_> = topology.clients.clone();
    let mut nemesis = Nemesis::single_server(topology, moto);
    let ttl = Duration::from_secs(2);
    let mut runs = Vec::new();
    for (name, label, url) in urls {
        if !pairs.contains(&name) {
            continue;
        }
        let mut spec = PairSpec {
            length: mode.run_length(),
            clients: client_hosts
                .iter()
                .map(|h| (Some(h.clone()), Clock::Real))
                .collect(),
            menu: Menu {
                members: 0,
                clients,
                ttl,
                cluster_faults: true,
                client_links: true,
                jumping_clocks: Vec::new(),
            },
            ..mode.spec(label.to_owned(), url.clone(), url, ttl, seed)
        };
        runs.push(repeat(&mut nemesis, client_bin, &mut spec, mode, &work).await?);
    }
    drop(nemesis);
    let _ = std::fs::remove_dir_all(&work);
    Ok(runs)
}

/// The stores of the partition runs.
pub const STORES: &[&str] = &["postgres", "s3"];

/// The issuers of the clock runs: every issuer of this workspace that
/// runs out of process (the memory issuer lives in one).
pub fn clock_issuers() -> Vec<&'static str> {
    crate::issuers()
        .into_iter()
        .filter(|i| *i != "memory")
        .collect()
}

/// The clock runs: each issuer × PostgreSQL (or × its own bucket or table,
/// [`crate::own_store_url_of`]), five clients with true, slow, fast,
/// jumping and all-clocks-jumping clocks, client pauses past the TTL so
/// that zombies do reach the store.
pub async fn clock_runs(
    issuers: &[&str],
    mode: Mode,
    seed: u64,
    client_bin: &Path,
) -> Result<Vec<PairRuns>, String> {
    let work = tempdir("clocks")?;
    let store_url = crate::issuer_url_of("postgres").ok_or("no PostgreSQL URL")?;
    let mut pairs = Vec::new();
    for name in issuers {
        let issuer_url = crate::issuer_url_of(name).ok_or_else(|| format!("no URL for {name}"))?;
        // Opening it here first makes what its URL names (an emulator's
        // bucket), which the clients then open by URL.
        if crate::issuer(name).await.is_none() {
            continue;
        }
        let (store, store_url) = match crate::own_store_url_of(name) {
            Some(own) => (*name, own),
            None => ("postgres", store_url.clone()),
        };
        let ttl = match *name {
            "etcd" | "zookeeper" => Duration::from_secs(2),
            _ => Duration::from_millis(800),
        };
        let clocks = vec![
            Clock::Real,
            Clock::Offset(-5 * 3600),
            Clock::Offset(7 * 3600),
            Clock::Jumping { all_clocks: false },
            Clock::Jumping { all_clocks: true },
        ];
        let mut spec = PairSpec {
            length: mode.clock_run_length(),
            clients: clocks.into_iter().map(|c| (None, c)).collect(),
            menu: Menu {
                members: 0,
                clients: 5,
                ttl,
                cluster_faults: true,
                client_links: false,
                jumping_clocks: vec![(3, false), (4, true)],
            },
            ..mode.spec(
                format!("{name} × {store}, skewed clocks"),
                issuer_url,
                store_url,
                ttl,
                seed,
            )
        };
        let mut nemesis = Nemesis::default();
        pairs.push(repeat(&mut nemesis, client_bin, &mut spec, mode, &work).await?);
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(pairs)
}

/// The negative control: clients that present a constant token far above
/// any lease's, as code without fencing effectively does, on `issuer` ×
/// PostgreSQL with client pauses. The store then refuses nothing, and the
/// checker must see the zombies' writes land: a checker that passes this
/// run could not catch anything.
pub async fn unfenced_control(
    issuer: &str,
    seed: u64,
    client_bin: &Path,
) -> Result<RunReport, String> {
    let work = tempdir("unfenced")?;
    let ttl = Duration::from_millis(500);
    let issuer_url = crate::issuer_url_of(issuer).ok_or_else(|| format!("no URL for {issuer}"))?;
    let store_url = crate::issuer_url_of("postgres").ok_or("no PostgreSQL URL")?;
    let label = format!("{issuer} × postgres, unfenced clients");
    let mut spec = PairSpec {
        length: Duration::from_secs(8),
        clients: vec![(None, Clock::Real); 3],
        slow_step_chance: 0.08,
        menu: Menu {
            members: 0,
            clients: 3,
            ttl,
            cluster_faults: true,
            client_links: false,
            jumping_clocks: Vec::new(),
        },
        ..Mode::Ci.spec(label, issuer_url, store_url, ttl, seed)
    };
    spec.unfenced = true;
    let (report, timeline) = run_pair(&mut Nemesis::default(), client_bin, &spec, &work).await?;
    // What a broken store looks like, kept to compare a failing run with.
    println!(
        "timeline: {}",
        write_evidence(&evidence_dir(), &report, &timeline)
    );
    let _ = std::fs::remove_dir_all(&work);
    Ok(report)
}

fn tempdir(name: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!(
        "fencing-nemesis-{}-{name}-{}",
        std::process::id(),
        fencing_testkit::unique_prefix()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// The runs as RELIABILITY.md's table: one row per pair, summed over runs
/// (the longest windows are the longest of any run).
pub fn markdown_table(pairs: &[PairRuns]) -> String {
    let mut out = String::from(
        "| pair | runs | fenced calls | accepted | refused as stale | faults injected | two holders at once (windows, longest) | stale accepts | longest without a grant | longest without an accepted write |\n\
         |---|---:|---:|---:|---:|---|---|---:|---:|---:|\n",
    );
    for pair in pairs {
        let sum = |f: fn(&RunReport) -> usize| pair.runs.iter().map(f).sum::<usize>();
        let longest =
            |f: fn(&RunReport) -> Duration| pair.runs.iter().map(f).max().unwrap_or_default();
        let mut faults = std::collections::BTreeMap::<&str, usize>::new();
        for run in &pair.runs {
            for (kind, n) in &run.faults {
                *faults.entry(kind).or_default() += n;
            }
        }
        let faults: Vec<String> = faults.iter().map(|(k, n)| format!("{k} {n}")).collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {}, {:.1} s | {} | {:.1} s | {:.1} s |\n",
            pair.label,
            pair.runs.len(),
            sum(|r| r.operations),
            sum(|r| r.accepted),
            sum(|r| r.refused),
            if faults.is_empty() {
                "-".to_owned()
            } else {
                faults.join(", ")
            },
            sum(|r| r.overlaps),
            longest(|r| r.longest_overlap).as_secs_f64(),
            sum(|r| r.stale_accepts),
            longest(|r| r.longest_without_grant).as_secs_f64(),
            longest(|r| r.longest_without_accept).as_secs_f64(),
        ));
    }
    out
}
