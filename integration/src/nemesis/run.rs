//! One issuer × store run: the clients started, a schedule played against
//! them, the run judged, and its evidence written.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use super::timeline::{Event, RunReport, Timeline, real_monotonic_ns};
use super::{
    Clock, ClockFile, LIBFAKETIME, Nemesis, UNFENCED_VAR, faketime_spec, net, schedule, servers,
};

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
