//! What the bench (`integration/bench`) times each backend's fenced
//! operations against: the plain side, the raw calls a caller without
//! fencing would make on the same server, through the same kind of client.
//!
//! A backend's module gives its [`Bench`]: the [`Plain`] side of its kind
//! (the bench has one suite of rows per kind), whether the scale rows
//! include it, and what its server says of its load and version. A new
//! backend of a known kind needs nothing in the bench.

use std::net::SocketAddr;
use std::pin::Pin;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub mod blob;
pub mod lock;
pub mod sql;

/// Errors of the plain sides: anything, with its message.
pub type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A future the bench awaits, maybe on another task.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A backend's part in the bench.
#[derive(Clone, Copy, Debug)]
pub struct Bench {
    /// The plain side of its rows.
    pub plain: Plain,
    /// Whether the scale rows (many holders, one issuer) include it; their
    /// raw side is its plain side's.
    pub scale: bool,
    /// What its server reports of its own load, read while a level of the
    /// scale rows runs (`None`: an emulator that reports nothing).
    pub load: Option<fn() -> BoxFuture<'static, BoxResult<String>>>,
    /// Its server is an emulator that keeps everything in memory: the
    /// scale rows start it afresh first (`FENCING_BENCH_RESTART`), so what
    /// the rows before left in it cannot stall them.
    pub in_memory: bool,
    /// A path whose HTTP `Server` header names the emulator's version, for
    /// the report when `bench.sh` did not say.
    pub server_header: Option<&'static str>,
}

/// The plain side, by kind of backend: each kind has its suite of rows in
/// the bench.
#[derive(Clone, Copy, Debug)]
pub enum Plain {
    /// A SQL database: plain upserts and the issuer's statements bare.
    Sql(sql::SqlPlain),
    /// An object store: unconditional puts and bare conditional writes.
    Blob(blob::BlobPlain),
    /// The DynamoDB API: unconditioned `UpdateItem`/`PutItem` and bare
    /// conditional updates.
    DynamoDb(super::dynamodb::DynamoPlain),
    /// A lock service: its fewest raw calls for a lock.
    Lock(lock::LockPlain),
}

/// The first endpoint of a server's comma-separated list.
pub fn first_endpoint(endpoints: &str) -> String {
    endpoints.split(',').next().unwrap_or_default().to_owned()
}

/// `host:port` as a loopback address (`localhost` as `127.0.0.1`), or why
/// not: the counting proxy and the probes only run there.
///
/// # Errors
/// If it is not an `ip:port`, or not on the loopback.
pub fn loopback(hostport: &str) -> BoxResult<SocketAddr> {
    let hostport = hostport.replace("localhost", "127.0.0.1");
    let addr: SocketAddr = hostport
        .parse()
        .map_err(|e| format!("{hostport:?} is not an ip:port: {e}"))?;
    if !addr.ip().is_loopback() {
        return Err(
            format!("{addr} is not on loopback; the counting proxy only runs there").into(),
        );
    }
    Ok(addr)
}

/// The body of an HTTP/1.0 `GET path` on `addr`.
///
/// # Errors
/// If the exchange fails.
pub async fn http_get(addr: SocketAddr, path: &str) -> BoxResult<String> {
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
pub fn metric(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once([' ', '\t'])?;
        (k == name).then(|| v.trim().to_owned())
    })
}
