//! [`SwitchProxy`]: a target that moves, as a virtual IP or a DNS name
//! moves to another node when a failover promotes it.

use std::net::SocketAddr;

use tokio::net::TcpStream;
use tokio::sync::watch;

use super::{AbortOnDrop, serve};

/// A loopback proxy whose target can be switched: new connections go to
/// the current target, and a switch cuts the open ones, so a client
/// reconnects, unknowingly, to another server. What a client behind a
/// virtual IP sees in a failover. Dropping it stops it and closes its
/// connections.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use fencing_harness::proxy::SwitchProxy;
///
/// let a = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
/// let b = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
/// let proxy = SwitchProxy::start(a.local_addr().unwrap()).await;
/// let _first = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
/// a.accept().await.unwrap();
/// proxy.switch(b.local_addr().unwrap());
/// let _second = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
/// b.accept().await.unwrap();
/// # }
/// ```
#[derive(Debug)]
pub struct SwitchProxy {
    addr: SocketAddr,
    target: watch::Sender<SocketAddr>,
    /// Stops the accept loop when the proxy is dropped.
    _task: AbortOnDrop,
}

impl SwitchProxy {
    /// Starts a proxy to `target`, which must be a loopback address.
    ///
    /// # Panics
    /// If `target` is not on loopback or no port can be bound.
    pub async fn start(target: SocketAddr) -> Self {
        let (sender, receiver) = watch::channel(target);
        let (addr, task) = serve(target, move |client| pump(client, receiver.clone())).await;
        Self {
            addr,
            target: sender,
            _task: task,
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// New connections go to `target`; open ones are cut, so the client
    /// reconnects (to `target`).
    ///
    /// # Panics
    /// If `target` is not on loopback.
    pub fn switch(&self, target: SocketAddr) {
        assert!(
            target.ip().is_loopback(),
            "the proxy only forwards to loopback, not {target}"
        );
        self.target.send_replace(target);
    }
}

/// Forwards `client` to the current target until either side closes or
/// the target is switched.
async fn pump(mut client: TcpStream, mut target: watch::Receiver<SocketAddr>) {
    let to = *target.borrow_and_update();
    let Ok(mut server) = TcpStream::connect(to).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        // Switched (or the proxy is gone): cut, as a moved address does.
        _ = target.changed() => {}
    }
}
