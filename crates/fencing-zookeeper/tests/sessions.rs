//! The leases of one TTL class share a ZooKeeper session: each lives and
//! ends on its own (renew, release, a lapsed deadline), a paused process
//! loses all of them, and no lock node outlives its lease in a session
//! that lives on, not even one whose create's answer was lost. On a real
//! ZooKeeper (`integration/services.sh up zookeeper`).

use std::time::{Duration, Instant};

use fencing_core::{Error, LeaseRequest, TokenIssuer};
use fencing_harness::env::ZOOKEEPER;
use fencing_harness::error_chain;
use fencing_testkit::issuer::grant_now;
use fencing_testkit::lock_service::{freeze_on, frozen_client};
use fencing_zookeeper::zookeeper_client as zk;
use fencing_zookeeper::{ZkConfig, ZkIssuer};

mod common;

async fn connect(connect_string: &str, prefix: &str) -> ZkIssuer {
    ZkConfig::new(connect_string)
        .with_prefix(prefix)
        .connect_issuer()
        .await
        .unwrap_or_else(|e| ZOOKEEPER.unavailable(&error_chain(&e)))
}

fn fresh_prefix() -> String {
    format!("/fencing-test/{}", fencing_testkit::unique_prefix())
}

/// The session that owns each lock node of `resource`.
async fn owners(issuer: &ZkIssuer, resource: &str) -> Vec<i64> {
    let dir = issuer.resource_path(resource);
    let client = issuer.client();
    let mut owners = Vec::new();
    let children = match client.list_children(&dir).await {
        Err(zk::Error::NoNode) => Vec::new(),
        children => children.expect("children"),
    };
    for child in children.iter().filter(|c| *c != fencing_zookeeper::KEEPER) {
        if let Some(stat) = client
            .check_stat(&format!("{dir}/{child}"))
            .await
            .expect("stat")
        {
            owners.push(stat.ephemeral_owner);
        }
    }
    owners
}

async fn eventually_free(issuer: &ZkIssuer, resource: &str, within: Duration, what: &str) {
    let give_up = Instant::now() + within;
    loop {
        if owners(issuer, resource).await.is_empty() {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "{what}: a lock node is still there"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_of_one_ttl_share_a_session_and_end_on_their_own() {
    if ZOOKEEPER.skipped() {
        return;
    }
    let prefix = fresh_prefix();
    let issuer = connect(&ZOOKEEPER.endpoint(), &prefix).await;
    let other = connect(&ZOOKEEPER.endpoint(), &prefix).await;
    let ttl = Duration::from_secs(3);
    let [kept, released, lapsed] = ["kept", "released", "lapsed"].map(fencing_testkit::unique_name);
    let kept_lease = grant_now(&issuer, &kept, ttl).await;
    let released_lease = grant_now(&issuer, &released, ttl).await;
    let lapsed_lease = grant_now(&issuer, &lapsed, ttl).await;
    let session = owners(&issuer, &kept).await;
    assert_eq!(session.len(), 1);
    assert_eq!(owners(&issuer, &released).await, session, "one session");
    assert_eq!(owners(&issuer, &lapsed).await, session, "one session");
    let longer = grant_now(&issuer, &fencing_testkit::unique_name("longer"), ttl * 2).await;
    assert_ne!(
        owners(&issuer, longer.resource()).await,
        session,
        "another TTL class, another session"
    );

    issuer.release(&released_lease).await.expect("release one");
    assert!(owners(&issuer, &released).await.is_empty());
    // `lapsed` is never renewed: its node goes at its deadline, the
    // session and `kept`, renewed meanwhile, stay.
    let mut kept_lease = kept_lease;
    let until = Instant::now() + ttl + Duration::from_secs(1);
    while Instant::now() < until {
        tokio::time::sleep(ttl / 4).await;
        kept_lease = issuer
            .renew(&kept_lease)
            .await
            .expect("renew the kept lease");
    }
    eventually_free(&issuer, &lapsed, Duration::from_secs(2), "the lapsed lease").await;
    assert!(matches!(
        issuer.renew(&lapsed_lease).await,
        Err(Error::LeaseLost { .. })
    ));
    assert_eq!(
        owners(&issuer, &kept).await,
        session,
        "the kept lease holds on"
    );
    let next = grant_now(&other, &lapsed, ttl).await;
    assert!(next.token() > lapsed_lease.token());
    assert!(
        other
            .try_acquire(&LeaseRequest::new(&kept, ttl))
            .await
            .unwrap()
            .is_none()
    );
    issuer
        .release(&kept_lease)
        .await
        .expect("release the kept lease");
    other.release(&next).await.expect("release");
}

/// A process stopped for longer than its TTL stops its shared session's
/// heartbeats: ZooKeeper expires the session, and every lease in it goes
/// while the process is still stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_process_loses_every_lease_in_its_session() {
    if ZOOKEEPER.skipped() {
        return;
    }
    let prefix = fresh_prefix();
    let issuer = connect(&ZOOKEEPER.endpoint(), &prefix).await;
    let resources: Vec<String> = (0..3)
        .map(|i| fencing_testkit::unique_name(&format!("paused-{i}")))
        .collect();
    let ttl = Duration::from_secs(4);
    let freeze = Duration::from_secs(14);
    let (granted_tx, granted_rx) = tokio::sync::oneshot::channel();
    let (their_prefix, their_resources) = (prefix.clone(), resources.clone());
    let (pause, holder) = frozen_client(move |pause_rx| {
        Box::pin(async move {
            let own = connect(&ZOOKEEPER.endpoint(), &their_prefix).await;
            let mut leases = Vec::new();
            for resource in &their_resources {
                leases.push(grant_now(&own, resource, ttl).await);
            }
            granted_tx.send(()).expect("report the grants");
            freeze_on(pause_rx).await;
            let mut renewed = Vec::new();
            for lease in &leases {
                renewed.push(own.renew(lease).await.map(|_| ()));
            }
            renewed
        })
    });
    granted_rx.await.expect("the holder was granted");
    pause.send(freeze).expect("freeze the holder");
    let frozen_at = Instant::now();
    for resource in &resources {
        let lease = issuer
            .acquire(
                &LeaseRequest::new(resource, ttl),
                freeze - Duration::from_secs(4),
            )
            .await
            .expect("granted while the holder is still stopped");
        issuer.release(&lease).await.expect("release");
    }
    assert!(
        frozen_at.elapsed() < freeze,
        "granted only after the holder woke"
    );
    for renewed in holder.join().expect("holder thread") {
        assert!(
            matches!(renewed, Err(Error::LeaseLost { .. })),
            "every woken lease is lost: {renewed:?}"
        );
    }
}

/// A create whose answer never comes may still be applied: in a session
/// that lives on, its node would hold the resource for as long as the
/// process runs. The nonce in its name finds it, and it is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_answer_was_lost_leaves_no_node_behind() {
    if ZOOKEEPER.skipped() {
        return;
    }
    let proxy = common::holding_proxy().await;
    let prefix = fresh_prefix();
    let issuer = connect(&proxy.addr().to_string(), &prefix).await;
    let direct = connect(&ZOOKEEPER.endpoint(), &prefix).await;
    // The longest session the server grants: it outlives the held bytes.
    let ttl = Duration::from_secs(20);
    // Opens the shared session through the proxy, and leaves the issuer
    // knowing the resource znode's version: the next acquire sends its
    // create first.
    let resource = fencing_testkit::unique_name("lost-create");
    let warm = grant_now(&issuer, &resource, ttl).await;
    issuer.release(&warm).await.expect("release");

    proxy.hold();
    let sent = Instant::now();
    let acquired = issuer.try_acquire(&LeaseRequest::new(&resource, ttl)).await;
    println!("the create failed after {:?}: {acquired:?}", sent.elapsed());
    assert!(
        matches!(acquired, Err(Error::OutcomeUnknown { .. })),
        "{acquired:?}"
    );
    proxy.release(); // the held create reaches the server now, if at all
    eventually_free(
        &direct,
        &resource,
        Duration::from_secs(8),
        "the unanswered create",
    )
    .await;
    let next = grant_now(&direct, &resource, ttl).await;
    direct.release(&next).await.expect("release");
    let again = grant_now(&issuer, &resource, ttl).await;
    issuer.release(&again).await.expect("release");
}
