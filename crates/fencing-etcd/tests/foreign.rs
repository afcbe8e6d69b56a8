//! A key under a resource's prefix that this issuer did not write is held
//! by a foreign holder: no grant while it is there, `holder` says so, and
//! it is never deleted. The foreign keys: `etcdctl lock` (the real client,
//! from the etcd package: `FENCING_ETCDCTL`, default `etcdctl` on the
//! `PATH`) and a key put by hand, on a real etcd (`FENCING_ETCD_ENDPOINTS`).

use std::process::Stdio;
use std::time::Duration;

use fencing_core::{Error, FencingToken, LeaseRequest, TokenIssuer};
use fencing_etcd::{EtcdConfig, EtcdIssuer};
use fencing_harness::env::ETCD;
use tokio::io::{AsyncBufReadExt, BufReader};

const TTL: Duration = Duration::from_secs(10);

async fn connect() -> Option<EtcdIssuer> {
    if ETCD.skipped() {
        return None;
    }
    let endpoints: Vec<String> = ETCD.endpoint().split(',').map(str::to_owned).collect();
    let config =
        EtcdConfig::new(endpoints).with_prefix(format!("{}/", fencing_testkit::unique_prefix()));
    match config.connect().await {
        Ok(issuer) => Some(issuer),
        Err(e) => ETCD.unavailable(&e),
    }
}

/// What a foreign holder must look like: no grant (once, and waiting), and
/// `holder` names a foreign holder, showing `key`, with the token its key's
/// place in the queue gives it (its create revision: no floor here), and
/// the key is still there. Returns that token.
async fn assert_foreign(
    issuer: &EtcdIssuer,
    resource: &str,
    key: &str,
    what: &str,
) -> FencingToken {
    let holding = issuer.holder(resource).await;
    let holding = holding
        .unwrap_or_else(|e| panic!("{what}: holder: {e:?}"))
        .unwrap_or_else(|| panic!("{what}: holder says free"));
    let id = holding.holder.as_str();
    assert!(id.starts_with("foreign:"), "{what}: {id}");
    assert!(id.contains(key), "{what}: {id} does not name {key}");
    let request = LeaseRequest::new(resource, TTL);
    let tried = issuer.try_acquire(&request).await;
    assert!(
        matches!(tried, Ok(None)),
        "{what}: try_acquire must find it held, got {tried:?}"
    );
    let waited = issuer.acquire(&request, Duration::from_secs(2)).await;
    assert!(
        matches!(waited, Err(Error::Timeout { .. })),
        "{what}: acquire must wait for it, got {waited:?}"
    );
    let left = issuer
        .client()
        .kv_client()
        .get(key, None)
        .await
        .expect("read the foreign key");
    assert_eq!(left.kvs().len(), 1, "{what}: {key} is gone");
    let created = u64::try_from(left.kvs()[0].create_revision()).unwrap();
    assert_eq!(holding.token, FencingToken::new(created), "{what}");
    holding.token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcdctl_lock_is_a_foreign_holder_until_it_unlocks() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = "etcdctl-lock";
    // etcdctl's lock NAME keeps its keys under `NAME/`: our resource's
    // prefix. Without a command it prints its key, holds the lock until
    // SIGINT, then unlocks. (Killed, as when this test fails, its key goes
    // with its lease's TTL.)
    let name = format!("{}{resource}", issuer.prefix());
    let etcdctl = std::env::var("FENCING_ETCDCTL").unwrap_or_else(|_| "etcdctl".to_owned());
    let mut child = tokio::process::Command::new(&etcdctl)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", ETCD.endpoint()))
        .args(["lock", "--ttl=10", &name])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "no {etcdctl} ({e}): install the etcd package's etcdctl (Debian: etcd-client), \
                 or point FENCING_ETCDCTL at one"
            )
        });
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let key = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
        .await
        .expect("etcdctl lock said nothing for 30 s")
        .expect("read etcdctl")
        .expect("etcdctl lock exited without taking the lock");
    assert!(key.starts_with(&format!("{name}/")), "{key}");

    let foreign = assert_foreign(&issuer, resource, &key, "etcdctl lock").await;

    let waiter = issuer.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire(&LeaseRequest::new(resource, TTL), Duration::from_secs(20))
            .await
    });
    let pid = child.id().expect("etcdctl runs").to_string();
    let interrupted = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status();
    assert!(interrupted.is_ok_and(|s| s.success()), "kill -INT etcdctl");
    let lease = waiting
        .await
        .unwrap()
        .expect("granted once etcdctl unlocked");
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("etcdctl lock exits on SIGINT")
        .unwrap();
    assert!(status.success(), "etcdctl lock: {status}");
    assert!(
        lease.token() > foreign,
        "{} after etcdctl's {foreign}",
        lease.token()
    );
    let holding = issuer.holder(resource).await.unwrap().expect("ours");
    assert_eq!(holding.holder, *lease.holder());
    assert_eq!(holding.token, lease.token());
    issuer.release(&lease).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_put_by_hand_under_the_resource_is_a_foreign_holder() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = "by-hand";
    let mut kv = issuer.client().kv_client();
    // A value that reads as a holder id, on a key without a lease: not one
    // of our lock keys all the same.
    let key = format!("{}{resource}/someone", issuer.prefix());
    kv.put(key.as_str(), "worker-3", None).await.unwrap();

    assert_foreign(&issuer, resource, &key, "a key put by hand").await;

    let waiter = issuer.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire(&LeaseRequest::new(resource, TTL), Duration::from_secs(20))
            .await
    });
    kv.delete(key.as_str(), None).await.unwrap();
    let lease = waiting
        .await
        .unwrap()
        .expect("granted once the key was deleted");
    issuer.release(&lease).await.unwrap();
}
