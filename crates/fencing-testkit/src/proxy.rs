//! A TCP proxy on loopback that can hold a client's bytes in flight and
//! deliver them later: the "delayed packet" of a zombie's write that reaches
//! the store after its lease has passed on.
//!
//! Bounded: it listens on 127.0.0.1 only, forwards only to a loopback
//! target, accepts at most [`MAX_CONNECTIONS`], holds at most one read
//! buffer per connection, and stops by itself when dropped or after
//! [`LIFETIME`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The most connections one proxy accepts.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a proxy lives at most.
pub const LIFETIME: Duration = Duration::from_secs(300);

/// A running proxy. Dropping it stops it and closes its connections.
#[derive(Debug)]
pub struct HoldingProxy {
    addr: SocketAddr,
    hold: watch::Sender<bool>,
    held_chunks: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl HoldingProxy {
    /// Starts a proxy to `target`, which must be a loopback address.
    ///
    /// # Panics
    /// If `target` is not on loopback or no port can be bound.
    pub async fn start(target: SocketAddr) -> Self {
        assert!(
            target.ip().is_loopback(),
            "the proxy only forwards to loopback, not {target}"
        );
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let (hold, holding) = watch::channel(false);
        let held_chunks = Arc::new(AtomicUsize::new(0));
        let counter = held_chunks.clone();
        let task = tokio::spawn(async move {
            let accept = async {
                let mut pumps = Vec::new();
                while pumps.len() < MAX_CONNECTIONS {
                    let Ok((client, _)) = listener.accept().await else {
                        break;
                    };
                    pumps.push(tokio::spawn(pump(
                        client,
                        target,
                        holding.clone(),
                        counter.clone(),
                    )));
                }
                for p in pumps {
                    let _ = p.await;
                }
            };
            let _ = tokio::time::timeout(LIFETIME, accept).await;
        });
        Self {
            addr,
            hold,
            held_chunks,
            task,
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

impl Drop for HoldingProxy {
    fn drop(&mut self) {
        self.task.abort();
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
