//! What a server reports of its own load, for the scale rows: read once
//! while a level of holders runs.

use std::time::Duration;

use fencing_harness::env;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::BoxResult;
use crate::measure::loopback;

/// The body of an HTTP/1.0 `GET path` on `addr`.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> BoxResult<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut out = String::new();
    stream.read_to_string(&mut out).await?;
    Ok(out
        .split_once("\r\n\r\n")
        .map_or(out.as_str(), |(_, body)| body)
        .to_owned())
}

/// The value of a `name value` line (Prometheus text, ZooKeeper's `mntr`).
fn metric(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once([' ', '\t'])?;
        (k == name).then(|| v.trim().to_owned())
    })
}

/// ZooKeeper (`mntr`): connections, ephemeral nodes and watches.
async fn zookeeper() -> BoxResult<String> {
    let addr = env::ZOOKEEPER.endpoint();
    let addr = loopback(addr.split(',').next().unwrap_or_default())?;
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(b"mntr").await?;
    let mut out = String::new();
    stream.read_to_string(&mut out).await?;
    let get = |name| metric(&out, name).unwrap_or_else(|| "?".to_owned());
    Ok(format!(
        "ZooKeeper: {} connections, {} ephemeral nodes, {} watches",
        get("zk_num_alive_connections"),
        get("zk_ephemerals_count"),
        get("zk_watch_count")
    ))
}

/// etcd (`/metrics`): keys and watchers. (Its lease counters are totals
/// since the server started, from which no live count can be told.)
async fn etcd() -> BoxResult<String> {
    let endpoint = env::ETCD.endpoint();
    let host = endpoint
        .split(',')
        .next()
        .unwrap_or_default()
        .trim_start_matches("http://");
    let body = http_get(loopback(host)?, "/metrics").await?;
    let get = |name| metric(&body, name).unwrap_or_else(|| "?".to_owned());
    Ok(format!(
        "etcd: {} keys, {} watchers",
        get("etcd_debugging_mvcc_keys_total"),
        get("etcd_debugging_mvcc_watcher_total"),
    ))
}

/// Redis (`INFO`): clients and keys.
async fn redis() -> BoxResult<String> {
    let client = redis::Client::open(env::REDIS_AOF.endpoint())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO").query_async(&mut conn).await?;
    let keys = info
        .lines()
        .find_map(|l| l.strip_prefix("db0:keys="))
        .and_then(|rest| rest.split(',').next())
        .unwrap_or("0")
        .to_owned();
    let clients = info
        .lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    Ok(format!("Redis: {clients} clients, {keys} keys"))
}

/// PostgreSQL (`pg_stat_activity`): connections to the database.
async fn postgres() -> BoxResult<String> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&env::POSTGRES.endpoint())
        .await?;
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()",
    )
    .fetch_one(&pool)
    .await?;
    pool.close().await;
    Ok(format!(
        "PostgreSQL: {n} connections (1 of them this reading's)"
    ))
}

/// What `name`'s server reports, or why it could not be read.
pub(crate) async fn reading(name: &str) -> String {
    let read = async {
        match name {
            "zookeeper" => zookeeper().await,
            "etcd" => etcd().await,
            "redis" => redis().await,
            "postgres" => postgres().await,
            _ => Err("its emulator reports no figures of its load".into()),
        }
    };
    match tokio::time::timeout(Duration::from_secs(5), read).await {
        Ok(Ok(reading)) => reading,
        Ok(Err(e)) => format!("{name}: no reading ({e})"),
        Err(_) => format!("{name}: no reading (timed out)"),
    }
}
