//! Leader change on the 3-server ZooKeeper ensemble (`FENCING_ZK_ENSEMBLE`,
//! default ports 11181/12181/13181; start it with
//! `integration/services.sh up zk-ensemble`).
//!
//! Clients acquire, fence, write, renew, write and release in a loop, with
//! every write recorded by the history checker, while the test kills the
//! leader (SIGKILL) and later restarts it. Tokens must stay strictly
//! increasing in grant order and no stale write may be accepted. The test
//! prints how long acquires stalled.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencing::memory::MemoryStore;
use fencing::{FencedStore, FencingToken, LeaseRequest, TokenIssuer};
use fencing_testkit::env::Server;
use fencing_testkit::history::History;
use fencing_zookeeper::{TokenSource, ZkIssuer};

/// The cluster, as `integration/services.sh` names it.
const ZK_ENSEMBLE: Server = Server {
    name: "ZooKeeper ensemble (3 servers)",
    service: "zk-ensemble",
    var: "FENCING_ZK_ENSEMBLE",
    default: "127.0.0.1:11181,127.0.0.1:12181,127.0.0.1:13181",
};

fn services_sh() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../integration/services.sh")
}

/// Runs `services.sh ARGS`, returning its stdout; fails the test naming
/// how to bring the cluster up. A busy machine can make a status probe
/// miss, so a failure is tried again for up to 15 s.
fn services(args: &[&str]) -> String {
    let give_up = Instant::now() + Duration::from_secs(15);
    loop {
        let out = std::process::Command::new(services_sh())
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", services_sh().display()));
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).trim().to_owned();
        }
        assert!(
            Instant::now() < give_up,
            "`integration/services.sh {}` failed: {}\nIs the cluster up? Start it with `integration/services.sh up zk-ensemble`.",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `(pid, port)` of the leader.
fn leader() -> (u32, u16) {
    let line = services(&["leader", "zk-ensemble"]);
    let mut parts = line.split_whitespace();
    let pid = parts.next().and_then(|p| p.parse().ok());
    let port = parts.next().and_then(|p| p.parse().ok());
    match (pid, port) {
        (Some(pid), Some(port)) => (pid, port),
        _ => panic!("unexpected output from `services.sh leader zk-ensemble`: {line:?}"),
    }
}

/// Restarts a killed member when dropped, so a failing test leaves the
/// cluster as it found it.
struct Restart(Option<u16>);

impl Restart {
    fn now(mut self) -> Duration {
        let started = Instant::now();
        if let Some(port) = self.0.take() {
            services(&["restart-member", "zk-ensemble", &port.to_string()]);
        }
        started.elapsed()
    }
}

impl Drop for Restart {
    fn drop(&mut self) {
        if let Some(port) = self.0.take() {
            let _ = std::process::Command::new(services_sh())
                .args(["restart-member", "zk-ensemble", &port.to_string()])
                .status();
        }
    }
}

/// An error with its sources, for the report.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

#[derive(Clone, Debug)]
struct Attempt {
    started: Instant,
    took: Duration,
    granted: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_kill_keeps_tokens_increasing_and_refuses_stale_writes() {
    if ZK_ENSEMBLE.skipped() {
        return;
    }
    let prefix = format!("/fencing-test/{}", fencing_testkit::unique_prefix());
    let issuer =
        match ZkIssuer::connect_with(&ZK_ENSEMBLE.endpoint(), &prefix, TokenSource::Czxid).await {
            Ok(issuer) => issuer,
            Err(e) => ZK_ENSEMBLE.unavailable(&e),
        };
    let (first_leader, _) = leader();
    assert!(first_leader > 0);

    let resource = format!("{}/failover", fencing_testkit::unique_prefix());
    let key = format!("{resource}/data");
    let store: Arc<dyn FencedStore> = Arc::new(MemoryStore::new());
    let history = History::new();
    let grants: Arc<Mutex<Vec<FencingToken>>> = Arc::default();
    let attempts: Arc<Mutex<Vec<Attempt>>> = Arc::default();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let t0 = Instant::now();
    let run_for = Duration::from_secs(30);
    let ttl = Duration::from_secs(6);

    let mut clients = Vec::new();
    for client in 0..3 {
        let (issuer, store, history) = (issuer.clone(), store.clone(), history.clone());
        let (grants, attempts, errors) = (grants.clone(), attempts.clone(), errors.clone());
        let (resource, key) = (resource.clone(), key.clone());
        clients.push(tokio::spawn(async move {
            let mut cycle = 0_u32;
            while t0.elapsed() < run_for {
                cycle += 1;
                let started = Instant::now();
                let acquired = issuer
                    .acquire(&LeaseRequest::new(&resource, ttl), Duration::from_secs(30))
                    .await;
                let lease = match acquired {
                    Ok(lease) => {
                        grants.lock().unwrap().push(lease.token());
                        attempts.lock().unwrap().push(Attempt {
                            started,
                            took: started.elapsed(),
                            granted: true,
                        });
                        lease
                    }
                    Err(e) => {
                        attempts.lock().unwrap().push(Attempt {
                            started,
                            took: started.elapsed(),
                            granted: false,
                        });
                        errors.lock().unwrap().push(format!(
                            "{:.1}s client {client} acquire: {}",
                            t0.elapsed().as_secs_f64(),
                            chain(&e)
                        ));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if matches!(cycle % 3, 0) {
                    let _ = history.fence(&*store, client, &key, lease.token()).await;
                }
                let value = format!("client {client} cycle {cycle} token {}", lease.token());
                let _ = history
                    .put(&*store, client, &key, value.clone().into(), lease.token())
                    .await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                let lease = match issuer.renew(&lease).await {
                    Ok(renewed) => renewed,
                    Err(e) => {
                        errors.lock().unwrap().push(format!(
                            "{:.1}s client {client} renew: {}",
                            t0.elapsed().as_secs_f64(),
                            chain(&e)
                        ));
                        lease
                    }
                };
                let _ = history
                    .put(
                        &*store,
                        client,
                        &key,
                        (value + " again").into(),
                        lease.token(),
                    )
                    .await;
                if let Err(e) = issuer.release(&lease).await {
                    errors.lock().unwrap().push(format!(
                        "{:.1}s client {client} release: {}",
                        t0.elapsed().as_secs_f64(),
                        chain(&e)
                    ));
                }
            }
        }));
    }

    // Kill the leader after the clients warm up; restart it later.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (pid, port) = leader();
    let killed_at = t0.elapsed();
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "could not kill the leader (pid {pid})");
    let restart = Restart(Some(port));
    eprintln!(
        "{:.1}s: killed the ZooKeeper leader (pid {pid}, port {port})",
        killed_at.as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let restart_started = t0.elapsed();
    let restart_took = tokio::task::spawn_blocking(move || restart.now())
        .await
        .expect("restart");
    let (new_pid, new_port) = leader();
    eprintln!(
        "{:.1}s: restarted port {port} (took {restart_took:?}); leader now pid {new_pid} port {new_port}",
        restart_started.as_secs_f64()
    );

    for c in clients {
        c.await.expect("client panicked");
    }

    // Tokens strictly increase in grant order.
    let grants = grants.lock().unwrap().clone();
    assert!(
        grants.len() > 20,
        "too few grants to prove anything: {grants:?}"
    );
    assert!(
        grants.windows(2).all(|w| w[0] < w[1]),
        "tokens in grant order are not strictly increasing: {grants:?}"
    );
    // The czxid's high 32 bits are the epoch: a new leader starts a higher one.
    let epoch = |t: &FencingToken| t.get() >> 32;
    let (first, last) = (
        grants.first().expect("grants"),
        grants.last().expect("grants"),
    );
    println!(
        "czxid epochs: {} before the kill, {} at the end",
        epoch(first),
        epoch(last)
    );
    assert!(
        epoch(last) > epoch(first),
        "no new epoch after the leader change: {first} .. {last}"
    );
    // No stale write was accepted.
    let final_state = (
        store.get(&key).await.unwrap(),
        store.mark(&key).await.unwrap(),
    );
    let tally = history.check(Some(final_state));
    assert!(
        tally.violations.is_empty(),
        "history violations:\n  {}",
        tally.violations.join("\n  ")
    );

    // How long did acquires stall around the kill?
    let attempts = attempts.lock().unwrap().clone();
    let slowest = attempts.iter().max_by_key(|a| a.took).expect("attempts");
    let mut grant_times: Vec<Duration> = attempts
        .iter()
        .filter(|a| a.granted)
        .map(|a| a.started.duration_since(t0) + a.took)
        .collect();
    grant_times.sort();
    let (gap_from, gap) = grant_times
        .windows(2)
        .map(|w| (w[0], w[1] - w[0]))
        .max_by_key(|(_, gap)| *gap)
        .expect("grants");
    let errors = errors.lock().unwrap().clone();
    println!(
        "ZooKeeper leader change: {} grants, {} failed acquires, {} errors; leader killed at {:.1}s; \
         slowest acquire {:.2}s (started at {:.1}s); longest time without a grant {:.2}s (from {:.1}s); \
         {} accepted writes, {} refused as stale",
        grants.len(),
        attempts.iter().filter(|a| !a.granted).count(),
        errors.len(),
        killed_at.as_secs_f64(),
        slowest.took.as_secs_f64(),
        slowest.started.duration_since(t0).as_secs_f64(),
        gap.as_secs_f64(),
        gap_from.as_secs_f64(),
        tally.accepted,
        tally.refused,
    );
    for e in errors.iter().take(20) {
        println!("  {e}");
    }
    assert!(tally.accepted > 0);
}
