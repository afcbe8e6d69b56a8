//! What keeps a Redis issuer from handing out a token twice, on real
//! servers: the refusal of replicated topologies and of settings that lose
//! writes, the check again after a reconnect, the replicated opt-in (WAIT),
//! TTLs rounded up on the wire, the top of the token range, and `verify`.
//!
//! Servers: the append-only Redis (`FENCING_REDIS_AOF_URL`), the volatile
//! one (`FENCING_REDIS_URL`), the replicated pair
//! (`FENCING_REDIS_PRIMARY_URL`, `FENCING_REDIS_REPLICA_URL`:
//! `integration/services.sh up redis-replica`), and private `redis-server`
//! processes started here for configurations the shared servers must not be
//! switched to while other tests use them.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{grant_once, raw};
use fencing_core::safety::Verdict;
use fencing_core::{Error, FencingToken, LeaseRequest, Result, TokenIssuer};
use fencing_harness::env::{REDIS, REDIS_AOF, REDIS_PRIMARY, REDIS_REPLICA, Server};
use fencing_harness::proxy::SwitchProxy;
use fencing_redis::{Durability, Layout, RECHECK_WINDOW, RedisConfig, RedisIssuer};
use fencing_servers::Private;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

const TTL: Duration = Duration::from_secs(10);

async fn connect_to(url: &str, durability: Durability) -> Result<RedisIssuer> {
    RedisConfig::new(url)
        .with_durability(durability)
        .with_prefix(format!("{}:", fencing_testkit::unique_prefix()))
        .connect_issuer()
        .await
}

/// An issuer on `server`, or `None` if the run skips it.
async fn issuer_on(server: &Server, durability: Durability) -> Option<RedisIssuer> {
    if server.skipped() {
        return None;
    }
    match connect_to(&server.endpoint(), durability).await {
        Ok(issuer) => Some(issuer),
        Err(e @ Error::Backend { .. }) => server.unavailable(&e),
        Err(e) => panic!("{} at {}: {e}", server.name, server.endpoint()),
    }
}

/// The reason of Redis's `UnsafeConfiguration`; anything else fails the test.
fn refusal<T: std::fmt::Debug>(result: Result<T>, what: &str) -> String {
    fencing_testkit::safety::refusal(result, "redis", what)
}

/// A grant of `"after"` that must be refused (`what` names the case)
/// without writing the counter on `url`; returns the reason.
async fn refused_grant(issuer: &RedisIssuer, url: &str, what: &str) -> String {
    let reason = refusal(
        issuer.try_acquire(&LeaseRequest::new("after", TTL)).await,
        what,
    );
    let fence = format!("{}after:fence", issuer.prefix());
    assert_eq!(
        get(url, &fence).await,
        None,
        "a refused grant wrote the counter"
    );
    reason
}

/// Grants of fresh resources, one after another, until one is refused:
/// the first must come within [`RECHECK_WINDOW`] of `changed` (a grant
/// that starts later is refused, whatever the last full check found), and
/// writes nothing. Returns the reason.
async fn refused_within_the_window(
    issuer: &RedisIssuer,
    url: &str,
    changed: Instant,
    what: &str,
) -> String {
    for attempt in 0.. {
        let resource = format!("after-{attempt}");
        let started = Instant::now();
        match issuer.try_acquire(&LeaseRequest::new(&resource, TTL)).await {
            Ok(Some(lease)) => {
                let late = started.duration_since(changed);
                assert!(
                    late < RECHECK_WINDOW,
                    "{what}: a grant that started {late:?} after the change, beyond \
                     RECHECK_WINDOW ({RECHECK_WINDOW:?})"
                );
                issuer.release(&lease).await.expect("release");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => {
                let reason = refusal(other, what);
                let fence = format!("{}{resource}:fence", issuer.prefix());
                assert_eq!(
                    get(url, &fence).await,
                    None,
                    "a refused grant wrote the counter"
                );
                return reason;
            }
        }
    }
    unreachable!()
}

/// The server process's `run_id`, as the grant script compares it.
async fn run_id(url: &str) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut raw(url).await)
        .await
        .expect("INFO server");
    info.lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .expect("run_id in INFO server")
        .trim()
        .to_owned()
}

/// Where the grant script of `issuer` (the Fencing layout) remembers the
/// slower checks of the process `run_id`.
fn verdict_key(issuer: &RedisIssuer, run_id: &str) -> String {
    format!("{}guard-verdict:{run_id}", issuer.prefix())
}

/// Writes the verdict the grant script of `issuer` would write on the
/// server at `url` (this process's own `run_id`, for the whole window), as
/// a copy of it would arrive.
async fn plant_verdict(issuer: &RedisIssuer, url: &str) {
    let id = run_id(url).await;
    plant_verdict_of(issuer, url, &id).await;
}

/// [`plant_verdict`] for the process `id`, on whatever server is at `url`.
async fn plant_verdict_of(issuer: &RedisIssuer, url: &str, id: &str) {
    let _: () = redis::cmd("SET")
        .arg(verdict_key(issuer, id))
        .arg(id)
        .arg("PX")
        .arg(u64::try_from(RECHECK_WINDOW.as_millis()).expect("a window in milliseconds"))
        .query_async(&mut raw(url).await)
        .await
        .expect("SET");
}

async fn config_set(url: &str, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query_async(&mut raw(url).await)
        .await
        .expect("CONFIG SET");
}

/// A private replica of `primary`, once `primary` sees it.
async fn replica_of(primary: &Private) -> Private {
    let port = primary.port().to_string();
    let replica = private_redis(&["--replicaof", "127.0.0.1", &port]).await;
    wait_for_replicas(&url_of(primary), 1).await;
    replica
}

/// [`refusal`] of a connection to `url` requiring durability.
async fn refused(url: &str, what: &str) -> String {
    refusal(connect_to(url, Durability::Required).await, what)
}

async fn get(url: &str, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut raw(url).await)
        .await
        .unwrap()
}

fn addr_of(url: &str) -> SocketAddr {
    let hostport = url.trim_start_matches("redis://").trim_end_matches('/');
    let hostport = hostport.split('/').next().unwrap();
    hostport
        .parse()
        .unwrap_or_else(|_| panic!("{url}: expected redis://IP:PORT"))
}

// ---------------------------------------------------------------------------
// Private servers.

/// A `redis-server` of this test's own: redis-aof's spec (append-only,
/// every write fsynced) with `extra` after its own arguments, on a free
/// port, stopped when dropped. Started on a blocking thread: starting one
/// probes it with `redis-cli`.
async fn private_redis(extra: &[&str]) -> Private {
    let extra: Vec<String> = extra.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let aof = fencing_servers::service("redis-aof").expect("redis-aof's spec");
        Private::build(aof).args(extra).start()
    })
    .await
    .expect("the thread starting a private redis-server")
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The URL of a private server.
fn url_of(server: &Private) -> String {
    server.endpoint(&REDIS_AOF)
}

/// Acquires through a connection that was just cut: transient errors until
/// the client has reconnected, then the first real answer.
async fn acquire_after_reconnect(issuer: &RedisIssuer, resource: &str) -> Result<()> {
    let started = Instant::now();
    loop {
        match issuer.try_acquire(&LeaseRequest::new(resource, TTL)).await {
            Err(e @ (Error::Backend { .. } | Error::OutcomeUnknown { .. })) => {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "no reconnect within 20 s: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(lease) => {
                let lease = lease.expect("a fresh resource is free");
                issuer.release(&lease).await?;
                return Ok(());
            }
            Err(e) => return Err(e),
        }
    }
}

// ---------------------------------------------------------------------------
// Replication and lossy settings are refused.

#[tokio::test]
async fn a_replica_is_refused() {
    if REDIS_REPLICA.skipped() {
        return;
    }
    let reason = refused(&REDIS_REPLICA.endpoint(), "a replica").await;
    assert!(reason.contains("role"), "{reason}");
    assert!(reason.contains("replica"), "{reason}");
}

#[tokio::test]
async fn a_primary_with_a_connected_replica_is_refused() {
    if REDIS_PRIMARY.skipped() {
        return;
    }
    let reason = refused(
        &REDIS_PRIMARY.endpoint(),
        "a primary with an asynchronous replica",
    )
    .await;
    assert!(reason.contains("connected_slaves"), "{reason}");
    assert!(reason.contains("Durability::Replicated"), "{reason}");
}

#[tokio::test]
async fn no_appendfsync_on_rewrite_is_refused() {
    let server = private_redis(&["--no-appendfsync-on-rewrite", "yes"]).await;
    let reason = refused(&url_of(&server), "no-appendfsync-on-rewrite yes").await;
    assert!(reason.contains("no-appendfsync-on-rewrite"), "{reason}");
    assert!(
        reason.contains("Durability::AcceptVolatileCounter"),
        "{reason}"
    );
}

/// A replica that attaches after the issuer connected is seen by the next
/// grant, which writes nothing.
#[tokio::test]
async fn a_replica_attached_after_connect_stops_the_next_grant() {
    let primary = private_redis(&[]).await;
    let issuer = connect_to(&url_of(&primary), Durability::Required)
        .await
        .expect("a lone append-only primary is safe");
    grant_once(&issuer, "before", TTL).await;

    let replica = replica_of(&primary).await;
    // The process's own verdict, fresh: replicas are checked before it is
    // looked at, so it spares the grant nothing.
    plant_verdict(&issuer, &url_of(&primary)).await;
    let reason = refused_grant(
        &issuer,
        &url_of(&primary),
        "a grant on a primary that gained a replica",
    )
    .await;
    assert!(reason.contains("connected_slaves"), "{reason}");
    drop(replica);
}

/// A grant after `CONFIG SET name value` on a private append-only primary
/// the issuer connected to and granted on: refused within
/// [`RECHECK_WINDOW`], without writing ([`refused_within_the_window`]).
async fn refused_after_config_set(name: &str, value: &str, what: &str) -> String {
    let server = private_redis(&[]).await;
    let url = url_of(&server);
    let issuer = connect_to(&url, Durability::Required)
        .await
        .expect("an append-only primary with noeviction is safe");
    grant_once(&issuer, "before", TTL).await;

    config_set(&url, name, value).await;
    refused_within_the_window(&issuer, &url, Instant::now(), what).await
}

/// An evicting policy switched on at run time (`CONFIG SET
/// maxmemory-policy allkeys-lru`, after the issuer connected and judged the
/// server) may evict the fence counter: grants are refused within
/// [`RECHECK_WINDOW`], without writing.
#[tokio::test]
async fn an_evicting_policy_set_after_connect_stops_grants_within_the_window() {
    let reason = refused_after_config_set(
        "maxmemory-policy",
        "allkeys-lru",
        "a grant after maxmemory-policy became allkeys-lru",
    )
    .await;
    assert!(
        reason.contains("maxmemory-policy is \"allkeys-lru\""),
        "{reason}"
    );
}

/// The append-only file switched off at run time (`CONFIG SET appendonly
/// no`): a crash would lose the counter, so grants are refused within
/// [`RECHECK_WINDOW`], without writing.
#[tokio::test]
async fn appendonly_switched_off_after_connect_stops_grants_within_the_window() {
    let reason = refused_after_config_set(
        "appendonly",
        "no",
        "a grant after appendonly was switched off",
    )
    .await;
    assert!(reason.contains("appendonly"), "{reason}");
}

/// The remembered verdict is trusted only as this process's own: a string
/// holding its `run_id`, with a TTL no longer than the window. On a server
/// made unsafe (`appendonly no`), a verdict planted by hand that holds
/// another `run_id`, has no TTL (`PERSIST`) or a longer one (a hand-made
/// key) is not trusted, and a key at its name that the grant refuses to
/// trust is left as it was (a safe server writes its own verdict over a
/// string holding its `run_id`, by design; never over another value or
/// type); one that is the script's own, within the window, is trusted:
/// the window the contract states, and what makes the refusals above mean
/// something.
#[tokio::test]
async fn only_this_process_s_own_verdict_within_the_window_is_trusted() {
    let server = private_redis(&[]).await;
    let url = url_of(&server);
    let issuer = connect_to(&url, Durability::Required)
        .await
        .expect("an append-only primary is safe");
    let id = run_id(&url).await;
    let key = verdict_key(&issuer, &id);
    config_set(&url, "appendonly", "no").await;
    let mut conn = raw(&url).await;
    let window = i64::try_from(RECHECK_WINDOW.as_millis()).expect("a window in milliseconds");
    let other = "0".repeat(id.len());
    for (what, value, ttl_ms) in [
        ("another process's run_id", other.as_str(), Some(window)),
        ("no TTL", id.as_str(), None),
        (
            "a TTL longer than the window",
            id.as_str(),
            Some(window * 600),
        ),
    ] {
        let mut set = redis::cmd("SET");
        set.arg(&key).arg(value);
        if let Some(ms) = ttl_ms {
            set.arg("PX").arg(ms);
        }
        let _: () = set.query_async(&mut conn).await.expect("SET");
        let reason = refused_grant(&issuer, &url, &format!("a verdict with {what}")).await;
        assert!(reason.contains("appendonly"), "{what}: {reason}");
        let (kept, ttl): (Option<String>, i64) = redis::pipe()
            .get(&key)
            .pttl(&key)
            .query_async(&mut conn)
            .await
            .expect("GET, PTTL");
        assert_eq!(
            kept.as_deref(),
            Some(value),
            "{what}: the planted key was written over"
        );
        match ttl_ms {
            None => assert_eq!(ttl, -1, "{what}: a TTL was set on it"),
            Some(ms) => assert!(ttl > ms / 2, "{what}: its TTL was changed: {ttl}"),
        }
    }
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("DEL");
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("run_id")
        .arg(&id)
        .query_async(&mut conn)
        .await
        .expect("HSET");
    let reason = refused_grant(&issuer, &url, "a hash at the verdict's name").await;
    assert!(reason.contains("appendonly"), "{reason}");
    let kind: String = redis::cmd("TYPE")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("TYPE");
    assert_eq!(
        kind, "hash",
        "the hash at the verdict's name was written over"
    );
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("DEL");
    plant_verdict_of(&issuer, &url, &id).await;
    let lease = issuer
        .try_acquire(&LeaseRequest::new("trusted", TTL))
        .await
        .expect("a grant within the window of this process's own verdict")
        .expect("free");
    issuer.release(&lease).await.expect("release");
}

/// The verdict is written with `REPL_NONE`: a replica (and the AOF, which
/// sees what replicas see) never has it, while the grant's own writes
/// reach it. A replica promoted later, with its own `run_id`, has nothing
/// to trust.
#[tokio::test]
async fn the_remembered_verdict_is_not_replicated() {
    let primary = private_redis(&[]).await;
    let replica = replica_of(&primary).await;
    let (primary_url, replica_url) = (url_of(&primary), url_of(&replica));
    let issuer = connect_to(&primary_url, replicated(1, Duration::from_secs(2)))
        .await
        .expect("a primary with its one replica");
    let lease = grant_once(&issuer, "replicated", TTL).await;
    let key = verdict_key(&issuer, &run_id(&primary_url).await);
    assert_eq!(
        get(&primary_url, &key).await,
        Some(run_id(&primary_url).await),
        "the grant remembered no verdict"
    );
    let fence = format!("{}replicated:fence", issuer.prefix());
    assert_eq!(
        get(&replica_url, &fence).await,
        Some(lease.token().get().to_string()),
        "the WAIT acknowledged the counter on the replica"
    );
    assert_eq!(
        get(&replica_url, &key).await,
        None,
        "the verdict reached the replica"
    );
}

/// A verdict copied onto another process (a snapshot, an AOF rewrite or a
/// full sync copies every key in memory, and a replica promoted, or a
/// moved address, puts the issuer's connection on it) spares that process
/// nothing: the grant compares the process before it looks at the
/// verdict, and checks the new one in full.
#[tokio::test]
async fn a_copied_verdict_does_not_spare_another_process_its_checks() {
    let safe = private_redis(&[]).await;
    let volatile = private_redis(&["--appendonly", "no"]).await;
    let proxy = SwitchProxy::start(addr_of(&url_of(&safe))).await;
    let issuer = connect_to(&format!("redis://{}", proxy.addr()), Durability::Required)
        .await
        .expect("an append-only primary is safe");
    grant_once(&issuer, "before", TTL).await;
    let checked = run_id(&url_of(&safe)).await;

    proxy.switch(addr_of(&url_of(&volatile)));
    let started = Instant::now();
    let reason = loop {
        // Fresh for each attempt: the copy is within its window whenever
        // the grant runs.
        plant_verdict_of(&issuer, &url_of(&volatile), &checked).await;
        match issuer.try_acquire(&LeaseRequest::new("copied", TTL)).await {
            Err(e @ (Error::Backend { .. } | Error::OutcomeUnknown { .. })) => {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "no reconnect: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => break refusal(other, "a grant on another process holding a copied verdict"),
        }
    };
    assert!(reason.contains("appendonly"), "{reason}");
    let fence = format!("{}copied:fence", issuer.prefix());
    assert_eq!(
        get(&url_of(&volatile), &fence).await,
        None,
        "the refused grant wrote the counter"
    );
}

/// A login whose ACL allows only the prefix's keys (`~app:*`) can grant
/// and raise a floor in each layout whose keys are all under the prefix:
/// the guard's verdict key is under it too.
#[tokio::test]
async fn a_login_limited_to_the_prefix_grants_in_each_layout() {
    let server = private_redis(&[]).await;
    let url = url_of(&server);
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg("on")
        .arg(">app-secret")
        .arg("~app:*")
        .arg("&*")
        .arg("+@all")
        .query_async(&mut raw(&url).await)
        .await
        .expect("ACL SETUSER");
    let login = url.replacen("redis://", "redis://app:app-secret@", 1);
    for layout in [Layout::Fencing, Layout::SetNx] {
        let issuer = RedisConfig::new(&login)
            .with_layout(layout)
            .with_prefix("app:")
            .connect_issuer()
            .await
            .unwrap_or_else(|e| panic!("{layout:?}: {e}"));
        let lease = grant_once(&issuer, "limited", TTL).await;
        let floor = FencingToken::new(lease.token().get() + 10);
        issuer
            .raise_floor("limited", floor)
            .await
            .unwrap_or_else(|e| panic!("{layout:?}: {e}"));
        assert!(
            grant_once(&issuer, "limited", TTL).await.token() > floor,
            "{layout:?}"
        );
    }
}

/// A TTL on the fence counter (a sweep that expires every key under a
/// prefix, an `EXPIRE` by hand) would let it vanish and the tokens start
/// again at 1: the next grant and floor are refused, and the counter is
/// left as it was.
#[tokio::test]
async fn a_fence_counter_with_a_ttl_stops_the_next_grant() {
    let Some(issuer) = issuer_on(&REDIS_AOF, Durability::Required).await else {
        return;
    };
    let url = REDIS_AOF.endpoint();
    let resource = "expiring";
    let before = grant_once(&issuer, resource, TTL).await;
    let fence = format!("{}{resource}:fence", issuer.prefix());
    let mut conn = raw(&url).await;
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&fence)
        .arg(60_000)
        .query_async(&mut conn)
        .await
        .expect("PEXPIRE");
    let reason = refusal(
        issuer.try_acquire(&LeaseRequest::new(resource, TTL)).await,
        "a grant on a counter with a TTL",
    );
    assert!(
        reason.contains("fence counter") && reason.contains("TTL"),
        "{reason}"
    );
    let floor = FencingToken::new(before.token().get() + 100);
    let reason = refusal(
        issuer.raise_floor(resource, floor).await,
        "a floor on a counter with a TTL",
    );
    assert!(reason.contains("fence counter"), "{reason}");
    assert_eq!(
        get(&url, &fence).await,
        Some(before.token().get().to_string()),
        "the refused calls changed the counter"
    );
    let _: i64 = redis::cmd("DEL")
        .arg(&fence)
        .query_async(&mut conn)
        .await
        .expect("DEL");
}

/// With the replicated opt-in, a replica lost after connect stops the next
/// grant before anything is written (no WAIT could succeed).
#[tokio::test]
async fn a_replica_lost_after_connect_stops_the_next_replicated_grant() {
    let primary = private_redis(&[]).await;
    let replica = replica_of(&primary).await;
    let issuer = connect_to(&url_of(&primary), replicated(1, Duration::from_secs(2)))
        .await
        .expect("a primary with its one replica");
    grant_once(&issuer, "before", TTL).await;

    drop(replica);
    wait_for_replicas(&url_of(&primary), 0).await;
    let started = Instant::now();
    let reason = refused_grant(
        &issuer,
        &url_of(&primary),
        "a replicated grant with no replica connected",
    )
    .await;
    assert!(reason.contains("connected_slaves is 0"), "{reason}");
    // The WAIT pipelined behind the script still ran (one round trip on
    // the grant path), so the refusal came after its timeout at most.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

async fn wait_for_replicas(url: &str, replicas: usize) {
    let mut conn = raw(url).await;
    let started = Instant::now();
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .unwrap();
        // Online: synced, so it acknowledges a WAIT (a full sync starts
        // after repl-diskless-sync-delay, 5 s by default).
        if info.contains(&format!("connected_slaves:{replicas}\r"))
            && info.matches("state=online").count() == replicas
        {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{info}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The issuer's connection lands on another node (a virtual IP moved): the
/// next grant checks that node before anything is granted on it.
#[tokio::test]
async fn a_reconnect_to_another_node_is_checked_before_granting() {
    if REDIS_AOF.skipped() || REDIS.skipped() || REDIS_REPLICA.skipped() {
        return;
    }
    let proxy = SwitchProxy::start(addr_of(&REDIS_AOF.endpoint())).await;
    let issuer = connect_to(&format!("redis://{}", proxy.addr()), Durability::Required)
        .await
        .unwrap_or_else(|e| REDIS_AOF.unavailable(&e));
    acquire_after_reconnect(&issuer, "on-aof").await.unwrap();

    proxy.switch(addr_of(&REDIS.endpoint()));
    let reason = refusal(
        acquire_after_reconnect(&issuer, "on-volatile").await,
        "a grant after reconnecting to a Redis without persistence",
    );
    assert!(reason.contains("appendonly"), "{reason}");
    let fence = format!("{}on-volatile:fence", issuer.prefix());
    assert_eq!(get(&REDIS.endpoint(), &fence).await, None);

    proxy.switch(addr_of(&REDIS_REPLICA.endpoint()));
    let reason = refusal(
        acquire_after_reconnect(&issuer, "on-replica").await,
        "a grant after reconnecting to a replica",
    );
    assert!(reason.contains("role"), "{reason}");

    // Back on a safe node, grants resume.
    proxy.switch(addr_of(&REDIS_AOF.endpoint()));
    acquire_after_reconnect(&issuer, "on-aof-again")
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------
// What is sent: TTLs rounded up, the top of the token range.

/// Reads `MONITOR` on `url` and keeps the lines that mention `needle`.
async fn monitor(url: &str, needle: String) -> (Arc<Mutex<Vec<String>>>, JoinHandle<()>) {
    let mut stream = TcpStream::connect(addr_of(url)).await.unwrap();
    stream.write_all(b"MONITOR\r\n").await.unwrap();
    let mut lines = BufReader::new(stream).lines();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("+OK"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    let task = tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains(&needle) {
                keep.lock().unwrap().push(line);
            }
        }
    });
    (seen, task)
}

#[tokio::test]
async fn ttls_are_sent_rounded_up_to_the_millisecond() {
    let Some(issuer) = issuer_on(&REDIS_AOF, Durability::Required).await else {
        return;
    };
    let (seen, task) = monitor(&REDIS_AOF.endpoint(), issuer.prefix().to_owned()).await;
    for (resource, ttl) in [
        ("a", Duration::from_micros(1500)),
        ("b", Duration::from_micros(2999)),
        ("c", Duration::from_micros(10_000_500)),
    ] {
        let lease = issuer
            .try_acquire(&LeaseRequest::new(resource, ttl))
            .await
            .unwrap()
            .expect("free");
        if resource == "c" {
            issuer.renew(&lease).await.unwrap();
            issuer.release(&lease).await.unwrap();
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    task.abort();
    let seen = seen.lock().unwrap().join("\n");
    let prefix = issuer.prefix();
    for (what, expected) in [
        ("1500 µs", format!("\"SET\" \"{prefix}a:lock\"")),
        ("2999 µs", format!("\"SET\" \"{prefix}b:lock\"")),
        ("10000.5 ms", format!("\"SET\" \"{prefix}c:lock\"")),
    ] {
        assert!(seen.contains(&expected), "no {expected} in:\n{seen}");
        let _ = what;
    }
    let px = |resource: &str| {
        seen.lines()
            .find(|l| l.contains(&format!("\"SET\" \"{prefix}{resource}:lock\"")))
            .and_then(|l| l.rsplit('"').nth(1).map(str::to_owned))
            .unwrap()
    };
    assert_eq!(px("a"), "2", "1500 µs must be sent as PX 2:\n{seen}");
    assert_eq!(px("b"), "3", "2999 µs must be sent as PX 3:\n{seen}");
    assert_eq!(
        px("c"),
        "10001",
        "10000.5 ms must be sent as PX 10001:\n{seen}"
    );
    let renewal = seen
        .lines()
        .find(|l| l.contains(&format!("\"PEXPIRE\" \"{prefix}c:lock\"")))
        .unwrap_or_else(|| panic!("no PEXPIRE in:\n{seen}"));
    assert!(
        renewal.ends_with("\"10001\""),
        "a renewal of 10000.5 ms must be sent as 10001: {renewal}"
    );
}

#[tokio::test]
async fn a_floor_or_grant_at_the_top_of_the_range_is_refused() {
    let Some(issuer) = issuer_on(&REDIS_AOF, Durability::Required).await else {
        return;
    };
    let url = REDIS_AOF.endpoint();
    let fence = format!("{}top:fence", issuer.prefix());
    let lock = format!("{}top:lock", issuer.prefix());
    let max = FencingToken::MAX_I64.get();
    // No grant could follow such a floor: refused before anything is written.
    for floor in [max, max + 1, u64::MAX] {
        match issuer.raise_floor("top", floor.into()).await {
            Err(Error::TokenOutOfRange { token, .. }) => assert_eq!(token.get(), floor),
            other => panic!("floor {floor} must be TokenOutOfRange, got {other:?}"),
        }
        assert_eq!(get(&url, &fence).await, None, "floor {floor} was written");
    }
    // The last token Redis can count to is granted; the one after is refused.
    issuer.raise_floor("top", (max - 1).into()).await.unwrap();
    let last = issuer
        .try_acquire(&LeaseRequest::new("top", TTL))
        .await
        .unwrap()
        .expect("free");
    assert_eq!(last.token().get(), max);
    issuer.release(&last).await.unwrap();
    match issuer.try_acquire(&LeaseRequest::new("top", TTL)).await {
        Err(Error::TokenOutOfRange { token, max: top }) => {
            assert_eq!(token.get(), max + 1);
            assert_eq!(top, FencingToken::MAX_I64);
        }
        other => panic!("a grant above i64::MAX must be TokenOutOfRange, got {other:?}"),
    }
    assert_eq!(
        get(&url, &lock).await,
        None,
        "the refused grant took the lock"
    );
    assert_eq!(get(&url, &fence).await, Some(max.to_string()));
}

// ---------------------------------------------------------------------------
// verify

fn verdict_of(checks: &[fencing_core::safety::SafetyCheck], name: &str) -> Verdict {
    fencing_testkit::safety::check(checks, name).verdict
}

const SETTINGS: [&str; 6] = [
    "appendonly",
    "appendfsync",
    "no-appendfsync-on-rewrite",
    "maxmemory-policy",
    "role",
    "connected replicas",
];

#[tokio::test]
async fn verify_passes_on_the_append_only_redis() {
    let Some(issuer) = issuer_on(&REDIS_AOF, Durability::Required).await else {
        return;
    };
    let checks = issuer.verify().await.unwrap();
    for name in SETTINGS.iter().chain(&["tokens rise", "deleted counter"]) {
        assert_eq!(
            verdict_of(&checks, name),
            Verdict::Pass,
            "{name}: {checks:#?}"
        );
    }
}

#[tokio::test]
async fn verify_reports_what_makes_a_redis_unsafe() {
    let Some(volatile) = issuer_on(&REDIS, Durability::AcceptVolatileCounter).await else {
        return;
    };
    let checks = volatile.verify().await.unwrap();
    assert_eq!(
        verdict_of(&checks, "tokens rise"),
        Verdict::Pass,
        "{checks:#?}"
    );
    let appendonly = fencing_testkit::safety::check(&checks, "appendonly");
    assert_eq!(appendonly.verdict, Verdict::Unsafe, "{checks:#?}");
    assert!(
        appendonly.detail.contains("appendonly yes"),
        "{appendonly:?}"
    );
    assert_eq!(verdict_of(&checks, "role"), Verdict::Pass, "{checks:#?}");

    let server = private_redis(&["--no-appendfsync-on-rewrite", "yes"]).await;
    let lossy = connect_to(&url_of(&server), Durability::AcceptVolatileCounter)
        .await
        .unwrap();
    let checks = lossy.verify().await.unwrap();
    assert_eq!(
        verdict_of(&checks, "appendonly"),
        Verdict::Pass,
        "{checks:#?}"
    );
    assert_eq!(
        verdict_of(&checks, "no-appendfsync-on-rewrite"),
        Verdict::Unsafe,
        "{checks:#?}"
    );

    if REDIS_PRIMARY.skipped() {
        return;
    }
    let primary = connect_to(&REDIS_PRIMARY.endpoint(), Durability::AcceptVolatileCounter)
        .await
        .unwrap();
    let checks = primary.verify().await.unwrap();
    let replicas = fencing_testkit::safety::check(&checks, "connected replicas");
    assert_eq!(replicas.verdict, Verdict::Unsafe, "{checks:#?}");
    assert!(
        replicas.detail.contains("Durability::Replicated"),
        "{replicas:?}"
    );
}

// ---------------------------------------------------------------------------
// The replicated opt-in: WAIT before a grant is returned.

fn replicated(replicas: u32, timeout: Duration) -> Durability {
    Durability::Replicated { replicas, timeout }
}

#[tokio::test]
async fn the_replicated_opt_in_grants_once_the_replica_has_the_token() {
    let Some(issuer) = issuer_on(&REDIS_PRIMARY, replicated(1, Duration::from_secs(2))).await
    else {
        return;
    };
    let fence = format!("{}wait:fence", issuer.prefix());
    let mut last = FencingToken::ZERO;
    for _ in 0..5 {
        let lease = issuer
            .acquire(&LeaseRequest::new("wait", TTL), Duration::from_secs(5))
            .await
            .unwrap();
        assert!(lease.token() > last, "{} after {last}", lease.token());
        // WAIT returned before the grant did: the replica has the counter.
        assert_eq!(
            get(&REDIS_REPLICA.endpoint(), &fence).await,
            Some(lease.token().to_string())
        );
        issuer.release(&lease).await.unwrap();
        last = lease.token();
    }
    // A floor is acknowledged the same way.
    let floor = last.get() + 1000;
    issuer.raise_floor("wait", floor.into()).await.unwrap();
    assert_eq!(
        get(&REDIS_REPLICA.endpoint(), &fence).await,
        Some(floor.to_string())
    );

    // More replicas asked for than are connected: refused, naming the
    // setting.
    let reason = refusal(
        connect_to(
            &REDIS_PRIMARY.endpoint(),
            replicated(2, Duration::from_millis(200)),
        )
        .await,
        "Durability::Replicated with fewer connected replicas than required",
    );
    assert!(
        reason.contains("connected_slaves is 1 (1 online)"),
        "{reason}"
    );

    // Never on a replica, whatever the opt-in.
    let reason = refusal(
        connect_to(
            &REDIS_REPLICA.endpoint(),
            replicated(1, Duration::from_secs(1)),
        )
        .await,
        "a replica with Durability::Replicated",
    );
    assert!(reason.contains("role"), "{reason}");
    assert!(matches!(
        connect_to(
            &REDIS_PRIMARY.endpoint(),
            replicated(0, Duration::from_secs(1))
        )
        .await,
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(
        connect_to(&REDIS_PRIMARY.endpoint(), replicated(1, Duration::ZERO)).await,
        Err(Error::InvalidInput { .. })
    ));
}

#[tokio::test]
async fn verify_warns_that_wait_is_not_consensus() {
    let Some(issuer) = issuer_on(&REDIS_PRIMARY, replicated(1, Duration::from_secs(2))).await
    else {
        return;
    };
    let checks = issuer.verify().await.unwrap();
    let replicas = fencing_testkit::safety::check(&checks, "connected replicas");
    assert_eq!(replicas.verdict, Verdict::Warn, "{checks:#?}");
    assert!(replicas.detail.contains("WAIT"), "{replicas:?}");
    assert_eq!(verdict_of(&checks, "role"), Verdict::Pass, "{checks:#?}");
    assert_eq!(
        verdict_of(&checks, "tokens rise"),
        Verdict::Pass,
        "{checks:#?}"
    );
}

/// The whole issuer contract holds with a WAIT on every grant.
mod replicated_conformance {
    use super::*;

    async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
        Some(Arc::new(
            issuer_on(&REDIS_PRIMARY, replicated(1, Duration::from_secs(2))).await?,
        ))
    }

    fn profile() -> fencing_testkit::issuer::IssuerProfile {
        fencing_testkit::issuer::IssuerProfile::with_ttl(Duration::from_millis(300))
    }

    fencing_testkit::issuer_conformance!(issuer, profile());
}

/// The checks ride inside the grant: one round trip per grant, with or
/// without the replicated opt-in's WAIT (pipelined behind the script).
#[tokio::test]
async fn a_grant_stays_one_round_trip() {
    if REDIS_AOF.skipped() || REDIS_PRIMARY.skipped() {
        return;
    }
    for (server, durability) in [
        (&REDIS_AOF, Durability::Required),
        (&REDIS_PRIMARY, replicated(1, Duration::from_secs(2))),
    ] {
        let proxy = fencing_harness::proxy::CountingProxy::start(addr_of(&server.endpoint())).await;
        let issuer = connect_to(&format!("redis://{}", proxy.addr()), durability)
            .await
            .unwrap_or_else(|e| server.unavailable(&e));
        // The first grant loads the script into a fresh server; measure the
        // ones after it.
        grant_once(&issuer, "warm", TTL).await;
        let rounds = 20;
        let before = proxy.exchanges();
        let started = Instant::now();
        for i in 0..rounds {
            issuer
                .try_acquire(&LeaseRequest::new(format!("r{i}"), TTL))
                .await
                .unwrap()
                .expect("free");
        }
        let elapsed = started.elapsed();
        let spent = proxy.exchanges() - before;
        assert_eq!(spent.round_trips, rounds, "{durability:?}: {spent:?}");
        assert_eq!(spent.connections, 0, "{durability:?}: {spent:?}");
        eprintln!(
            "{durability:?}: {} round trip(s) per grant, {:?} per grant",
            spent.round_trips / rounds,
            elapsed / u32::try_from(rounds).unwrap()
        );
    }
}
