//! `Layout::SingleKey`: one key per lock, as python-etcd3's `Lock` keeps
//! it (`/locks/NAME`), through the issuer suite of `fencing_testkit` and
//! beside python-etcd3 itself (PyPI `etcd3`: `FENCING_PYTHON`, default the
//! venv of `integration/services.sh`), on a real etcd
//! (`FENCING_ETCD_ENDPOINTS`).

use std::sync::Arc;
use std::time::Duration;

use fencing_core::{Error, FencingToken, LeaseRequest, TokenIssuer};
use fencing_etcd::{EtcdConfig, EtcdIssuer, Layout};
use fencing_harness::env::ETCD;
use fencing_harness::foreign;
use fencing_testkit::issuer::IssuerProfile;

const TTL: Duration = Duration::from_secs(10);

async fn connect() -> Option<EtcdIssuer> {
    if ETCD.skipped() {
        return None;
    }
    let endpoints: Vec<String> = ETCD.endpoint().split(',').map(str::to_owned).collect();
    let config = EtcdConfig::new(endpoints)
        .with_layout(Layout::SingleKey)
        .with_prefix(format!("/locks/{}/", fencing_testkit::unique_prefix()));
    match config.connect_issuer().await {
        Ok(issuer) => Some(issuer),
        Err(e) => ETCD.unavailable(&e),
    }
}

async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
    Some(Arc::new(connect().await?))
}

fn profile() -> IssuerProfile {
    // As the queue's (tests/etcd.rs): etcd's shortest lease is 2 s.
    IssuerProfile {
        expiry_slack: Duration::from_secs(3),
        ..IssuerProfile::with_ttl(Duration::from_secs(2))
    }
}

fencing_testkit::issuer_conformance!(issuer, profile());

/// python-etcd3's `Lock` on our `resource`: its lock name is the resource
/// under the issuer's prefix with python-etcd3's own `/locks/` taken off.
async fn python_etcd3(issuer: &EtcdIssuer, resource: &str, ttl_secs: u64) -> foreign::Client {
    let name = format!("{}{resource}", issuer.prefix());
    let name = name.strip_prefix("/locks/").expect("under /locks/");
    foreign::Client::python_etcd3(&ETCD.endpoint(), name, ttl_secs).await
}

/// python-etcd3 and our issuer take 20 turns on one lock: each finds the
/// other's lock held; a python-etcd3 holder is a foreign holder named by
/// its key, whose token (its key's create revision) lies between ours
/// before and after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_etcd3_and_our_issuer_take_turns_with_tokens_in_grant_order() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("turns");
    let mut python = python_etcd3(&issuer, &resource, 10).await;
    let request = LeaseRequest::new(&resource, TTL);
    let mut last = FencingToken::ZERO;
    for turn in 0..20 {
        if turn % 2 == 1 {
            let lease = issuer.try_acquire(&request).await.unwrap();
            let lease = lease.unwrap_or_else(|| panic!("turn {turn}: python-etcd3 released it"));
            assert!(
                lease.token() > last,
                "turn {turn}: {} after {last}",
                lease.token()
            );
            last = lease.token();
            let holding = issuer.holder(&resource).await.unwrap().unwrap();
            assert_eq!((&holding.holder, holding.token), (lease.holder(), last));
            python.send("try").await;
            assert_eq!(
                python.line().await,
                "busy",
                "python-etcd3 took a lock we hold"
            );
            issuer.release(&lease).await.unwrap();
            continue;
        }
        python.send("take").await;
        let key = python.line().await;
        assert_eq!(
            key.split_once('@').map(|(key, _)| key),
            Some(format!("{}{resource}", issuer.prefix()).as_str())
        );
        assert!(
            matches!(issuer.try_acquire(&request).await, Ok(None)),
            "turn {turn}"
        );
        let waited = issuer.acquire(&request, Duration::from_millis(300)).await;
        assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
        let holding = issuer.holder(&resource).await.unwrap().unwrap();
        assert_eq!(holding.holder.as_str(), format!("foreign:{key}"));
        assert!(
            holding.token > last,
            "turn {turn}: {} after {last}",
            holding.token
        );
        last = holding.token;
        python.send("release").await;
        assert_eq!(python.line().await, "released");
    }
    python.send("done").await;
}

/// Each side's waiter is granted once the other releases, well before the
/// holder's TTL: both watch the key's deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sides_waiter_is_granted_when_the_other_releases() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("wake");
    let mut python = python_etcd3(&issuer, &resource, 30).await;
    let request = LeaseRequest::new(&resource, Duration::from_secs(30));

    let lease = issuer.try_acquire(&request).await.unwrap().expect("free");
    python.send("take").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = std::time::Instant::now();
    issuer.release(&lease).await.unwrap();
    python.line().await;
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "python-etcd3 waited out our TTL"
    );

    let waiter = issuer.clone();
    let waiting = tokio::spawn(async move { waiter.acquire(&request, TTL * 2).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = std::time::Instant::now();
    python.send("release").await;
    assert_eq!(python.line().await, "released");
    let lease = waiting
        .await
        .unwrap()
        .expect("granted after python-etcd3 released");
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "we waited out its TTL"
    );
    issuer.release(&lease).await.unwrap();
    python.send("done").await;
}

/// A raised floor lifts the token of a python-etcd3 holder too (its create
/// revision plus the offset, as ours), and the floor cannot move while it
/// holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_floor_applies_to_both_and_waits_for_a_python_etcd3_holder() {
    let Some(issuer) = connect().await else {
        return;
    };
    let resource = fencing_testkit::unique_name("floor");
    let floor = FencingToken::new(1 << 40);
    issuer.raise_floor(&resource, floor).await.unwrap();
    let mut python = python_etcd3(&issuer, &resource, 10).await;
    python.send("take").await;
    python.line().await;
    let holding = issuer.holder(&resource).await.unwrap().unwrap();
    assert!(holding.token > floor, "{}", holding.token);
    let busy = issuer
        .raise_floor(&resource, FencingToken::new(1 << 41))
        .await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    python.send("release").await;
    assert_eq!(python.line().await, "released");
    let lease = issuer
        .try_acquire(&LeaseRequest::new(&resource, TTL))
        .await
        .unwrap()
        .expect("free");
    assert!(lease.token() > holding.token);
    issuer.release(&lease).await.unwrap();
    python.send("done").await;
}

/// Resource `%floor/R` would be R's floor key itself (`{prefix}%floor/R`):
/// refused by name, and R's floor is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_key_is_no_resources_lock() {
    let Some(issuer) = connect().await else {
        return;
    };
    let floor = FencingToken::new(1 << 40);
    issuer.raise_floor("r", floor).await.unwrap();
    let floor_key = format!("{}%floor/r", issuer.prefix());
    let mut kv = issuer.client().kv_client();
    let before = kv.get(floor_key.as_str(), None).await.unwrap();
    assert_eq!(before.kvs().len(), 1, "the floor of r is at {floor_key}");
    let tried = issuer
        .try_acquire(&LeaseRequest::new("%floor/r", TTL))
        .await;
    assert!(
        matches!(tried, Err(Error::InvalidInput { .. })),
        "{tried:?}"
    );
    let held = issuer.holder("%floor/r").await;
    assert!(matches!(held, Err(Error::InvalidInput { .. })), "{held:?}");
    let after = kv.get(floor_key.as_str(), None).await.unwrap();
    let value_and_version = |r: &etcd_client::GetResponse| {
        let kv = &r.kvs()[0];
        (kv.value().to_vec(), kv.mod_revision())
    };
    assert_eq!(value_and_version(&after), value_and_version(&before));
    let lease = issuer
        .try_acquire(&LeaseRequest::new("r", TTL))
        .await
        .unwrap()
        .expect("r is free");
    assert!(lease.token() > floor);
    issuer.release(&lease).await.unwrap();
}
