//! Killing a cluster's leader under load.
//!
//! Clients acquire, fence, write, renew, write and release in a loop, with
//! every write recorded by the [`History`] checker, while the harness kills
//! the leader (SIGKILL) and later restarts it, both through this
//! checkout's `services`, in-process (`leader`, `restart-member`). Tokens must
//! stay strictly increasing in grant order and no stale write may be
//! accepted. The [`FailoverReport`] says how long acquires stalled, and
//! carries the grants for checks of the adapter's own (ZooKeeper's epoch).
//!
//! etcd and ZooKeeper run the same harness: only the issuer, the cluster
//! and the TTL differ, so they are its parameters.
//!
//! ```no_run
//! use std::time::Duration;
//! use fencing_core::memory::MemoryIssuer;
//! use fencing_harness::env::ETCD_CLUSTER;
//! use fencing_harness::failover::{Cluster, FailoverConfig, leader_kill};
//!
//! # async fn run() {
//! let config = FailoverConfig::with_ttl(Duration::from_secs(3));
//! // `None`: this run skips the cluster (FENCING_SKIP=etcd-cluster).
//! let Some(report) = leader_kill(&Cluster::new(ETCD_CLUSTER), &config, |endpoints| async move {
//!     // Connect a real issuer to `endpoints` here.
//!     # let _ = endpoints;
//!     Ok::<_, fencing_core::Error>(MemoryIssuer::new())
//! })
//! .await
//! else {
//!     return;
//! };
//! println!("{report}");
//! # }
//! ```

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencing_core::memory::MemoryStore;
use fencing_core::{FencedStore, FencingToken, LeaseRequest, TokenIssuer};
use fencing_servers::run;
use fencing_testkit::history::{History, Tally};

use crate::env::Server;
use crate::error_chain;
use crate::process::Signal;

/// How long a failing `services` call is tried again: a busy machine can
/// make a status probe miss.
const RETRY_FOR: Duration = Duration::from_secs(15);

/// A cluster this checkout's `services` runs and can kill a member of.
///
/// Driven in-process (`fencing_servers::run`, on this checkout's state:
/// `FENCING_STATE_DIR`, else `integration/.state`), never by running
/// `integration/services.sh`: that shim runs `cargo run`, which must not
/// run inside `cargo test`. Its methods block (they probe the members):
/// from async code, call them on a blocking thread
/// (`tokio::task::spawn_blocking`).
#[derive(Clone, Copy, Debug)]
pub struct Cluster {
    /// The cluster's endpoints, skip flag and service name.
    pub server: Server,
}

impl Cluster {
    /// `server`'s cluster. This checkout's `services` must own it: a member
    /// it restarts into another checkout's cluster on the same ports joins
    /// it with other data.
    pub fn new(server: Server) -> Self {
        Self { server }
    }

    /// `f`'s answer, tried again for up to 15 s; fails the test naming how
    /// to bring the cluster up.
    fn retrying<T>(&self, what: &str, f: impl Fn() -> Result<T, String>) -> T {
        let give_up = Instant::now() + RETRY_FOR;
        loop {
            match f() {
                Ok(answer) => return answer,
                Err(e) => assert!(
                    Instant::now() < give_up,
                    "`services {what}` failed: {e}\nIs the cluster up? Start it with `integration/services.sh up {}`.",
                    self.server.service
                ),
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// `(pid, port)` of the leader.
    pub fn leader(&self) -> (u32, u16) {
        let service = self.server.service;
        self.retrying(&format!("leader {service}"), || run::leader(service))
    }

    /// `(pid, port)` of a member of ours that does not lead.
    pub fn a_follower(&self) -> (u32, u16) {
        let (_, leader_port) = self.leader();
        let prefix = format!("{}-", self.server.service);
        let status: Vec<String> = run::status().filter(|l| l.starts_with(&prefix)).collect();
        status
            .iter()
            .find_map(|line| {
                let (port, pid) = ours_in_status(line)?;
                (port != leader_port).then_some((pid, port))
            })
            .unwrap_or_else(|| panic!("no follower of ours in:\n{}", status.join("\n")))
    }

    /// Kills the member `(pid, port)` with `signal` (`SIGKILL`,
    /// `SIGTERM`); the member is started again when the returned guard is
    /// dropped or [`restarted`](MemberDown::restart), so a failing test
    /// leaves the cluster as it found it.
    ///
    /// # Panics
    /// If the signal cannot be sent.
    pub fn kill(&self, (pid, port): (u32, u16), signal: Signal) -> MemberDown {
        crate::process::signal(pid, signal);
        MemberDown {
            cluster: *self,
            port: Some(port),
        }
    }
}

/// The port and pid of a `status` line of a member of ours:
/// `NAME PORT ANSWERING ours (pid PID)` (or `ours (adopted, pid PID; …)`).
fn ours_in_status(line: &str) -> Option<(u16, u32)> {
    let port = line.split_whitespace().nth(1)?.parse().ok()?;
    let after = line.split_once("ours (")?.1.split_once("pid ")?.1;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    Some((port, digits.parse().ok()?))
}

/// A member [`Cluster::kill`] stopped; restarted when dropped.
#[derive(Debug)]
pub struct MemberDown {
    cluster: Cluster,
    port: Option<u16>,
}

impl MemberDown {
    /// Starts the member again now (blocking, see [`Cluster`]); returns how
    /// long that took.
    pub fn restart(mut self) -> Duration {
        let started = Instant::now();
        if let Some(port) = self.port.take() {
            let service = self.cluster.server.service;
            self.cluster
                .retrying(&format!("restart-member {service} {port}"), || {
                    run::restart_member(service, port)
                });
        }
        started.elapsed()
    }
}

impl Drop for MemberDown {
    fn drop(&mut self) {
        if let Some(port) = self.port.take() {
            // Best effort on the way out of a failing test; the error says
            // what happened.
            if let Err(e) = run::restart_member(self.cluster.server.service, port) {
                eprintln!("restarting the killed member on port {port}: {e}");
            }
        }
    }
}

/// Stops the single server `service` runs (`postgres`, `redis-aof`),
/// whoever started it, and starts it again as this checkout's, waiting
/// until it answers: `services restart`, in-process, on a blocking thread.
/// One we had not started (the machine's PostgreSQL) is adopted, so that
/// `services down` leaves it running.
///
/// # Panics
/// When it does not come back, naming the service.
pub async fn restart_server(service: &'static str) {
    let restarted = tokio::task::spawn_blocking(move || run::restart(service))
        .await
        .unwrap_or_else(|e| panic!("restarting {service}: {e}"));
    if let Err(e) = restarted {
        panic!("`services restart {service}` failed: {e}");
    }
}

/// How to run the failover.
#[derive(Clone, Debug)]
pub struct FailoverConfig {
    /// Concurrent clients.
    pub clients: usize,
    /// Their lease TTL: long enough that a renew survives the leader
    /// election.
    pub ttl: Duration,
    /// How long the clients loop.
    pub run_for: Duration,
    /// When the leader is killed, after the clients warmed up.
    pub kill_after: Duration,
    /// How long the killed member stays down.
    pub down_for: Duration,
    /// How long one acquire may wait.
    pub acquire_wait: Duration,
    /// Fewer grants than this prove nothing.
    pub min_grants: usize,
}

impl FailoverConfig {
    /// 3 clients for 30 s, the leader killed at 5 s and restarted 10 s
    /// later, acquires waiting up to 30 s, more than 20 grants required.
    pub fn with_ttl(ttl: Duration) -> Self {
        Self {
            clients: 3,
            ttl,
            run_for: Duration::from_secs(30),
            kill_after: Duration::from_secs(5),
            down_for: Duration::from_secs(10),
            acquire_wait: Duration::from_secs(30),
            min_grants: 20,
        }
    }
}

#[derive(Clone, Debug)]
struct Attempt {
    started: Instant,
    took: Duration,
    granted: bool,
}

/// What a failover run saw. Its checks have passed when it is returned.
#[derive(Clone, Debug)]
pub struct FailoverReport {
    /// The cluster's name.
    pub cluster: &'static str,
    /// Every granted token, in grant order (strictly increasing).
    pub grants: Vec<FencingToken>,
    /// Acquires that failed.
    pub failed_acquires: usize,
    /// Acquire, renew and release errors, with when and which client.
    pub errors: Vec<String>,
    /// When the leader was killed, from the start.
    pub killed_at: Duration,
    /// The slowest acquire.
    pub slowest_acquire: Duration,
    /// When it started, from the start.
    pub slowest_acquire_started: Duration,
    /// The longest time without a grant.
    pub longest_gap: Duration,
    /// When that gap began, from the start.
    pub longest_gap_from: Duration,
    /// The checked history of writes.
    pub tally: Tally,
}

impl std::fmt::Display for FailoverReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} failover: {} grants, {} failed acquires, {} errors; leader killed at {:.1}s; \
             slowest acquire {:.2}s (started at {:.1}s); longest time without a grant {:.2}s (from {:.1}s); \
             {} accepted writes, {} refused as stale",
            self.cluster,
            self.grants.len(),
            self.failed_acquires,
            self.errors.len(),
            self.killed_at.as_secs_f64(),
            self.slowest_acquire.as_secs_f64(),
            self.slowest_acquire_started.as_secs_f64(),
            self.longest_gap.as_secs_f64(),
            self.longest_gap_from.as_secs_f64(),
            self.tally.accepted,
            self.tally.refused,
        )
    }
}

/// Runs the failover on `cluster`, or returns `None` if this run skips it
/// (`FENCING_SKIP`). `connect` gets the cluster's endpoint string (the
/// variable or the default) and returns the issuer under test; an error
/// fails the test naming the cluster and how to start it.
///
/// Panics unless tokens strictly increase in grant order, more than
/// `min_grants` were granted, and the history shows no stale accept and at
/// least one accepted write. Prints the report and the first 20 errors.
pub async fn leader_kill<I, E, F, Fut>(
    cluster: &Cluster,
    config: &FailoverConfig,
    connect: F,
) -> Option<FailoverReport>
where
    I: TokenIssuer + 'static,
    E: std::fmt::Display,
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<I, E>>,
{
    let server = cluster.server;
    if server.skipped() {
        return None;
    }
    let issuer: Arc<dyn TokenIssuer> = match connect(server.endpoint()).await {
        Ok(issuer) => Arc::new(issuer),
        Err(e) => server.unavailable(&e),
    };
    let (first_leader, _) = leader_of(*cluster).await;
    assert!(first_leader > 0);

    let resource = format!("{}/failover", fencing_testkit::unique_prefix());
    let key = format!("{resource}/data");
    let store: Arc<dyn FencedStore> = Arc::new(MemoryStore::new());
    let history = History::new();
    let grants: Arc<Mutex<Vec<FencingToken>>> = Arc::default();
    let attempts: Arc<Mutex<Vec<Attempt>>> = Arc::default();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let t0 = Instant::now();
    let error =
        move |errors: &Mutex<Vec<String>>, what: String, e: &(dyn std::error::Error + 'static)| {
            errors.lock().expect("poisoned").push(format!(
                "{:.1}s {what}: {}",
                t0.elapsed().as_secs_f64(),
                error_chain(e)
            ));
        };

    let mut clients = Vec::new();
    for client in 0..config.clients {
        let (issuer, store, history) = (issuer.clone(), store.clone(), history.clone());
        let (grants, attempts, errors) = (grants.clone(), attempts.clone(), errors.clone());
        let (resource, key, config) = (resource.clone(), key.clone(), config.clone());
        clients.push(tokio::spawn(async move {
            let mut cycle = 0_u32;
            while t0.elapsed() < config.run_for {
                cycle += 1;
                let started = Instant::now();
                let acquired = issuer
                    .acquire(
                        &LeaseRequest::new(&resource, config.ttl),
                        config.acquire_wait,
                    )
                    .await;
                attempts.lock().expect("poisoned").push(Attempt {
                    started,
                    took: started.elapsed(),
                    granted: acquired.is_ok(),
                });
                let lease = match acquired {
                    Ok(lease) => {
                        grants.lock().expect("poisoned").push(lease.token());
                        lease
                    }
                    Err(e) => {
                        error(&errors, format!("client {client} acquire"), &e);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if cycle.is_multiple_of(3) {
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
                        error(&errors, format!("client {client} renew"), &e);
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
                    error(&errors, format!("client {client} release"), &e);
                }
            }
        }));
    }

    // Kill the leader after the clients warm up; restart it later.
    tokio::time::sleep(config.kill_after).await;
    let (pid, port) = leader_of(*cluster).await;
    let killed_at = t0.elapsed();
    let restart = cluster.kill((pid, port), Signal::SIGKILL);
    eprintln!(
        "{:.1}s: killed the leader of the {} (pid {pid}, port {port})",
        killed_at.as_secs_f64(),
        server.name
    );
    tokio::time::sleep(config.down_for).await;
    let restart_started = t0.elapsed();
    let restart_took = tokio::task::spawn_blocking(move || restart.restart())
        .await
        .expect("restart");
    let (new_pid, new_port) = leader_of(*cluster).await;
    eprintln!(
        "{:.1}s: restarted port {port} (took {restart_took:?}); leader now pid {new_pid} port {new_port}",
        restart_started.as_secs_f64()
    );

    for c in clients {
        c.await.expect("client panicked");
    }

    // Tokens strictly increase in grant order.
    let grants = grants.lock().expect("poisoned").clone();
    assert!(
        grants.len() > config.min_grants,
        "too few grants to prove anything: {grants:?}"
    );
    assert!(
        grants.windows(2).all(|w| w[0] < w[1]),
        "tokens in grant order are not strictly increasing: {grants:?}"
    );
    // No stale write was accepted.
    let tally = history.check_final(&*store, &key).await;
    assert!(
        tally.violations.is_empty(),
        "history violations:\n  {}",
        tally.violations.join("\n  ")
    );

    // How long did acquires stall around the kill?
    let attempts = attempts.lock().expect("poisoned").clone();
    let slowest = attempts.iter().max_by_key(|a| a.took).expect("attempts");
    let mut grant_times: Vec<Duration> = attempts
        .iter()
        .filter(|a| a.granted)
        .map(|a| a.started.duration_since(t0) + a.took)
        .collect();
    grant_times.sort();
    let (longest_gap_from, longest_gap) = grant_times
        .windows(2)
        .map(|w| (w[0], w[1] - w[0]))
        .max_by_key(|(_, gap)| *gap)
        .expect("grants");
    let report = FailoverReport {
        cluster: server.name,
        grants,
        failed_acquires: attempts.iter().filter(|a| !a.granted).count(),
        errors: errors.lock().expect("poisoned").clone(),
        killed_at,
        slowest_acquire: slowest.took,
        slowest_acquire_started: slowest.started.duration_since(t0),
        longest_gap,
        longest_gap_from,
        tally,
    };
    println!("{report}");
    for e in report.errors.iter().take(20) {
        println!("  {e}");
    }
    assert!(report.tally.accepted > 0);
    Some(report)
}

/// [`Cluster::leader`] on a blocking thread.
async fn leader_of(cluster: Cluster) -> (u32, u16) {
    tokio::task::spawn_blocking(move || cluster.leader())
        .await
        .unwrap_or_else(|e| panic!("asking {} for its leader: {e}", cluster.server.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pid_of_a_member_of_ours_is_read_from_its_status_line() {
        let ours = "etcd-cluster-2      12379  yes        ours (pid 3811)";
        assert_eq!(ours_in_status(ours), Some((12379, 3811)));
        let adopted =
            "postgres            5432   yes        ours (adopted, pid 77; down leaves it running)";
        assert_eq!(ours_in_status(adopted), Some((5432, 77)));
        assert_eq!(
            ours_in_status("etcd-cluster-3      13379  yes        external"),
            None
        );
        assert_eq!(
            ours_in_status("etcd-cluster-3      13379  no         -"),
            None
        );
    }
}
