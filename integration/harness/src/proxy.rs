//! TCP proxies on loopback, for tests and benchmarks.
//!
//! - [`HoldingProxy`] can hold a client's bytes in flight and deliver them
//!   later: the "delayed packet" of a zombie's write that reaches the store
//!   after its lease has passed on.
//! - [`CountingProxy`] counts request/response exchanges (round trips) and
//!   connections, so a benchmark can report round trips per operation
//!   instead of inferring them from timings.
//! - [`AnswerDroppingProxy`] forwards a request, lets the server apply it,
//!   and loses the answer: the "applied, but the response never came back"
//!   that an SDK's own retry turns into a failed precondition.
//! - [`DateShiftingProxy`] moves the `Date` of answers forward: a gateway
//!   with a fast clock, an error page a proxy stamped.
//! - [`SwitchProxy`] forwards to a target that can be switched, cutting
//!   open connections: a virtual IP that a failover moves to another node.
//!
//! Bounded: all listen on 127.0.0.1 only, forward only to a loopback
//! target, keep at most [`MAX_CONNECTIONS`] connections open, hold at most one
//! read buffer per direction of a connection, and stop by themselves when
//! dropped or after [`LIFETIME`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

mod answers;
mod counting;
mod dates;
mod switch;

pub use answers::AnswerDroppingProxy;
pub use counting::{CountingProxy, Exchanges};
pub use dates::DateShiftingProxy;
pub use switch::SwitchProxy;

/// The most connections one proxy keeps open at once (the next accept
/// waits for one to close).
pub const MAX_CONNECTIONS: usize = 64;
/// How long a proxy lives at most.
pub const LIFETIME: Duration = Duration::from_secs(300);

/// A proxy's accept loop: it stops after [`LIFETIME`] or when the proxy is
/// dropped, whichever comes first (and so closes the connections it owns:
/// dropping a set of pump tasks at the deadline aborts every pump).
#[derive(Debug)]
struct AbortOnDrop(JoinHandle<()>);

impl AbortOnDrop {
    fn within_lifetime(accept: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(tokio::spawn(async move {
            let _ = tokio::time::timeout(LIFETIME, accept).await;
        }))
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A listener on a fresh loopback port for a proxy to `target`, and its
/// address.
///
/// # Panics
/// If `target` is not on loopback or no port can be bound.
async fn listen_for(target: SocketAddr) -> (TcpListener, SocketAddr) {
    assert!(
        target.ip().is_loopback(),
        "the proxy only forwards to loopback, not {target}"
    );
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    (listener, addr)
}

/// Listens on a fresh loopback port and runs `pump` on each client
/// connection (its pump to `target`), at most [`MAX_CONNECTIONS`] at once,
/// until [`LIFETIME`] or the proxy's drop: then every pump is aborted.
///
/// # Panics
/// If `target` is not on loopback or no port can be bound.
async fn serve<F, Fut>(target: SocketAddr, pump: F) -> (SocketAddr, AbortOnDrop)
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (listener, addr) = listen_for(target).await;
    let task = AbortOnDrop::within_lifetime(async move {
        let open = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let mut pumps = tokio::task::JoinSet::new();
        loop {
            let Ok(permit) = open.clone().acquire_owned().await else {
                break;
            };
            let Ok((client, _)) = listener.accept().await else {
                break;
            };
            let pumping = pump(client);
            pumps.spawn(async move {
                pumping.await;
                drop(permit);
            });
            // Reap finished pumps so the set stays small.
            while pumps.try_join_next().is_some() {}
        }
    });
    (addr, task)
}

/// A running proxy. Dropping it stops it and closes its connections.
#[derive(Debug)]
pub struct HoldingProxy {
    addr: SocketAddr,
    hold: watch::Sender<bool>,
    held_chunks: Arc<AtomicUsize>,
    /// Stops the accept loop when the proxy is dropped.
    _task: AbortOnDrop,
}

impl HoldingProxy {
    /// Starts a proxy to `target`, which must be a loopback address.
    ///
    /// # Panics
    /// If `target` is not on loopback or no port can be bound.
    pub async fn start(target: SocketAddr) -> Self {
        let (hold, holding) = watch::channel(false);
        let held_chunks = Arc::new(AtomicUsize::new(0));
        let counter = held_chunks.clone();
        let (addr, task) = serve(target, move |client| {
            pump(client, target, holding.clone(), counter.clone())
        })
        .await;
        Self {
            addr,
            hold,
            held_chunks,
            _task: task,
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// From now on, bytes clients send are held, not delivered.
    pub fn hold(&self) {
        self.hold.send_replace(true);
    }

    /// Delivers everything held and stops holding.
    pub fn release(&self) {
        self.hold.send_replace(false);
    }

    /// How many chunks of client bytes are being held right now.
    pub fn held(&self) -> usize {
        self.held_chunks.load(Ordering::SeqCst)
    }
}

/// Connects upstream only when the client's first bytes are delivered, so
/// a held request occupies nothing on the server (a single-threaded
/// emulator would otherwise wait on it and stall everyone else).
async fn pump(
    client: TcpStream,
    target: SocketAddr,
    mut holding: watch::Receiver<bool>,
    held: Arc<AtomicUsize>,
) {
    let (mut client_rx, client_tx) = client.into_split();
    let mut client_tx = Some(client_tx);
    let mut buf = vec![0u8; 64 * 1024];
    let mut upstream_tx = None;
    let mut downstream = None;
    loop {
        let n = match client_rx.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if *holding.borrow() {
            held.fetch_add(1, Ordering::SeqCst);
            let _ = holding.wait_for(|h| !*h).await;
            held.fetch_sub(1, Ordering::SeqCst);
        }
        if let Some(mut client_tx) = client_tx.take() {
            let Ok(server) = TcpStream::connect(target).await else {
                break;
            };
            let (mut server_rx, server_tx) = server.into_split();
            upstream_tx = Some(server_tx);
            downstream = Some(tokio::spawn(async move {
                let _ = tokio::io::copy(&mut server_rx, &mut client_tx).await;
                let _ = client_tx.shutdown().await;
            }));
        }
        let Some(tx) = upstream_tx.as_mut() else {
            break;
        };
        if tx.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    if let Some(mut tx) = upstream_tx {
        let _ = tx.shutdown().await;
    }
    if let Some(d) = downstream {
        let _ = d.await;
    }
}

/// The `HOST:PORT` of an `http://HOST:PORT[/PATH]` endpoint.
fn authority(endpoint: &str) -> &str {
    endpoint
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
}

/// The address of the server at `endpoint`, for a proxy in front of it.
///
/// # Panics
/// If `endpoint` is not `http://HOST:PORT[/PATH]`.
fn http_target(endpoint: &str) -> SocketAddr {
    authority(endpoint)
        .parse()
        .unwrap_or_else(|e| panic!("{endpoint}: expected http://HOST:PORT ({e})"))
}

/// `endpoint` reached through the proxy at `proxy`.
fn through(endpoint: &str, proxy: SocketAddr) -> String {
    endpoint.replacen(authority(endpoint), &proxy.to_string(), 1)
}
