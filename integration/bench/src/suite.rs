//! The cases, per kind of backend: each backend's module in
//! `fencing_integration::backends` gives its plain side, of one of the
//! kinds here.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fencing_harness::env::Server;
use fencing_harness::proxy::CountingProxy;
use fencing_integration::backends::dynamodb::{DynamoPlain, Sides as DynamoSides};
use fencing_integration::backends::plain::Plain;
use fencing_integration::backends::plain::sql::{Sides as SqlSides, SqlPlain};
use fencing_integration::backends::{ALL, Backend};
use fencing_integration::run_prefix;
use fencing_tokens::HolderId;

use crate::BoxResult;
use crate::contention::{self, Load, Outcome, Writer};
use crate::measure::{Row, compare, split_url};

mod lock_services;
mod object_stores;

pub(crate) use object_stores::bucket;

/// The kinds of plain side, each with its suite here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Sql,
    Blob,
    DynamoDb,
    Lock,
}

impl Kind {
    fn of(plain: &Plain) -> Self {
        match plain {
            Plain::Sql(_) => Self::Sql,
            Plain::Blob(_) => Self::Blob,
            Plain::DynamoDb(_) => Self::DynamoDb,
            Plain::Lock(_) => Self::Lock,
        }
    }
}

/// The order of the backends' own rows: the stores, then the lock
/// services.
pub(crate) const ROWS_ORDER: [Kind; 4] = [Kind::Sql, Kind::Blob, Kind::DynamoDb, Kind::Lock];

/// Every backend, by kind in `order`, then in the registry's order.
pub(crate) fn in_order(order: [Kind; 4]) -> impl Iterator<Item = &'static Backend> {
    order.into_iter().flat_map(|kind| {
        ALL.iter()
            .copied()
            .filter(move |b| Kind::of(&b.bench.plain) == kind)
    })
}

/// `backend`'s rows, by the suite of its kind.
pub(crate) async fn run(backend: &'static Backend, plan: &Plan, out: &mut Output) -> BoxResult<()> {
    match backend.bench.plain {
        Plain::Sql(plain) => sql(backend, plain, plan, out).await,
        Plain::Blob(plain) => object_stores::run(backend, plain, plan, out).await,
        Plain::DynamoDb(plain) => dynamodb(backend, plain, plan, out).await,
        Plain::Lock(plain) => lock_services::run(backend, plain, plan, out).await,
    }
}

/// The server of `backend`, for the kinds that need one.
fn server_of(backend: &Backend) -> BoxResult<&'static Server> {
    backend
        .server
        .ok_or_else(|| format!("{}: its kind of rows needs a server", backend.name).into())
}

/// The targets.
pub(crate) mod target {
    /// Fenced upsert ÷ plain upsert.
    pub(crate) const SQL_PUT: f64 = 1.10;
    /// Warm fenced put ÷ plain put.
    pub(crate) const BLOB_WARM: f64 = 1.15;
    /// Cold fenced put ÷ plain put.
    pub(crate) const BLOB_COLD: f64 = 2.1;
    /// Acquire + release ÷ the raw calls.
    pub(crate) const LOCK: f64 = 1.2;
}

/// How much to run.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) iterations: usize,
    /// Timed rounds of the object-store cases: fewer, to spare the
    /// emulators (Azurite's in-memory garbage collection takes time
    /// quadratic in the number of objects written, and stops answering
    /// meanwhile).
    pub(crate) object_iterations: usize,
    pub(crate) warmup: usize,
    pub(crate) payloads: Vec<usize>,
    pub(crate) count_ops: usize,
    pub(crate) load: Load,
    /// The contention of the object-store cases (lighter, as above).
    pub(crate) object_load: Load,
    /// Whether to count round trips through a proxy.
    pub(crate) count: bool,
    /// Handovers timed per issuer, each way.
    pub(crate) handovers: usize,
    /// Jobs a side in the side-by-side rows against `etcdctl lock`.
    pub(crate) tool_jobs: usize,
    /// The resources the scale rows' holders pick from (each gets its
    /// record first on the bucket and DynamoDB issuers).
    pub(crate) scale_resources: u32,
    /// Grants per level of holders in the scale rows.
    pub(crate) scale_grants: usize,
    /// The levels of concurrent holders the scale rows run (the chart
    /// draws the full run's).
    pub(crate) scale_holders: Vec<usize>,
    /// Grants and releases of one name in the soak rows.
    pub(crate) soak_cycles: usize,
    /// How many cycles at each end of the soak the rows compare.
    pub(crate) soak_window: usize,
    /// Where the scale chart goes, if anywhere.
    pub(crate) scale_svg: Option<std::path::PathBuf>,
    /// Failovers timed per issuer, TTL and signal.
    pub(crate) failovers: usize,
    /// The TTLs of the failover rows.
    pub(crate) failover_ttls: Vec<Duration>,
}

/// What one backend's run adds to the report.
#[derive(Debug, Default)]
pub(crate) struct Output {
    pub(crate) rows: Vec<Row>,
    pub(crate) versions: Vec<String>,
}

/// Bytes of a payload (not all zero, not compressible to nothing).
fn payload(len: usize) -> Bytes {
    (0..len)
        .map(|i| u8::try_from(i % 251).unwrap_or(0))
        .collect::<Vec<u8>>()
        .into()
}

/// Names everything of this run: tables, buckets, keys.
fn prefix() -> String {
    format!("{}_bench", run_prefix())
}

/// What `open` opens, again through a counting proxy in front of `url`'s
/// server, when the plan counts round trips.
async fn counting<S>(
    plan: &Plan,
    url: &str,
    open: impl AsyncFnOnce(String) -> BoxResult<S>,
) -> BoxResult<Option<(CountingProxy, S)>> {
    if !plan.count {
        return Ok(None);
    }
    let (target, via) = split_url(url)?;
    let proxy = CountingProxy::start(target).await;
    let sides = open(via(proxy.addr())).await?;
    Ok(Some((proxy, sides)))
}

/// Wraps a connection failure in the message of `server` (what is missing,
/// how to start it).
fn reach<T>(server: &Server, result: BoxResult<T>) -> BoxResult<T> {
    result.map_err(|e| {
        format!(
            "{} is not answering at {} ({}): {e}; start it with `integration/services.sh up {}`",
            server.name,
            server.endpoint(),
            server.var,
            server.service
        )
        .into()
    })
}

// --- SQL -------------------------------------------------------------------

async fn sql(
    backend: &'static Backend,
    plain: SqlPlain,
    plan: &Plan,
    out: &mut Output,
) -> BoxResult<()> {
    let (name, url, server) = (backend.name, (plain.url)(), backend.server);
    let tables = format!("{}_", prefix());
    let connect = async |url: &str, ping: bool| {
        let sides = SqlSides::connect(plain, url, &tables, ping).await;
        match server {
            Some(server) => reach(server, sides),
            None => sides,
        }
    };
    let direct = Arc::new(connect(&url, true).await?);
    let direct_unpinged = connect(&url, false).await?;
    out.versions.push(direct.version().await?);
    // The same sides through a counting proxy (not for SQLite: no network).
    let counted = match server {
        Some(_) => counting(plan, &url, async |via| {
            Ok((connect(&via, true).await?, connect(&via, false).await?))
        })
        .await?
        .map(|(proxy, (pinged, unpinged))| (proxy, pinged, unpinged)),
        None => None,
    };
    let embedded = "embedded: no network, no round trips";
    // A fenced put against a plain upsert of `len` bytes on `direct`, and
    // through the proxy on `sides`.
    let puts = async |direct: &SqlSides, counted: Option<(&CountingProxy, &SqlSides)>, len| {
        let value = payload(len);
        let (fk, pk) = (format!("fenced-{len}"), format!("plain-{len}"));
        compare(
            (plan.iterations, plan.warmup),
            plan.count_ops,
            direct,
            counted,
            async |s: &SqlSides| s.fenced_put(&fk, value.clone(), 1).await,
            async |s: &SqlSides| s.plain_put(&pk, &value, 1).await,
        )
        .await
    };

    let pinged = counted.as_ref().map(|(proxy, sides, _)| (proxy, sides));
    for &len in &plan.payloads {
        let (timed, trips) = puts(&direct, pinged, len).await?;
        let mut row = Row::latency(
            name,
            "put: fenced vs plain upsert",
            Some(len),
            timed,
            Some(target::SQL_PUT),
        )
        .with_trips(trips);
        if counted.is_some() {
            row = row
                .note("pool pings each connection it hands out (sqlx default, as `SqlConfig::connect_db`)");
        } else if server.is_none() {
            row = row.note(embedded);
        }
        out.rows.push(row);
    }

    // The same on a pool that does not ping: the write itself.
    if server.is_some() {
        let len = plan.payloads[0];
        let unpinged = counted.as_ref().map(|(proxy, _, sides)| (proxy, sides));
        let (timed, trips) = puts(&direct_unpinged, unpinged, len).await?;
        out.rows.push(
            Row::latency(
                name,
                "put, pool without ping",
                Some(len),
                timed,
                Some(target::SQL_PUT),
            )
            .with_trips(trips)
            .note("`test_before_acquire(false)`: a pool you build and pass to `Db::postgres`/`Db::mysql`"),
        );
    }

    // Acquire + release: the issuer vs its own statements, bare.
    let (fh, rh) = (HolderId::unique(), HolderId::unique());
    let (timed, trips) = compare(
        (plan.iterations, plan.warmup),
        plan.count_ops,
        direct.as_ref(),
        pinged,
        async |s: &SqlSides| s.fenced_lock("fenced", &fh).await,
        async |s: &SqlSides| s.raw_lock("raw", &rh).await,
    )
    .await?;
    let mut row = Row::latency(
        name,
        "acquire + release vs its 2 statements bare",
        None,
        timed,
        Some(target::LOCK),
    )
    .with_trips(trips)
    .note("`SqlIssuer::try_acquire` + `release` vs its two statements run through sqlx");
    if server.is_none() {
        row = row.note(embedded);
    }
    out.rows.push(row);

    // Contention on one key.
    let len = plan.payloads[0];
    let value = payload(len);
    let store = direct.store().clone();
    let fenced: Writer = {
        let value = value.clone();
        Arc::new(move |token| {
            let (store, value) = (store.clone(), value.clone());
            Box::pin(async move {
                use fencing_tokens::FencedStore;
                contention::outcome(
                    store
                        .put(
                            "contended-fenced",
                            value,
                            fencing_tokens::FencingToken::new(token),
                        )
                        .await,
                )
            })
        })
    };
    let plain: Writer = {
        let (sides, value) = (direct.clone(), value.clone());
        Arc::new(move |token| {
            let (sides, value) = (sides.clone(), value.clone());
            Box::pin(async move {
                sides.plain_put("contended-plain", &value, token).await?;
                Ok(Outcome::Written)
            })
        })
    };
    out.rows
        .push(contention::run(name, len, plan.load, &[fenced], &[plain], None).await?);

    direct.clean_up().await;
    // An embedded database's file, and its write-ahead log.
    if let Some(path) = url.strip_prefix("sqlite://") {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}"));
        }
    }
    Ok(())
}

// --- DynamoDB --------------------------------------------------------------

async fn dynamodb(
    backend: &'static Backend,
    plain: DynamoPlain,
    plan: &Plan,
    out: &mut Output,
) -> BoxResult<()> {
    let (name, server) = (backend.name, server_of(backend)?);
    let (endpoint, table) = (server.endpoint(), bucket());
    let open = async |endpoint: &str| {
        reach(
            server,
            (plain.connect)(endpoint.to_owned(), table.clone()).await,
        )
    };
    let direct = open(&endpoint).await?;
    let counted = counting(plan, &endpoint, async |via| open(&via).await).await?;
    let through_proxy = counted.as_ref().map(|(proxy, sides)| (proxy, sides));
    out.versions.push(plain.version.to_owned());
    for &len in &plan.payloads {
        let value = payload(len);
        let (fk, pk) = (format!("fenced-{len}"), format!("plain-{len}"));
        let (timed, trips) = compare(
            (plan.object_iterations, plan.warmup.max(1)),
            plan.count_ops,
            &direct,
            through_proxy,
            async |s: &DynamoSides| s.fenced_put(&fk, value.clone()).await,
            async |s: &DynamoSides| s.plain_update(&pk, value.clone()).await,
        )
        .await?;
        out.rows.push(
            Row::latency(
                name,
                "put: fenced vs the same UpdateItem unconditioned",
                Some(len),
                timed,
                Some(target::SQL_PUT),
            )
            .with_trips(trips)
            .note("what the condition alone costs: the same `SET`/`ADD`, no `ConditionExpression`"),
        );
        let (timed, trips) = compare(
            (plan.object_iterations, plan.warmup.max(1)),
            plan.count_ops,
            &direct,
            through_proxy,
            async |s: &DynamoSides| s.fenced_put(&fk, value.clone()).await,
            async |s: &DynamoSides| s.plain_put(&pk, value.clone()).await,
        )
        .await?;
        out.rows.push(
            Row::latency(name, "put: fenced vs plain PutItem", Some(len), timed, None)
                .with_trips(trips)
                .note("one conditional `UpdateItem` (`attribute_exists(pk) AND lock_token <= :t`: a key with a mark) vs an unconditional `PutItem`, same client"),
        );
    }
    let (timed, trips) = compare(
        (plan.object_iterations, plan.warmup.max(1)),
        plan.count_ops,
        &direct,
        through_proxy,
        async |s: &DynamoSides| s.lease("lease").await,
        async |s: &DynamoSides| s.raw_lease().await,
    )
    .await?;
    out.rows.push(
        Row::latency(name, "acquire + release vs 2 conditional UpdateItems", None, timed, Some(target::LOCK))
            .with_trips(trips)
            .note("a free resource is granted by one conditional `UpdateItem` (a held one answers with its old item, no read); raw: a conditional grant with `ADD counter` and a conditional release"),
    );
    Ok(())
}

// --- Handover --------------------------------------------------------------

pub(crate) async fn handover(plan: &Plan, out: &mut Output) -> BoxResult<()> {
    for name in fencing_integration::issuers() {
        if let Some(backend) = fencing_integration::backends::find(name) {
            crate::measure::fresh_emulator(backend).await?;
        }
        let Some((issuer, _)) = fencing_integration::issuer(name).await else {
            continue;
        };
        out.rows
            .push(crate::handover::row(name, issuer, plan.handovers).await?);
    }
    Ok(())
}
