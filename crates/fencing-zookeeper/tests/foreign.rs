//! A child of a resource znode that this issuer did not create is another
//! client's lock node: it takes its place in the queue by creation order,
//! ahead of ours if it came first, so nothing is granted while it is there;
//! `holder` says so, and it is never deleted. The foreign clients are real:
//! kazoo's `Lock` (PyPI: `FENCING_PYTHON`, default the venv of
//! `integration/services.sh`) and Curator's `InterProcessMutex` (Debian's
//! libcurator-recipes-java, run by the JDK); and nodes named as Curator
//! names them, one readable by its creator only, on a real ZooKeeper
//! (`FENCING_ZK_ADDR`).

use std::time::Duration;

use fencing_core::{Error, FencingToken, LeaseRequest, TokenIssuer};
use fencing_harness::env::ZOOKEEPER;
use fencing_harness::error_chain;
use fencing_harness::foreign;
use fencing_testkit::issuer::grant;
use fencing_zookeeper::{TokenSource, ZkConfig, ZkIssuer};
use zookeeper_client as zk;

const TTL: Duration = Duration::from_secs(10);

/// The kazoo release this test was written against.
const KAZOO: &str = "kazoo==2.11.0";

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

/// What a foreign holder must look like: no grant (once, and waiting),
/// `holder` names the foreign node `name` with its token (its czxid, as
/// ours; none with `ParentCversion`, which cannot be read back), and the
/// node is still there. Returns that token.
async fn assert_foreign(issuer: &ZkIssuer, resource: &str, name: &str, what: &str) -> FencingToken {
    let request = LeaseRequest::new(resource, TTL);
    let tried = issuer.try_acquire(&request).await;
    assert!(
        matches!(tried, Ok(None)),
        "{what}: try_acquire must find it held, got {tried:?}"
    );
    let waited = issuer.acquire(&request, Duration::from_millis(500)).await;
    assert!(
        matches!(waited, Err(Error::Timeout { .. })),
        "{what}: acquire must wait for it, got {waited:?}"
    );
    let holding = issuer.holder(resource).await;
    let holding = holding
        .unwrap_or_else(|e| panic!("{what}: holder: {e:?}"))
        .unwrap_or_else(|| panic!("{what}: holder says free"));
    assert_eq!(holding.holder.as_str(), format!("foreign:{name}"), "{what}");
    let path = format!("{}/{name}", issuer.resource_path(resource));
    let left = issuer.client().check_stat(&path).await.expect("stat");
    let left = left.unwrap_or_else(|| panic!("{what}: {path} is gone"));
    let expected = match issuer.token_source() {
        TokenSource::Czxid => FencingToken::new(u64::try_from(left.czxid).unwrap()),
        TokenSource::ParentCversion => FencingToken::ZERO,
    };
    assert_eq!(holding.token, expected, "{what}");
    holding.token
}

/// A session of another client, which creates a lock node named as
/// Curator's `InterProcessMutex` does, readable by its creator only.
async fn curator_like(issuer: &ZkIssuer, resource: &str) -> (zk::Client, String) {
    let client = zk::Client::connector()
        .with_session_timeout(TTL)
        .connect(&ZOOKEEPER.endpoint())
        .await
        .expect("another client's session");
    client
        .auth("digest", b"curator:its-own-secret")
        .await
        .expect("digest login");
    let dir = issuer.resource_path(resource);
    if let Err(e) = client
        .create(
            &dir,
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
    {
        assert_eq!(e, zk::Error::NodeExists, "create {dir}");
    }
    let mode = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::creator_all());
    let (_, sequence) = client
        .create(
            &format!("{dir}/_c_8743c9c0-0795-4907-87fd-6c719a6b4586-lock-"),
            b"10.0.0.7",
            &mode,
        )
        .await
        .expect("create the foreign lock node");
    let name = format!("_c_8743c9c0-0795-4907-87fd-6c719a6b4586-lock-{sequence}");
    (client, name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kazoo_lock_is_a_foreign_holder_until_kazoo_releases_it() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let resource = "kazoo-lock";
    let script = r#"
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1])
zk.start(timeout=15)
lock = zk.Lock(sys.argv[2], "kazoo-holder")
assert lock.acquire(blocking=False), "kazoo could not take the lock"
print(lock.node, flush=True)
sys.stdin.readline()
lock.release()
print("released", flush=True)
zk.stop()
"#;
    let mut kazoo = foreign::Client::python(
        "kazoo",
        KAZOO,
        script,
        &[&ZOOKEEPER.endpoint(), &issuer.resource_path(resource)],
    );
    let node = kazoo.line().await;
    assert!(node.contains("__lock__"), "{node}");

    let foreign = assert_foreign(&issuer, resource, &node, "kazoo's Lock").await;

    let waiter = issuer.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire(&LeaseRequest::new(resource, TTL), Duration::from_secs(20))
            .await
    });
    kazoo.send("release").await;
    assert_eq!(kazoo.line().await, "released");
    let lease = waiting.await.unwrap().expect("granted once kazoo released");
    assert!(
        lease.token() > foreign,
        "{} after kazoo's {foreign}",
        lease.token()
    );
    assert_eq!(
        issuer.holder(resource).await.unwrap().unwrap().holder,
        *lease.holder()
    );
    issuer.release(&lease).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_lock_node_is_a_foreign_holder_until_its_session_ends() {
    for source in [TokenSource::Czxid, TokenSource::ParentCversion] {
        let Some(issuer) = connect(source).await else {
            return;
        };
        let resource = "curator-lock";
        let (curator, name) = curator_like(&issuer, resource).await;
        let what = format!("a Curator lock node ({source:?})");
        let path = format!("{}/{name}", issuer.resource_path(resource));
        let read = issuer.client().get_data(&path).await;
        assert_eq!(
            read.err(),
            Some(zk::Error::NoAuth),
            "{what}: readable by us"
        );
        assert_foreign(&issuer, resource, &name, &what).await;
        // A floor waits for a free resource, as while one of ours holds.
        let floor = issuer
            .raise_floor(resource, FencingToken::new(1 << 40))
            .await;
        assert!(
            matches!(floor, Err(Error::Busy { .. })),
            "{what}: raise_floor while it holds: {floor:?}"
        );

        let waiter = issuer.clone();
        let waiting = tokio::spawn(async move {
            waiter
                .acquire(&LeaseRequest::new(resource, TTL), Duration::from_secs(20))
                .await
        });
        drop(curator); // closes its session: ZooKeeper deletes its node
        let lease = waiting
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{what}: granted once it went: {e}"));
        issuer.release(&lease).await.unwrap();
    }
}

/// Creation order decides: a foreign node created after ours waits behind
/// us (we are the holder), and holds once we release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_node_behind_ours_holds_once_we_release() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let resource = "behind";
    let lease = grant(&issuer, resource, TTL).await;
    let (_curator, name) = curator_like(&issuer, resource).await;
    let holding = issuer.holder(resource).await.unwrap().expect("held");
    assert_eq!(holding.holder, *lease.holder());
    assert_eq!(holding.token, lease.token());
    assert_eq!(issuer.renew(&lease).await.unwrap().token(), lease.token());
    issuer.release(&lease).await.unwrap();

    assert_foreign(&issuer, resource, &name, "a foreign node behind ours").await;
}

/// Curator's own `InterProcessMutex` (Debian's libcurator-recipes-java, run
/// by the JDK) on our resource znode: it finds the lock busy while ours
/// holds; its node is a foreign holder with its czxid as token; and once
/// its process is paused (SIGSTOP) past its session, ours is granted a
/// higher token, and the Curator holder, woken and still sure it holds the
/// lock, is refused at the store with that token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_and_our_issuer_exclude_each_other_and_a_paused_curator_is_refused() {
    use bytes::Bytes;
    use fencing_core::FencedStore;
    use fencing_core::memory::MemoryStore;
    use fencing_harness::process::{Signal, signal};

    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let resource = "curator-mutex";
    // Ours holds first: Curator must find the lock busy.
    let ours = grant(&issuer, resource, TTL).await;
    let session = Duration::from_secs(3);
    let mut curator = foreign::Client::curator(
        &ZOOKEEPER.endpoint(),
        &issuer.resource_path(resource),
        session,
    )
    .await;
    curator.send("try").await;
    assert_eq!(curator.line().await, "busy", "Curator took a lock we hold");
    issuer.release(&ours).await.unwrap();

    curator.send("take").await;
    let path = curator.line().await;
    let name = path.rsplit('/').next().unwrap().to_owned();
    assert!(name.starts_with("_c_") && name.contains("-lock-"), "{path}");
    let foreign = assert_foreign(&issuer, resource, &name, "Curator's mutex").await;
    assert!(
        foreign > ours.token(),
        "{foreign} after our {}",
        ours.token()
    );
    let store = MemoryStore::new();
    let write = |token| store.put("report", Bytes::from_static(b"x"), token);
    write(foreign).await.expect("Curator's token is accepted");

    let pid = curator.id().expect("Curator runs");
    signal(pid, Signal::SIGSTOP);
    let next = issuer
        .acquire(&LeaseRequest::new(resource, TTL), session * 5)
        .await
        .expect("granted once the paused Curator's session expired");
    assert!(next.token() > foreign, "{} after {foreign}", next.token());
    write(next.token()).await.expect("our token is accepted");
    signal(pid, Signal::SIGCONT);
    curator.send("held").await;
    assert_eq!(
        curator.line().await,
        "true",
        "Curator knows it lost the lock"
    );
    match write(foreign).await {
        Err(Error::StaleToken {
            presented, current, ..
        }) => assert_eq!((presented, current), (foreign, next.token())),
        other => panic!("the woken Curator holder's write: {other:?}"),
    }
    issuer.release(&next).await.unwrap();
    curator.send("quit").await;
}

/// Whether `path` still exists `after` it was left with no lock node
/// (longer than `integration/services.sh`'s ZooKeeper takes to delete an
/// empty container: `-Dznode.container.checkIntervalMs=1000`).
async fn still_there(issuer: &ZkIssuer, path: &str, after: Duration) -> bool {
    tokio::time::sleep(after).await;
    let stat = issuer.client().check_stat(path).await;
    stat.expect("stat").is_some()
}

/// A lock path Curator made first is a container, which ZooKeeper deletes
/// once it has no children, and with it the floor kept in its data (and
/// its cversion). Our issuer keeps a child in every resource znode, so
/// one it uses is never deleted and a raised floor stays. A sibling
/// container Curator made and left, which our issuer never used, is the
/// control: the server deletes it in the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_curator_made_keeps_our_floor_once_our_issuer_used_it() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let session = Duration::from_secs(15);
    let curator_takes = async |resource: &str| {
        let path = issuer.resource_path(resource);
        let mut curator = foreign::Client::curator(&ZOOKEEPER.endpoint(), &path, session).await;
        curator.send("take").await;
        curator.line().await;
        curator
    };
    let release = async |curator: &mut foreign::Client| {
        curator.send("release").await;
        assert_eq!(curator.line().await, "released");
    };

    let (resource, control) = ("curator-made", "curator-made-control");
    let mut curator = curator_takes(resource).await;
    let mut other = curator_takes(control).await;
    release(&mut other).await;
    let waiter = issuer.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire(&LeaseRequest::new(resource, TTL), Duration::from_secs(20))
            .await
    });
    // Ours queues behind Curator, making the keeper first: Curator
    // releasing then leaves the container with a child.
    let keeper = format!(
        "{}/{}",
        issuer.resource_path(resource),
        fencing_zookeeper::KEEPER
    );
    for _ in 0..100 {
        if issuer
            .client()
            .check_stat(&keeper)
            .await
            .expect("stat")
            .is_some()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    release(&mut curator).await;
    let lease = waiting
        .await
        .unwrap()
        .expect("granted once Curator released");
    issuer.release(&lease).await.unwrap();
    let floor = FencingToken::new(1 << 40);
    issuer.raise_floor(resource, floor).await.expect("floor");

    let wait = Duration::from_secs(4);
    assert!(
        !still_there(&issuer, &issuer.resource_path(control), wait).await,
        "ZooKeeper kept an empty container for {wait:?}: start it with \
         -Dznode.container.checkIntervalMs=1000 (integration/services.sh does)"
    );
    assert!(
        still_there(&issuer, &issuer.resource_path(resource), Duration::ZERO).await,
        "the container we used was deleted, and our floor with it"
    );
    let next = grant(&issuer, resource, TTL).await;
    assert!(
        next.token() > floor,
        "{} after the floor {floor}",
        next.token()
    );
    issuer.release(&next).await.unwrap();
    curator.send("quit").await;
    other.send("quit").await;
}

/// Curator's `InterProcessMutex` on the lock path `{prefix}/jobs/a` (its
/// parents made as it makes them) and our issuer on resource `jobs/a` are
/// one lock; `jobs`, whose znode is the parent of that lock path, is
/// another, granted while Curator holds `jobs/a`, its floor raised then
/// too. A name with `%` is its path as well (a node named as Curator's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_a_slash_or_a_percent_are_curators_lock_path() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let path = format!("{}/jobs/a", issuer.prefix());
    let mut curator =
        foreign::Client::curator(&ZOOKEEPER.endpoint(), &path, Duration::from_secs(10)).await;
    curator.send("take").await;
    let node = curator.line().await;
    let name = node
        .strip_prefix(&format!("{path}/"))
        .unwrap_or_else(|| panic!("{node}"));
    assert_foreign(&issuer, "jobs/a", name, "Curator on jobs/a").await;

    let jobs = grant(&issuer, "jobs", TTL).await;
    let holding = issuer.holder("jobs").await.unwrap().expect("held");
    assert_eq!(
        holding.holder,
        *jobs.holder(),
        "jobs/a's znode is no holder of jobs"
    );
    issuer.release(&jobs).await.unwrap();
    let floor = FencingToken::new(jobs.token().get() + (1 << 40));
    issuer
        .raise_floor("jobs", floor)
        .await
        .expect("jobs is free");
    let jobs = grant(&issuer, "jobs", TTL).await;
    assert!(jobs.token() > floor);
    issuer.release(&jobs).await.unwrap();

    curator.send("release").await;
    assert_eq!(curator.line().await, "released");
    let ours = grant(&issuer, "jobs/a", TTL).await;
    curator.send("try").await;
    assert_eq!(
        curator.line().await,
        "busy",
        "Curator took jobs/a while we hold it"
    );
    issuer.release(&ours).await.unwrap();
    curator.send("quit").await;

    let (_other, name) = curator_like(&issuer, "50%").await;
    assert_eq!(
        issuer.resource_path("50%"),
        format!("{}/50%", issuer.prefix())
    );
    assert_foreign(&issuer, "50%", &name, "a node under {prefix}/50%").await;
}

/// A name that is no ZooKeeper path under the prefix (an empty segment, a
/// `/` at either end, `.` or `..`, a character ZooKeeper refuses) or whose
/// znode would be a resource's keeper is refused by name, and nothing is
/// created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_zookeeper_cannot_hold_as_a_path_are_refused() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let keeper = format!("jobs/{}", fencing_zookeeper::KEEPER);
    for resource in [
        "a//b",
        "a/",
        "/a",
        "a/./b",
        "a/..",
        ".",
        "..",
        "tab\there",
        &keeper,
    ] {
        let tried = issuer.try_acquire(&LeaseRequest::new(resource, TTL)).await;
        assert!(
            matches!(tried, Err(Error::InvalidInput { .. })),
            "{resource:?}: {tried:?}"
        );
        let held = issuer.holder(resource).await;
        assert!(
            matches!(held, Err(Error::InvalidInput { .. })),
            "{resource:?}: {held:?}"
        );
        let raised = issuer.raise_floor(resource, FencingToken::new(5)).await;
        assert!(
            matches!(raised, Err(Error::InvalidInput { .. })),
            "{resource:?}: {raised:?}"
        );
    }
    let made = issuer
        .client()
        .list_children(issuer.prefix())
        .await
        .unwrap();
    // The prefix's own keeper, and nothing for the names refused.
    assert_eq!(made, [fencing_zookeeper::KEEPER], "{made:?}");
}

/// An earlier release kept `jobs/b` at `{prefix}/jobs%2Fb`, with its floor
/// in that znode's data: the first use of `{prefix}/jobs/b` starts above
/// every token the old znode gave (its floor, and with `token=cversion`
/// its cversion).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_an_earlier_release_escaped_keeps_its_floor() {
    let Some(issuer) = connect(TokenSource::Czxid).await else {
        return;
    };
    let floor: u64 = 1 << 42;
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    for resource in ["jobs/b", "60%"] {
        let old = format!(
            "{}/{}",
            issuer.prefix(),
            resource.replace('%', "%25").replace('/', "%2F")
        );
        let client = issuer.client();
        client
            .create(&old, floor.to_string().as_bytes(), &options)
            .await
            .unwrap();
        client
            .create(
                &format!("{old}/{}", fencing_zookeeper::KEEPER),
                b"",
                &options,
            )
            .await
            .unwrap();
        let lease = grant(&issuer, resource, TTL).await;
        assert!(
            lease.token().get() > floor,
            "{resource}: {} below the old floor",
            lease.token()
        );
        issuer.release(&lease).await.unwrap();
    }
}
