//! Fenced leader election on the real servers: every issuer, with one SQL
//! store and one object store.
//!
//! - Three candidates; the first leader is a separate process (for the
//!   memory issuer, a thread with its own runtime, blocked) stopped with
//!   SIGSTOP just before it writes, past its TTL. A follower takes over,
//!   fencing both stores, and writes one of them; the old leader wakes, and
//!   its in-flight writes are refused by **both** stores. The new leader
//!   resigns and the third candidate takes over at once (well within the
//!   TTL its predecessor's lease would otherwise have lived). An observer
//!   sees the three terms in order, with strictly increasing tokens.
//! - Leader kill on the etcd cluster and the ZooKeeper ensemble: candidates
//!   campaign, write and resign in a loop while the cluster's leader is
//!   killed and restarted; the store never accepts two writers in one term.
//!
//! Each pair prints its takeover gap: from the old leader's pause to the
//! new leader's first accepted write (a measurement, not an assertion).

use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use fencing_harness::env::{ETCD_CLUSTER, ZK_ENSEMBLE};
use fencing_harness::failover::Cluster;
use fencing_harness::process::{Signal, StdoutLines, signal, spawn_reporting_token};
use fencing_integration::candidate;
use fencing_integration::{RUN_PREFIX_VAR, issuer, run_prefix};
use fencing_tokens::election::{Election, Leader, Leadership};
use fencing_tokens::memory::MemoryStore;
use fencing_tokens::{Error, FencedStore, FencingToken, TokenIssuer};

/// The followers' TTL: a hand-over well within it was a resign, not an
/// expiry.
const FOLLOWER_TTL: Duration = Duration::from_secs(20);

/// The first leader, paused just before it writes.
enum Zombie {
    /// `election-candidate`, stopped with SIGSTOP.
    Process { child: Child, lines: StdoutLines },
    /// The memory issuer's stand-in: a thread whose whole runtime (the
    /// keep-alive included) blocks until it is resumed.
    Thread {
        resume: mpsc::Sender<()>,
        verdicts: mpsc::Receiver<Vec<String>>,
    },
}

impl Zombie {
    /// Starts the first leader; returns it, paused, and its token.
    fn start(
        issuer_name: &str,
        issuer: &Arc<dyn TokenIssuer>,
        ttl: Duration,
        resource: &str,
        targets: &[(String, String)],
    ) -> (Self, FencingToken) {
        if issuer_name != "memory" {
            let (child, lines, token) = spawn_reporting_token(
                Command::new(env!("CARGO_BIN_EXE_election-candidate"))
                    .args([issuer_name, resource, "zombie"])
                    .args(targets.iter().map(|(s, k)| format!("{s}={k}")))
                    .env(RUN_PREFIX_VAR, run_prefix()),
                "leader",
            );
            signal(child.id(), Signal::SIGSTOP);
            return (Self::Process { child, lines }, FencingToken::new(token));
        }
        let (token_tx, token_rx) = mpsc::channel();
        let (resume, resume_rx) = mpsc::channel::<()>();
        let (verdicts_tx, verdicts) = mpsc::channel();
        let (issuer, resource, targets) = (issuer.clone(), resource.to_owned(), targets.to_vec());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let targets = candidate::open_targets(&targets).await.expect("stores");
                let term = candidate::election(issuer, &resource, "zombie", ttl, &targets)
                    .campaign()
                    .await
                    .expect("campaign");
                token_tx.send(term.token()).unwrap();
                // Paused: nothing of this runtime runs, the keep-alive neither.
                resume_rx.recv().unwrap();
                let written = candidate::in_flight_writes(&targets, term.token(), "zombie").await;
                verdicts_tx.send(written).unwrap();
            });
        });
        let token = token_rx.recv().expect("the zombie thread leads");
        (Self::Thread { resume, verdicts }, token)
    }

    /// Resumes it; returns what the stores answered its in-flight writes.
    fn resume(self, stores: usize) -> Vec<String> {
        match self {
            Self::Process {
                mut child,
                mut lines,
            } => {
                signal(child.id(), Signal::SIGCONT);
                let verdicts = (0..stores)
                    .map(|_| lines.next().expect("a verdict").expect("readable"))
                    .collect();
                child.wait().unwrap();
                verdicts
            }
            Self::Thread { resume, verdicts } => {
                resume.send(()).unwrap();
                verdicts.recv().expect("verdicts")
            }
        }
    }
}

/// Collects every term an observer sees, in order.
fn watch_terms(election: &Election) -> tokio::task::JoinHandle<Vec<Leader>> {
    let mut observer = election.observe();
    tokio::spawn(async move {
        let mut terms: Vec<Leader> = Vec::new();
        while terms.len() < 3 {
            match observer.next_term().await {
                Ok(leader) => terms.push(leader),
                Err(e) => {
                    eprintln!("observer: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        terms
    })
}

async fn paused_leader_is_refused(issuer_name: &str, sql: &str, object: &str) {
    let Some((issuer, ttl)) = issuer(issuer_name).await else {
        return;
    };
    let resource = fencing_testkit::unique_name("elect");
    let names: Vec<(String, String)> = [sql, object]
        .iter()
        .map(|s| ((*s).to_owned(), fencing_testkit::unique_name("elect-key")))
        .collect();
    let Some(targets) = candidate::open_targets(&names).await else {
        return;
    };
    let (sql_store, sql_key) = (&targets[0].1, &targets[0].2);
    let (object_store, object_key) = (&targets[1].1, &targets[1].2);

    let watcher = Election::new(issuer.clone(), &resource, "observer", ttl).with_poll_interval(
        (ttl / 10).clamp(Duration::from_millis(10), Duration::from_millis(100)),
    );
    let terms = watch_terms(&watcher);

    // 1. The first leader wins, fences, and is paused just before it writes.
    let (zombie, zombie_token) = Zombie::start(issuer_name, &issuer, ttl, &resource, &names);
    let paused_at = Instant::now();

    // 2. Two followers; one takes over once the paused leader's TTL runs out.
    let follower = |name: &str| {
        let election = candidate::election(issuer.clone(), &resource, name, FOLLOWER_TTL, &targets);
        tokio::spawn(async move { election.campaign().await })
    };
    let (mut b, mut c) = (follower("b"), follower("c"));
    let (first, second) = tokio::select! {
        won = &mut b => (won, c),
        won = &mut c => (won, b),
    };
    let first = first.unwrap().expect("a follower takes over");
    assert!(
        first.token() > zombie_token,
        "{issuer_name}: term tokens rise"
    );
    // The new leader writes the SQL store only: the object store is just fenced.
    sql_store
        .put(sql_key, "from the second term".into(), first.token())
        .await
        .expect("the new leader writes");
    let gap = paused_at.elapsed();

    // 3. The old leader wakes; both its in-flight writes are refused.
    let verdicts = zombie.resume(targets.len());
    assert_eq!(
        verdicts,
        [sql, object].map(|s| format!("refused {s} {zombie_token} {}", first.token())),
        "{issuer_name} × {sql} + {object}: the woken leader must be refused by both stores"
    );
    let stored = sql_store.get(sql_key).await.unwrap().expect("a value");
    assert_eq!(
        (stored.value.as_ref(), stored.token),
        (&b"from the second term"[..], first.token())
    );
    assert_eq!(object_store.get(object_key).await.unwrap(), None);
    assert_eq!(
        object_store.mark(object_key).await.unwrap(),
        Some(first.token())
    );

    // 4. A resign hands over at once.
    tokio::time::sleep(ttl / 2).await; // let the observer see the term
    let (first_leader, resigned_at) = (first.leader(), Instant::now());
    first.resign().await.expect("resign");
    let second = tokio::time::timeout(FOLLOWER_TTL / 2, second)
        .await
        .unwrap_or_else(|_| panic!("{issuer_name}: a resign must hand over at once"))
        .unwrap()
        .expect("the third candidate takes over");
    let handover = resigned_at.elapsed();
    assert!(second.token() > first_leader.token);
    for (_, store, key) in &targets {
        store
            .put(key, "from the third term".into(), second.token())
            .await
            .expect("the third leader writes");
    }

    // 5. The observer saw every term, in order.
    let terms = tokio::time::timeout(FOLLOWER_TTL, terms)
        .await
        .unwrap_or_else(|_| panic!("{issuer_name}: the observer missed a term"))
        .unwrap();
    let seen: Vec<(&str, FencingToken)> = terms
        .iter()
        .map(|l| (l.candidate.as_str(), l.token))
        .collect();
    assert_eq!(
        seen,
        [
            ("zombie", zombie_token),
            (first_leader.candidate.as_str(), first_leader.token),
            (second.leader().candidate.as_str(), second.token()),
        ],
        "{issuer_name}: the observer's terms"
    );
    second.resign().await.expect("resign");
    println!(
        "{issuer_name} × {sql} + {object}: takeover gap {:.2}s (ttl {:.2}s), resign hand-over {:.3}s",
        gap.as_secs_f64(),
        ttl.as_secs_f64(),
        handover.as_secs_f64()
    );
}

macro_rules! election_pairs {
    ($($name:ident: $issuer:literal, $sql:literal, $object:literal),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                paused_leader_is_refused($issuer, $sql, $object).await;
            }
        )+
    };
}

election_pairs! {
    memory_x_sqlite_s3: "memory", "sqlite", "s3",
    sqlite_x_postgres_azure: "sqlite", "postgres", "azure",
    postgres_x_mariadb_gcs: "postgres", "mariadb", "gcs",
    mariadb_x_postgres_s3: "mariadb", "postgres", "s3",
    redis_x_sqlite_gcs: "redis", "sqlite", "gcs",
    etcd_x_postgres_s3: "etcd", "postgres", "s3",
    zookeeper_x_mariadb_azure: "zookeeper", "mariadb", "azure",
}

// ---- Leader kill on a cluster ----

/// One accepted or refused write, in the store's order.
#[derive(Debug)]
struct Write {
    candidate: usize,
    token: FencingToken,
    accepted: bool,
}

/// Writes through one lock, so the log is in the order the store decided.
#[derive(Clone, Debug, Default)]
struct Recorder {
    store: Arc<MemoryStore>,
    log: Arc<tokio::sync::Mutex<Vec<Write>>>,
}

impl Recorder {
    async fn put(&self, candidate: usize, token: FencingToken) -> bool {
        let mut log = self.log.lock().await;
        let accepted = match self.store.put("state", "x".into(), token).await {
            Ok(()) => true,
            Err(Error::StaleToken { .. }) => false,
            Err(e) => panic!("memory store: {e}"),
        };
        log.push(Write {
            candidate,
            token,
            accepted,
        });
        accepted
    }
}

/// Candidates campaign, write every 50 ms while they lead (stopping when
/// the term is lost), and resign after a second, while the cluster's leader
/// is killed and later restarted.
async fn leader_kill_keeps_one_writer_per_term(
    cluster: &Cluster,
    issuer: Arc<dyn TokenIssuer>,
    ttl: Duration,
) {
    let resource = fencing_testkit::unique_name("elect-failover");
    let recorder = Recorder::default();
    let run_for = Duration::from_secs(16);
    let t0 = Instant::now();
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut candidates = Vec::new();
    for id in 0..3 {
        let election = Election::new(issuer.clone(), &resource, format!("c{id}"), ttl)
            .fence_on_takeover(recorder.store.clone(), "state");
        let (recorder, errors) = (recorder.clone(), errors.clone());
        candidates.push(tokio::spawn(async move {
            while t0.elapsed() < run_for {
                let term: Leadership =
                    match tokio::time::timeout(ttl * 3, election.campaign()).await {
                        Ok(Ok(term)) => term,
                        Ok(Err(e)) => {
                            errors.lock().unwrap().push(format!(
                                "{:.1}s c{id} campaign: {e}",
                                t0.elapsed().as_secs_f64()
                            ));
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue;
                        }
                        Err(_) => continue,
                    };
                let lost = term.lost();
                tokio::pin!(lost);
                let until = Instant::now() + Duration::from_secs(1);
                while Instant::now() < until {
                    recorder.put(id, term.token()).await;
                    tokio::select! {
                        _ = &mut lost => break,
                        () = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
                let _ = term.resign().await;
            }
        }));
    }

    tokio::time::sleep(Duration::from_secs(3)).await;
    let leader = cluster.leader();
    let killed_at = t0.elapsed();
    let down = cluster.kill(leader, Signal::SIGKILL);
    eprintln!(
        "{:.1}s: killed the {} leader (pid {}, port {})",
        killed_at.as_secs_f64(),
        cluster.server.service,
        leader.0,
        leader.1
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    let restart = down.restart();
    eprintln!("restarted it in {:.1}s", restart.as_secs_f64());
    for candidate in candidates {
        candidate.await.unwrap();
    }

    let log = recorder.log.lock().await;
    let mut writers: BTreeMap<FencingToken, usize> = BTreeMap::new();
    let mut last = FencingToken::new(0);
    for write in log.iter().filter(|w| w.accepted) {
        assert!(write.token >= last, "the store accepted a lower token");
        last = write.token;
        let writer = writers.entry(write.token).or_insert(write.candidate);
        assert_eq!(
            *writer, write.candidate,
            "two accepted writers in the term of token {}",
            write.token
        );
    }
    let refused = log.iter().filter(|w| !w.accepted).count();
    let errors = errors.lock().unwrap();
    println!(
        "{} leader kill: {} terms wrote, {} writes accepted, {refused} refused; {} campaign errors{}",
        cluster.server.service,
        writers.len(),
        log.len() - refused,
        errors.len(),
        errors
            .iter()
            .take(5)
            .map(|e| format!("\n  {e}"))
            .collect::<String>()
    );
    assert!(
        writers.len() >= 4,
        "too few terms to prove anything: {writers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_cluster_leader_kill_keeps_one_writer_per_term() {
    let cluster = Cluster::new(ETCD_CLUSTER);
    if cluster.server.skipped() {
        return;
    }
    let endpoints = cluster.server.endpoint().replace("http://", "");
    let url = format!("etcd://{endpoints}?prefix={}/&timeout=3s", run_prefix());
    let issuer = fencing_tokens::open_issuer(&url)
        .await
        .unwrap_or_else(|e| cluster.server.unavailable(&e));
    leader_kill_keeps_one_writer_per_term(&cluster, issuer, Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_ensemble_leader_kill_keeps_one_writer_per_term() {
    let cluster = Cluster::new(ZK_ENSEMBLE);
    if cluster.server.skipped() {
        return;
    }
    let url = format!("zk://{}/{}", cluster.server.endpoint(), run_prefix());
    let issuer = fencing_tokens::open_issuer(&url)
        .await
        .unwrap_or_else(|e| cluster.server.unavailable(&e));
    leader_kill_keeps_one_writer_per_term(&cluster, issuer, Duration::from_secs(6)).await;
}
