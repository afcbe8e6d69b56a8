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
    match config.connect_issuer().await {
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

/// `etcdctl lock {prefix}{resource}`, holding: the process and the key it
/// printed. etcdctl's lock NAME keeps its keys under `NAME/`: our
/// resource's prefix. Without a command it prints its key, holds the lock
/// until SIGINT, then unlocks. (Killed, as when this test fails, its key
/// goes with its lease's TTL.)
async fn etcdctl_lock(issuer: &EtcdIssuer, resource: &str) -> (tokio::process::Child, String) {
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
    // Read the rest, so that what it prints at unlock meets no closed pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
    (child, key)
}

/// Ends an `etcdctl lock` the way its user would: SIGINT, and it unlocks.
async fn interrupt(mut child: tokio::process::Child) {
    let pid = child.id().expect("etcdctl runs").to_string();
    let interrupted = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status();
    assert!(interrupted.is_ok_and(|s| s.success()), "kill -INT etcdctl");
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("etcdctl lock exits on SIGINT")
        .unwrap();
    assert!(status.success(), "etcdctl lock: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcdctl_lock_is_a_foreign_holder_until_it_unlocks() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = "etcdctl-lock";
    let (child, key) = etcdctl_lock(&issuer, resource).await;

    let foreign = assert_foreign(&issuer, resource, &key, "etcdctl lock").await;

    let waiter = issuer.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire(&LeaseRequest::new(resource, TTL), Duration::from_secs(20))
            .await
    });
    interrupt(child).await;
    let lease = waiting
        .await
        .unwrap()
        .expect("granted once etcdctl unlocked");
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

/// Names with `/` and `%` are `etcdctl lock` on the same name (Go's
/// `concurrency.Mutex`): each finds the other's lock held. And a key of
/// `jobs/a` under `{prefix}jobs/` is not in the queue of `jobs`: the two
/// are independent locks, whatever the order of their keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_a_slash_or_a_percent_are_etcdctls_and_jobs_is_not_jobs_slash_a() {
    let Some(issuer) = connect().await else {
        return;
    };
    let short = Duration::from_secs(2);
    for resource in ["jobs/a", "50%"] {
        let (child, key) = etcdctl_lock(&issuer, resource).await;
        let holding = issuer.holder(resource).await.unwrap();
        let holding =
            holding.unwrap_or_else(|| panic!("{resource}: holder says free beside {key}"));
        assert_eq!(
            holding.holder.as_str(),
            format!("foreign:{key}"),
            "{resource}"
        );
        let tried = issuer
            .try_acquire(&LeaseRequest::new(resource, short))
            .await;
        assert!(
            matches!(tried, Ok(None)),
            "{resource}: granted beside etcdctl: {tried:?}"
        );
        if resource != "jobs/a" {
            interrupt(child).await;
            continue;
        }
        // etcdctl holds `jobs/a`, whose key is the first under
        // `{prefix}jobs/`: `jobs` is free all the same.
        let first = issuer
            .try_acquire(&LeaseRequest::new("jobs", TTL))
            .await
            .unwrap();
        let first = first.expect("jobs is not jobs/a");
        let holding = issuer.holder("jobs").await.unwrap().expect("held");
        assert_eq!(holding.holder, *first.holder());
        // A waiter on `jobs` behind ours, with a key of `jobs/a` created
        // between: the key ahead of it is ours, not the other resource's.
        let (nested, nested_key) = etcdctl_lock(&issuer, "jobs/a/b").await;
        let waiter = issuer.clone();
        let waiting = tokio::spawn(async move {
            waiter
                .acquire(&LeaseRequest::new("jobs", TTL), Duration::from_secs(5))
                .await
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        issuer.release(&first).await.unwrap();
        let second = waiting.await.unwrap().expect("granted at our release");
        assert!(second.token() > first.token());
        issuer.release(&second).await.unwrap();
        // `jobs` is free while `jobs/a` and `jobs/a/b` are held: its floor
        // can be raised.
        let floor = FencingToken::new(second.token().get() + 1_000_000);
        issuer.raise_floor("jobs", floor).await.unwrap();
        let third = issuer.try_acquire(&LeaseRequest::new("jobs", short)).await;
        let third = third.unwrap().expect("free");
        assert!(third.token() > floor);
        issuer.release(&third).await.unwrap();
        // And ours on `jobs/a/b` still waits for etcdctl's.
        let tried = issuer
            .try_acquire(&LeaseRequest::new("jobs/a/b", short))
            .await;
        assert!(matches!(tried, Ok(None)), "beside {nested_key}: {tried:?}");
        interrupt(nested).await;
        interrupt(child).await;
    }
}

/// `{prefix}%floor/…` holds the floors: no resource is named there, so a
/// lock key can never be a floor key or sit in its range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_floor_keys_are_no_resources_name() {
    let Some(issuer) = connect().await else {
        return;
    };
    for resource in ["%floor", "%floor/a"] {
        let request = LeaseRequest::new(resource, TTL);
        let tried = issuer.try_acquire(&request).await;
        assert!(
            matches!(tried, Err(Error::InvalidInput { .. })),
            "{resource}: {tried:?}"
        );
        let held = issuer.holder(resource).await;
        assert!(
            matches!(held, Err(Error::InvalidInput { .. })),
            "{resource}: {held:?}"
        );
        let raised = issuer.raise_floor(resource, FencingToken::new(5)).await;
        assert!(
            matches!(raised, Err(Error::InvalidInput { .. })),
            "{resource}: {raised:?}"
        );
    }
    let written = issuer
        .client()
        .kv_client()
        .get(
            issuer.prefix(),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    assert!(written.kvs().is_empty(), "{:?}", written.kvs());
}
