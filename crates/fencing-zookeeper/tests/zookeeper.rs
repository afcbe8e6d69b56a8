//! The issuer suite of `fencing_testkit` with both token sources (the zombie
//! scenario, the history checker and nested names included), and real
//! pauses, on a real ZooKeeper (`FENCING_ZK_ADDR`, default `127.0.0.1:2181`;
//! start it with `integration/services.sh up zookeeper`).
//!
//! The short TTL is 2 s: the smallest session `integration/services.sh`'s
//! ZooKeeper grants (2 × tickTime, tickTime = 1000 ms).

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing_core::{Error, LeaseRequest, TokenIssuer};
use fencing_harness::env::ZOOKEEPER;
use fencing_harness::error_chain;
use fencing_testkit::issuer::{IssuerProfile, assert_lease_lost, grant};
use fencing_testkit::lock_service::{self, freeze_on, frozen_client};
use fencing_zookeeper::{TokenSource, ZkConfig, ZkIssuer};

mod common;

/// An issuer under a fresh prefix znode, or `None` if this run skips ZooKeeper.
async fn connect(source: TokenSource) -> Option<ZkIssuer> {
    if ZOOKEEPER.skipped() {
        return None;
    }
    let prefix = format!("/fencing-test/{}", fencing_testkit::unique_prefix());
    match ZkConfig::new(ZOOKEEPER.endpoint())
        .with_prefix(&prefix)
        .with_token_source(source)
        .connect_issuer()
        .await
    {
        Ok(issuer) => Some(issuer),
        Err(e) => ZOOKEEPER.unavailable(&error_chain(&e)),
    }
}

/// Another issuer under `prefix`, with `source`.
async fn under(prefix: &str, source: TokenSource) -> fencing_core::Result<ZkIssuer> {
    ZkConfig::new(ZOOKEEPER.endpoint())
        .with_prefix(prefix)
        .with_token_source(source)
        .connect_issuer()
        .await
}

fn profile() -> IssuerProfile {
    IssuerProfile {
        // A session closed at the deadline goes at once; allow for a slow machine.
        expiry_slack: Duration::from_secs(2),
        // Longer than the server's maxSessionTimeout (20 s) would be shortened.
        long_ttl: Duration::from_secs(20),
        ..IssuerProfile::with_ttl(Duration::from_secs(2))
    }
}

mod czxid {
    use super::*;

    async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
        Some(Arc::new(connect(TokenSource::Czxid).await?))
    }

    fencing_testkit::issuer_conformance!(issuer, profile());
}

mod parent_cversion {
    use super::*;

    async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
        Some(Arc::new(connect(TokenSource::ParentCversion).await?))
    }

    fencing_testkit::issuer_conformance!(issuer, profile());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_the_czxid_or_the_parent_cversion() {
    let Some(by_czxid) = connect(TokenSource::Czxid).await else {
        return;
    };
    let resource = fencing_testkit::unique_name("czxid");
    let long = Duration::from_secs(10);
    let lease = grant(&by_czxid, &resource, long).await;
    let dir = by_czxid.resource_path(&resource);
    let mut children = by_czxid
        .client()
        .list_children(&dir)
        .await
        .expect("children");
    children.retain(|c| c != fencing_zookeeper::KEEPER);
    assert_eq!(children.len(), 1, "{children:?}");
    let stat = by_czxid
        .client()
        .check_stat(&format!("{dir}/{}", children[0]))
        .await
        .unwrap()
        .expect("the lock node");
    assert_eq!(u64::try_from(stat.czxid).unwrap(), lease.token().get());
    by_czxid.release(&lease).await.expect("release");

    // A prefix of its own: a token=czxid issuer's may have names removed.
    let by_cversion = connect(TokenSource::ParentCversion)
        .await
        .expect("ZooKeeper answered a moment ago");
    let resource = fencing_testkit::unique_name("cversion");
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let lease = grant(&by_cversion, &resource, long).await;
        tokens.push(lease.token().get());
        by_cversion.release(&lease).await.expect("release");
    }
    let (_, stat) = by_cversion
        .client()
        .get_data(&by_cversion.resource_path(&resource))
        .await
        .expect("parent");
    println!(
        "cversion tokens {tokens:?}; the resource znode's cversion is now {}",
        stat.cversion
    );
    // On a fresh resource znode, its keeper's create (in the same
    // transaction as the znode's), then one create and one delete per
    // grant.
    assert_eq!(tokens, [2, 4, 6]);
    assert_eq!(stat.cversion, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_bounds_come_from_the_server() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let (min, max) = issuer.session_timeouts();
    assert_eq!(issuer.min_ttl(), min);
    assert!(
        min >= Duration::from_millis(200) && min < max,
        "{min:?}..{max:?}"
    );
    println!("ZooKeeper negotiates sessions within {min:?}..={max:?}");
    // A TTL the server cannot keep through a pause is shortened, so the
    // local deadline stays conservative.
    let resource = fencing_testkit::unique_name("long");
    let lease = grant(&issuer, &resource, max * 3).await;
    assert_eq!(lease.ttl(), max);
    issuer.release(&lease).await.expect("release");
    let short = LeaseRequest::new(&resource, min / 2);
    assert!(matches!(
        issuer.try_acquire(&short).await,
        Err(Error::InvalidInput { .. })
    ));
}

/// A holder whose process stops for longer than its session timeout loses
/// the lease *while stopped* (ZooKeeper expires the session: the issuer's
/// own deadline watchdog is stopped too); another client gets it, and the
/// woken holder's renew fails with `LeaseLost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_loses_its_session() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let resource = fencing_testkit::unique_name("paused-holder");
    let ttl = Duration::from_secs(4);
    let freeze = Duration::from_secs(12);
    let (granted_tx, granted_rx) = tokio::sync::oneshot::channel();
    let (prefix, holder_resource) = (issuer.prefix().to_owned(), resource.clone());
    let (pause, holder) = frozen_client(move |pause_rx| {
        Box::pin(async move {
            let own = ZkConfig::new(ZOOKEEPER.endpoint())
                .with_prefix(&prefix)
                .with_token_source(TokenSource::Czxid)
                .connect_issuer()
                .await
                .expect("connect");
            let lease = grant(&own, &holder_resource, ttl).await;
            let renewed = own.renew(&lease).await.expect("renew before the pause");
            granted_tx.send(renewed.token()).expect("report the grant");
            freeze_on(pause_rx).await;
            own.renew(&renewed).await.map(|l| l.token())
        })
    });
    let zombie_token = granted_rx.await.expect("the holder was granted");
    pause.send(freeze).expect("freeze the holder");
    let frozen_at = Instant::now();

    let next = issuer
        .acquire(
            &LeaseRequest::new(&resource, Duration::from_secs(20)),
            freeze - Duration::from_secs(2),
        )
        .await
        .expect("granted while the holder is still stopped");
    let took = frozen_at.elapsed();
    assert!(
        took < freeze,
        "granted only after the holder woke ({took:?})"
    );
    assert!(next.token() > zombie_token);
    println!("granted {took:?} into a {freeze:?} pause of a holder with a {ttl:?} session");

    match holder.join().expect("holder thread") {
        Err(Error::LeaseLost { token, .. }) => assert_eq!(token, zombie_token),
        other => panic!("the woken holder's renew must fail with LeaseLost, got {other:?}"),
    }
    assert_eq!(
        issuer.holder(&resource).await.unwrap().unwrap().token,
        next.token()
    );
    issuer.release(&next).await.expect("release");
}

/// The ZooKeeper side of etcd#11456: a waiter whose session expires while
/// it is queued (its process stopped) is never granted when it wakes, even
/// though the holder released meanwhile. See the testkit's check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_session_expired_while_queued_is_never_granted() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let prefix = issuer.prefix().to_owned();
    lock_service::a_waiter_whose_lease_expired_while_queued_is_never_granted(
        &issuer,
        &profile(),
        async |resource| {
            let dir = issuer.resource_path(resource);
            let children = issuer.client().list_children(&dir).await;
            let children = children.expect("children");
            children
                .iter()
                .filter(|c| *c != fencing_zookeeper::KEEPER)
                .count()
        },
        move || {
            Box::pin(async move {
                let endpoint = ZOOKEEPER.endpoint();
                let own = ZkConfig::new(&endpoint)
                    .with_prefix(&prefix)
                    .with_token_source(TokenSource::Czxid)
                    .connect_issuer()
                    .await;
                Arc::new(own.expect("connect")) as Arc<dyn TokenIssuer>
            })
        },
    )
    .await;
}

#[tokio::test]
async fn an_unreachable_server_is_a_retryable_backend_error() {
    let nothing_listening = ZkConfig::new("127.0.0.1:1");
    let unreachable = nothing_listening.connect_issuer();
    lock_service::an_unreachable_server_is_a_retryable_backend_error("zookeeper", unreachable)
        .await;
    assert!(matches!(
        ZkConfig::new(ZOOKEEPER.endpoint())
            .with_prefix("/zookeeper")
            .with_token_source(TokenSource::Czxid)
            .connect_issuer()
            .await,
        Err(Error::InvalidInput { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_is_refused_while_held_and_keeps_other_resources_alone() {
    for source in [TokenSource::Czxid, TokenSource::ParentCversion] {
        let Some(issuer) = connect(source).await else {
            return;
        };
        let label = format!("{source:?}");
        lock_service::a_floor_is_refused_while_held(&issuer, &profile(), &label).await;
    }
}

/// A session timeout is an `i32` of milliseconds: a TTL beyond it cannot
/// be asked for, and is refused before any session is opened.
#[tokio::test]
async fn a_ttl_beyond_an_i32_of_milliseconds_is_invalid_input() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let resource = fencing_testkit::unique_name("ttl-i32");
    let ttl = Duration::from_millis(u64::try_from(i32::MAX).unwrap() + 1);
    let acquired = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), Duration::from_secs(5))
        .await;
    assert!(
        matches!(acquired, Err(Error::InvalidInput { .. })),
        "ttl {ttl:?}: {acquired:?}"
    );
    assert!(issuer.holder(&resource).await.expect("holder").is_none());
}

/// A TTL with a fraction of a millisecond asks for the next whole
/// millisecond, so the session is never shorter than the lease.
#[tokio::test]
async fn a_fractional_millisecond_ttl_is_asked_for_rounded_up() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let (min, max) = issuer.session_timeouts();
    let ttl = Duration::from_micros(4_000_500);
    assert!(
        min <= ttl && ttl < max,
        "the server grants {min:?}..={max:?}"
    );
    let resource = fencing_testkit::unique_name("ttl-ceil");
    let lease = grant(&issuer, &resource, ttl).await;
    assert_eq!(
        lease.ttl(),
        ttl,
        "the session was granted shorter than the TTL"
    );
    issuer.release(&lease).await.expect("release");
}

/// A floor with no room above it is refused at once with both token
/// sources, and the resource keeps granting.
#[tokio::test]
async fn a_floor_without_room_above_it_is_refused() {
    for source in [TokenSource::Czxid, TokenSource::ParentCversion] {
        let Some(issuer) = connect(source).await else {
            return;
        };
        let label = format!("{source:?}");
        lock_service::a_floor_without_room_above_it_is_refused(&issuer, &profile(), &label).await;
    }
}

/// A lease rebuilt from resource, holder and token alone (no backend
/// handle) still renews and releases through the issuer that granted it,
/// which finds its session by token and holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_rebuilt_from_its_token_renews_and_releases() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    lock_service::a_lease_rebuilt_from_its_token_renews_and_releases(&issuer).await;
}

/// A granted lease carries its session: another issuer on the same
/// ensemble renews and releases it with no lookup, while a rebuilt lease
/// (no handle) is unknown there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_lease_carries_its_session() {
    let (Some(issuer), Some(other)) = (
        connect(TokenSource::Czxid).await,
        connect(TokenSource::Czxid).await,
    ) else {
        return;
    };
    let resource = fencing_testkit::unique_name("handle");
    let request = LeaseRequest::new(&resource, Duration::from_secs(5));
    let (lease, rebuilt) = lock_service::grant_and_rebuild(&issuer, &request).await;
    assert_lease_lost(other.renew(&rebuilt).await, "renewing rebuilt");
    let renewed = other.renew(&lease).await.expect("renew through the handle");
    assert!(renewed.has_handle());
    other
        .release(&renewed)
        .await
        .expect("release through the handle");
    assert!(issuer.holder(&resource).await.expect("holder").is_none());
    assert_lease_lost(issuer.renew(&rebuilt).await, "renewing rebuilt");
}

/// An operator clearing a "stuck" lock with `deleteall` of its resource
/// znode would reset the znode's cversion (with
/// `TokenSource::ParentCversion` the tokens start again at 1, below marks
/// the stores hold) and drop its floor. The prefix znode lets nobody delete
/// a resource znode (ZooKeeper checks a delete against the parent's ACL),
/// nor do the znodes made between it and a nested name's; lock nodes stay
/// deletable, and tokens go on rising.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_can_delete_a_resource_znode() {
    use fencing_zookeeper::zookeeper_client as zk;
    let Some(issuer) = connect(TokenSource::ParentCversion).await else {
        return;
    };
    let resource = fencing_testkit::unique_name("undeletable");
    let ttl = Duration::from_secs(10);
    let first = grant(&issuer, &resource, ttl).await;
    issuer.release(&first).await.expect("release");
    let path = issuer.resource_path(&resource);
    let deleted = issuer.client().delete(&path, None).await;
    assert_eq!(deleted, Err(zk::Error::NoAuth), "deleting {path}");
    let next = grant(&issuer, &resource, ttl).await;
    assert!(
        next.token() > first.token(),
        "{} after {}",
        next.token(),
        first.token()
    );
    issuer.release(&next).await.expect("release");
    // The name is nested: the znode between the prefix and it refused the
    // delete. Made a lock itself, its lock nodes can be deleted.
    let (parent, _) = resource.rsplit_once('/').expect("a nested name");
    let above = grant(&issuer, parent, ttl).await;
    issuer
        .release(&above)
        .await
        .expect("release the parent's lock");
    assert!(issuer.holder(parent).await.expect("holder").is_none());
    let checks = issuer.verify().await.expect("verify");
    let check = fencing_testkit::safety::check(&checks, "resource znodes");
    assert_eq!(
        check.verdict,
        fencing_core::safety::Verdict::Pass,
        "{check:?}"
    );
}

/// A prefix znode an earlier release created (everyone may delete its
/// children) loses DELETE when an issuer connects to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_prefix_loses_delete_at_connect() {
    use fencing_zookeeper::zookeeper_client as zk;
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let old = format!("{}-old", issuer.prefix());
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    issuer
        .client()
        .create(&old, b"", &options)
        .await
        .expect("an old-style prefix");
    ZkConfig::new(ZOOKEEPER.endpoint())
        .with_prefix(&old)
        .with_token_source(TokenSource::Czxid)
        .connect_issuer()
        .await
        .expect("connect");
    let (acls, _) = issuer.client().get_acl(&old).await.expect("get_acl");
    assert!(
        acls.iter()
            .all(|a| !a.permission().has(zk::Permission::DELETE)),
        "{acls:?}"
    );
}

/// A release whose delete is held on the way (it may still reach the server
/// and be applied) is an unknown outcome, not "nothing was deleted, try
/// again"; the lease stays the issuer's, whose watchdog deletes its node at
/// the deadline, so the resource is free again either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_answer_never_comes_is_an_unknown_outcome() {
    if ZOOKEEPER.skipped() {
        return;
    }
    let proxy = common::holding_proxy().await;
    let prefix = format!("/fencing-test/{}", fencing_testkit::unique_prefix());
    let issuer = ZkConfig::new(proxy.addr().to_string())
        .with_prefix(&prefix)
        .with_token_source(TokenSource::Czxid)
        .connect_issuer()
        .await
        .unwrap_or_else(|e| ZOOKEEPER.unavailable(&error_chain(&e)));
    let resource = fencing_testkit::unique_name("unanswered-release");
    let ttl = Duration::from_secs(4);
    let lease = grant(&issuer, &resource, ttl).await;
    proxy.hold();
    let released = issuer.release(&lease).await;
    assert!(
        matches!(released, Err(Error::OutcomeUnknown { .. })),
        "{released:?}"
    );
    proxy.release();
    let direct = ZkConfig::new(ZOOKEEPER.endpoint())
        .with_prefix(issuer.prefix())
        .with_token_source(TokenSource::Czxid)
        .connect_issuer()
        .await
        .expect("connect past the proxy");
    let next = direct
        .acquire(&LeaseRequest::new(&resource, ttl), ttl * 3)
        .await
        .expect("free once the session is gone");
    assert!(next.token() > lease.token());
    direct.release(&next).await.expect("release");
}

/// `remove_idle` with `token=czxid`: a nested name is refused (its parent
/// may be another lock's znode); a held resource, or one with another
/// client's lock node, is kept; an idle one's znode and keeper go, the
/// prefix's ACL lets nobody delete again afterwards (the removal adds
/// DELETE only around its transaction), and the next grant is above every
/// token before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_resource_znode_is_removed_and_later_tokens_are_higher() {
    use fencing_core::Removal;
    use fencing_zookeeper::zookeeper_client as zk;
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let client = issuer.client();
    let (idle, ttl) = (Duration::from_secs(1), Duration::from_secs(10));
    let nested = fencing_testkit::unique_name("idle");
    // A nested name's parent may be another lock's znode: refused.
    let lease = grant(&issuer, &nested, ttl).await;
    issuer.release(&lease).await.expect("release");
    tokio::time::sleep(idle + Duration::from_millis(200)).await;
    match issuer.remove_idle(&nested, idle).await {
        Err(Error::UnsafeConfiguration { reason, .. }) => {
            assert!(
                reason.contains(&nested) && reason.contains("directly under"),
                "{reason}"
            );
        }
        other => panic!("a nested name: {other:?}"),
    }
    assert!(
        client
            .check_stat(&issuer.resource_path(&nested))
            .await
            .expect("stat")
            .is_some()
    );
    let resource = nested.replace('/', "-");
    let path = issuer.resource_path(&resource);
    let first = grant(&issuer, &resource, ttl).await;
    tokio::time::sleep(idle + Duration::from_millis(200)).await;
    let removal = issuer.remove_idle(&resource, idle).await.expect("remove");
    assert_eq!(removal, Removal::InUse, "{resource}: removed while held");
    issuer.release(&first).await.expect("release");
    // Another client's lock node (kazoo's) keeps it as well.
    let foreign = format!("{path}/0123abcd__lock__0000000001");
    let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    client
        .create(&foreign, b"", &options)
        .await
        .expect("foreign");
    let removal = issuer.remove_idle(&resource, idle).await.expect("remove");
    assert_eq!(removal, Removal::InUse, "{resource}: removed under kazoo");
    client.delete(&foreign, None).await.expect("delete foreign");
    let removal = issuer.remove_idle(&resource, idle).await.expect("remove");
    assert_eq!(removal, Removal::Removed, "{resource}");
    assert!(
        client.check_stat(&path).await.expect("stat").is_none(),
        "{path} is still there"
    );
    let (parent, _) = path.rsplit_once('/').expect("a parent");
    let (acls, _) = client.get_acl(parent).await.expect("get_acl");
    assert!(
        acls.iter()
            .all(|a| !a.permission().has(zk::Permission::DELETE)),
        "{parent} kept DELETE after the removal: {acls:?}"
    );
    let removal = issuer.remove_idle(&resource, idle).await.expect("remove");
    assert_eq!(removal, Removal::Absent, "{resource}");
    let next = grant(&issuer, &resource, ttl).await;
    assert!(
        next.token() > first.token(),
        "{resource}: {} after the removal, {} before",
        next.token(),
        first.token()
    );
    issuer.release(&next).await.expect("release");
}

/// A process that remembers a resource znode's version from its last
/// create (or read it just before a pause) must not take a znode removed
/// and made again, at that same version, for the one it knew: it would
/// write the old floor (none) over the new one, and be granted below it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_znode_removed_and_made_again_is_never_taken_for_the_old_one() {
    use fencing_core::{FencingToken, Removal};
    let Some(remembers) = connect(TokenSource::Czxid).await else {
        return;
    };
    let other = under(remembers.prefix(), TokenSource::Czxid)
        .await
        .expect("connect");
    let resource = fencing_testkit::unique_name("remade").replace('/', "-");
    let path = remembers.resource_path(&resource);
    let ttl = Duration::from_secs(10);
    // Two grants: the second trusts the version the first left, and the
    // next create would write at the version the second left (2) unread.
    for _ in 0..2 {
        let lease = grant(&remembers, &resource, ttl).await;
        remembers.release(&lease).await.expect("release");
    }
    let (_, stat) = remembers.client().get_data(&path).await.expect("read");
    assert_eq!(stat.version, 2);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let removal = other
        .remove_idle(&resource, Duration::from_secs(1))
        .await
        .expect("remove");
    assert_eq!(removal, Removal::Removed);
    // Made again, granted once and floored: back at version 2.
    let lease = grant(&other, &resource, ttl).await;
    other.release(&lease).await.expect("release");
    let floor = FencingToken::new(1 << 62);
    other.raise_floor(&resource, floor).await.expect("floor");
    let (_, stat) = remembers.client().get_data(&path).await.expect("read");
    assert_eq!(stat.version, 2, "the test needs the version it remembers");
    let next = grant(&remembers, &resource, ttl).await;
    assert!(
        next.token() > floor,
        "token {} granted below the floor {floor} of the znode made again",
        next.token()
    );
    remembers.release(&next).await.expect("release");
    let after = grant(&other, &resource, ttl).await;
    assert!(after.token() > next.token(), "the floor was written over");
    other.release(&after).await.expect("release");
}

/// Removals at once over the same idle names, as `fence remove-idle`
/// sends them (every name at once through one issuer) and from a second
/// issuer (another process, one name after another): each name is
/// removed once, the others find it absent, none fails (each opens the
/// prefix's ACL for its own transaction and closes it again), and the
/// prefix lets nobody delete afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removals_at_once_remove_each_name_once_and_close_the_prefix_again() {
    use fencing_core::Removal;
    use fencing_zookeeper::zookeeper_client as zk;
    let Some(first) = connect(TokenSource::Czxid).await else {
        return;
    };
    let second = under(first.prefix(), TokenSource::Czxid)
        .await
        .expect("connect");
    let names: Vec<String> = (0..12).map(|i| format!("sweep-{i}")).collect();
    for name in &names {
        let lease = grant(&first, name, Duration::from_secs(10)).await;
        first.release(&lease).await.expect("release");
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let removal = |issuer: ZkIssuer, name: String| async move {
        let removal = issuer
            .remove_idle(&name, Duration::from_secs(1))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            matches!(removal, Removal::Removed | Removal::Absent),
            "{name}: {removal:?}"
        );
        (removal == Removal::Removed).then_some(name)
    };
    let all_at_once = {
        let (issuer, names) = (first.clone(), names.clone());
        async move {
            let mut each = tokio::task::JoinSet::new();
            for name in names {
                each.spawn(removal(issuer.clone(), name));
            }
            let mut removed = Vec::new();
            while let Some(done) = each.join_next().await {
                removed.extend(done.expect("a removal"));
            }
            removed
        }
    };
    let one_by_one = {
        let names: Vec<String> = names.iter().rev().cloned().collect();
        async move {
            let mut removed = Vec::new();
            for name in names {
                removed.extend(removal(second.clone(), name).await);
            }
            removed
        }
    };
    let (a, b) = tokio::join!(tokio::spawn(all_at_once), tokio::spawn(one_by_one));
    let mut removed: Vec<String> = a
        .expect("sweep")
        .into_iter()
        .chain(b.expect("sweep"))
        .collect();
    removed.sort();
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(removed, expected, "each name removed exactly once");
    let (acls, _) = first.client().get_acl(first.prefix()).await.expect("acl");
    assert!(
        acls.iter()
            .all(|a| !a.permission().has(zk::Permission::DELETE)),
        "{acls:?}"
    );
    let children = first
        .client()
        .list_children(first.prefix())
        .await
        .expect("list");
    assert_eq!(
        children,
        [fencing_zookeeper::KEEPER],
        "left behind (the prefix keeps its keeper)"
    );
}

/// Removal needs a prefix that only `token=czxid` issuers use: one made
/// by an earlier release (no mark) is refused by name, and a
/// `token=cversion` issuer refuses a marked prefix at connect (a removed
/// name's cversion, and its tokens, would start again at 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removal_and_cversion_tokens_never_share_a_prefix() {
    use fencing_zookeeper::zookeeper_client as zk;
    let Some(marked) = connect(TokenSource::Czxid).await else {
        return;
    };
    let cversion = under(marked.prefix(), TokenSource::ParentCversion).await;
    match cversion {
        Err(Error::UnsafeConfiguration { reason, .. }) => {
            assert!(reason.contains(marked.prefix()), "{reason}");
        }
        other => panic!("token=cversion on a czxid prefix: {other:?}"),
    }
    // An earlier release's prefix: no mark.
    let old = format!("{}-unmarked", marked.prefix());
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    marked
        .client()
        .create(&old, b"", &options)
        .await
        .expect("an old prefix");
    let unmarked = under(&old, TokenSource::Czxid).await.expect("connect");
    let resource = fencing_testkit::unique_name("unmarked").replace('/', "-");
    let lease = grant(&unmarked, &resource, Duration::from_secs(10)).await;
    unmarked.release(&lease).await.expect("release");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    match unmarked
        .remove_idle(&resource, Duration::from_secs(1))
        .await
    {
        Err(Error::UnsafeConfiguration { reason, .. }) => {
            assert!(
                reason.contains(&resource) && reason.contains("czxid issuer"),
                "{reason}"
            );
        }
        other => panic!("removal under an unmarked prefix: {other:?}"),
    }
    assert!(
        unmarked
            .client()
            .check_stat(&unmarked.resource_path(&resource))
            .await
            .expect("stat")
            .is_some()
    );
}

/// A DELETE that a crash left on the prefix, or on a znode between it and
/// a nested name's (a removal stopped between opening its parent's ACL
/// and closing it), goes with the next removal under that parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_left_on_a_parent_goes_with_the_next_removal() {
    use fencing_core::Removal;
    use fencing_zookeeper::zookeeper_client as zk;
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let client = issuer.client();
    let resource = fencing_testkit::unique_name("left-open").replace('/', "-");
    let lease = grant(&issuer, &resource, Duration::from_secs(10)).await;
    issuer.release(&lease).await.expect("release");
    let path = issuer.resource_path(&resource);
    let (parent, _) = path.rsplit_once('/').expect("a parent");
    let (acls, stat) = client.get_acl(parent).await.expect("acl");
    let open: Vec<zk::Acl> = acls
        .iter()
        .map(|a| zk::Acl::new(a.permission() | zk::Permission::DELETE, a.auth_id().clone()))
        .collect();
    client
        .set_acl(parent, &open, Some(stat.aversion))
        .await
        .expect("a DELETE left behind");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let removal = issuer
        .remove_idle(&resource, Duration::from_secs(1))
        .await
        .expect("remove");
    assert_eq!(removal, Removal::Removed, "{resource}");
    let (acls, _) = client.get_acl(parent).await.expect("acl");
    assert!(
        acls.iter()
            .all(|a| !a.permission().has(zk::Permission::DELETE)),
        "{parent} still lets anyone delete: {acls:?}"
    );
}
