//! The lock-service cases: etcd, ZooKeeper and Redis, fenced acquire and
//! release against the raw calls.

use fencing_harness::env::{self, Server};
use fencing_harness::proxy::CountingProxy;

use super::{Output, Plan, counting, prefix, reach, target};
use crate::BoxResult;
use crate::locks;
use crate::measure::{Row, compare, loopback};

/// One lock service's sides (direct, and through the counting proxy when
/// the plan counts round trips) and its fenced acquire + release, for rows
/// that time it against raw calls.
struct LockBench<'a, S, F> {
    name: &'static str,
    plan: &'a Plan,
    direct: S,
    counted: Option<(CountingProxy, S)>,
    fenced: F,
}

impl<'a, S, F: AsyncFn(&S) -> BoxResult<()>> LockBench<'a, S, F> {
    /// The sides `connect` opens at `url` (failing with how to start
    /// `server`), the second through a counting proxy.
    async fn open(
        name: &'static str,
        plan: &'a Plan,
        (server, url): (&Server, &str),
        connect: impl AsyncFn(&str) -> BoxResult<S>,
        fenced: F,
    ) -> BoxResult<Self> {
        let direct = reach(server, connect(url).await)?;
        let counted = counting(plan, url, async |via| connect(&via).await).await?;
        Ok(Self {
            name,
            plan,
            direct,
            counted,
            fenced,
        })
    }

    /// Times and counts the fenced side against `raw`.
    async fn row(&self, operation: &str, raw: impl AsyncFn(&S) -> BoxResult<()>) -> BoxResult<Row> {
        let through_proxy = self.counted.as_ref().map(|(proxy, sides)| (proxy, sides));
        let rounds = (self.plan.iterations, self.plan.warmup);
        let (timed, trips) = compare(
            rounds,
            self.plan.count_ops,
            &self.direct,
            through_proxy,
            &self.fenced,
            raw,
        )
        .await?;
        Ok(Row::latency(self.name, operation, None, timed, Some(target::LOCK)).with_trips(trips))
    }
}

pub(crate) async fn etcd(plan: &Plan, out: &mut Output) -> BoxResult<()> {
    let endpoints = env::ETCD.endpoint();
    let endpoint = endpoints.split(',').next().unwrap_or_default().to_owned();
    let p = prefix();
    let connect = async |url: &str| locks::Etcd::connect(url, &p).await;
    let fenced = async |s: &locks::Etcd| s.fenced().await;
    let bench = LockBench::open("etcd", plan, (&env::ETCD, &endpoint), connect, fenced).await?;
    out.versions.push(bench.direct.version().await?);
    out.rows.push(
        bench
            .row("acquire + release vs grant + txn + revoke", async |s| s.raw().await)
            .await?
            .note("raw: lease grant, a txn creating the key with the lease if absent, lease revoke; same client"),
    );
    let mut row = bench
        .row("… vs grant + txn + read + revoke", async |s| s.raw_with_lookup().await)
        .await?
        .note("what a lease rebuilt from its token alone pays: release finds its lock key by the token first");
    row.target = None;
    out.rows.push(row);
    let mut row = bench
        .row("… vs etcd's own lock service (v3lock)", async |s| s.v3lock().await)
        .await?
        .note("raw: lease grant, `Lock` on the lease, `Unlock`, lease revoke: what `etcdctl lock` and Go's `concurrency.Mutex` do");
    row.target = None;
    out.rows.push(row);
    Ok(())
}

pub(crate) async fn zookeeper(plan: &Plan, out: &mut Output) -> BoxResult<()> {
    let addr = env::ZOOKEEPER.endpoint();
    let addr = addr.split(',').next().unwrap_or_default().to_owned();
    let p = prefix();
    let direct = reach(&env::ZOOKEEPER, locks::ZooKeeper::connect(&addr, &p).await)?;
    if let Some(v) = crate::versions::zookeeper_version(loopback(&addr)?).await {
        out.versions.push(v);
    }
    let counted = if plan.count {
        let proxy = CountingProxy::start(loopback(&addr)?).await;
        let sides = locks::ZooKeeper::connect(&proxy.addr().to_string(), &p).await?;
        Some((proxy, sides))
    } else {
        None
    };
    let bench = LockBench {
        name: "zookeeper",
        plan,
        direct,
        counted,
        fenced: async |s: &locks::ZooKeeper| s.fenced().await,
    };

    out.rows.push(
        bench
            .row("acquire + release vs create + delete", async |s| s.raw().await)
            .await?
            .note("raw: create an ephemeral sequential znode and delete it, on a session opened beforehand"),
    );
    let in_turn = LockBench {
        name: "zookeeper",
        plan,
        direct: bench.direct,
        counted: bench.counted,
        fenced: async |s: &locks::ZooKeeper| s.fenced_in_turn().await,
    };
    out.rows.push(
        in_turn
            .row(
                "… two issuers in turn on one resource",
                async |s: &locks::ZooKeeper| s.raw().await,
            )
            .await?
            .note("neither issuer knows the resource znode's version the other left: it reads it first (get + create + delete); raw as above"),
    );
    if let Some(row) = out.rows.last_mut() {
        row.target = None;
    }
    in_turn.direct.clean_up().await;
    Ok(())
}

pub(crate) async fn redis(plan: &Plan, out: &mut Output) -> BoxResult<()> {
    let url = env::REDIS_AOF.endpoint();
    let p = prefix();
    let connect = async |url: &str| locks::Redis::connect(url, &p).await;
    let fenced = async |s: &locks::Redis| s.fenced().await;
    let bench = LockBench::open("redis", plan, (&env::REDIS_AOF, &url), connect, fenced).await?;
    out.versions.push(bench.direct.version().await?);
    out.rows.push(
        bench
            .row("acquire + release vs SET NX PX + INCR + DEL", async |s| s.raw().await)
            .await?
            .note("the issuer's acquire and release scripts; both on the append-only server (`appendfsync always`)"),
    );
    bench.direct.clean_up().await;
    Ok(())
}
