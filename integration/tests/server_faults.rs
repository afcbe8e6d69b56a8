//! Server faults while clients acquire and write in a loop: PostgreSQL and
//! the append-only Redis are restarted mid-run (`services restart`,
//! in-process: `fencing_harness::failover::restart_server`; never
//! services.sh, whose shim runs cargo inside cargo test). A restarted
//! server the machine ran (its PostgreSQL) is adopted, so `services down`
//! leaves it running. The history checker finds no stale accept, tokens keep rising,
//! every acknowledged write is read back, and every failure is a typed error
//! from the backend that failed.
//!
//! One test at a time (`FAULTS`): each takes a shared server down.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fencing_harness::failover::restart_server;
use fencing_integration::{issuer, store};
use fencing_testkit::history::{HistoryConfig, run_history};
use fencing_tokens::{Error, FencedStore, FencingToken, LeaseRequest, TokenIssuer};
use tokio::sync::Mutex;

static FAULTS: Mutex<()> = Mutex::const_new(());

/// Puts distinct keys in a loop until `stop`; returns the acknowledged ones
/// and every error seen.
async fn acknowledged_writes(
    store: Arc<dyn FencedStore>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> (Vec<(String, Bytes)>, Vec<Error>) {
    let prefix = fencing_testkit::unique_name("ack");
    let (mut acked, mut errors) = (Vec::new(), Vec::new());
    let mut i = 0u32;
    while !*stop.borrow() {
        let key = format!("{prefix}-{i}");
        let value = Bytes::from(format!("write {i}"));
        match store.put(&key, value.clone(), FencingToken::new(1)).await {
            Ok(()) => acked.push((key, value)),
            Err(e) => {
                errors.push(e);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        i += 1;
    }
    (acked, errors)
}

/// Runs the history checker (and a writer of distinct keys) on
/// `issuer_name` × `store_name` while `service` restarts.
async fn fault_during_history(issuer_name: &str, store_name: &str, service: &'static str) {
    let _one_at_a_time = FAULTS.lock().await;
    let (Some((issuer, ttl)), Some(store)) = (issuer(issuer_name).await, store(store_name).await)
    else {
        return;
    };
    let config = HistoryConfig {
        clients: 4,
        cycles_per_client: 30,
        ..HistoryConfig::quick(HistoryConfig::seed_from_env(), ttl)
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let writer = tokio::spawn(acknowledged_writes(store.clone(), stop_rx));
    let history = tokio::spawn({
        let (issuer, store) = (issuer.clone(), store.clone());
        async move { run_history(issuer, store, &config).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    restart_server(service).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let report = history.await.expect("history");
    stop_tx.send_replace(true);
    let (acked, write_errors) = writer.await.expect("writer");

    println!(
        "{report}; acquire errors {}; acknowledged writes {}, failed writes {}",
        report.acquire_errors.len(),
        acked.len(),
        write_errors.len()
    );
    report.assert_clean();
    // Failures are typed: a backend error or an unknown outcome, never a
    // success that was not applied (the read-back below checks that).
    for e in &write_errors {
        assert!(
            matches!(e, Error::Backend { .. } | Error::OutcomeUnknown { .. }),
            "a write failing during the {service} restart must be a backend error or an unknown outcome, got {e:?}"
        );
    }
    for e in &report.acquire_errors {
        assert!(
            e.contains(issuer.name()),
            "an acquire failing during the {service} restart named no backend: {e}"
        );
    }
    for (key, value) in &acked {
        let got = store
            .get(key)
            .await
            .expect("read back")
            .unwrap_or_else(|| panic!("acknowledged write {key} was lost"));
        assert_eq!(&got.value, value, "acknowledged write {key} changed");
    }
    // Tokens keep rising after the fault.
    let resource = fencing_testkit::unique_name("after-fault");
    let a = acquire_retrying(&*issuer, &resource, ttl).await;
    issuer.release(&a).await.unwrap();
    let b = acquire_retrying(&*issuer, &resource, ttl).await;
    assert!(b.token() > a.token());
    issuer.release(&b).await.unwrap();
}

async fn acquire_retrying(
    issuer: &dyn TokenIssuer,
    resource: &str,
    ttl: Duration,
) -> fencing_tokens::Lease {
    let request = LeaseRequest::new(resource, ttl * 10);
    for _ in 0..100 {
        match issuer.acquire(&request, Duration::from_secs(5)).await {
            Ok(lease) => return lease,
            Err(e) if e.is_retryable() || matches!(e, Error::OutcomeUnknown { .. }) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("acquire after the fault: {e:?}"),
        }
    }
    panic!("no acquire succeeded within 10 s after the fault");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restart_while_acquiring_and_writing() {
    fault_during_history("postgres", "postgres", "postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_restart_while_acquiring_and_writing() {
    fault_during_history("redis", "sqlite", "redis-aof").await;
}
