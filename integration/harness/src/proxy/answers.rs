//! [`AnswerDroppingProxy`]: the server applies a request and its answer
//! never reaches the client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{AbortOnDrop, LIFETIME, http_target, serve, through};

/// A loopback proxy that, when armed, lets the server answer the next
/// HTTP/1.1 request starting with a given prefix (e.g. `b"PUT "`) and never
/// delivers that answer: it records the answer's status line, holds the
/// client's connection open until [`release`](Self::release), then closes
/// it. The request was applied; the client saw only a broken connection.
/// Everything else passes through.
#[derive(Debug)]
pub struct AnswerDroppingProxy {
    addr: SocketAddr,
    state: Arc<DropState>,
    /// Stops the accept loop when the proxy is dropped.
    _task: AbortOnDrop,
}

#[derive(Debug, Default)]
struct DropState {
    prefix: std::sync::Mutex<Vec<u8>>,
    armed: AtomicUsize,
    dropped: std::sync::Mutex<Vec<String>>,
    released: tokio::sync::Notify,
    is_released: AtomicBool,
    seen: tokio::sync::Notify,
}

impl AnswerDroppingProxy {
    /// Starts a proxy to `target`, which must be a loopback address.
    ///
    /// # Panics
    /// If `target` is not on loopback or no port can be bound.
    pub async fn start(target: SocketAddr) -> Self {
        let state = Arc::new(DropState::default());
        let shared = state.clone();
        let (addr, task) = serve(target, move |client| {
            drop_pump(client, target, shared.clone())
        })
        .await;
        Self {
            addr,
            state,
            _task: task,
        }
    }

    /// Starts a proxy in front of the loopback HTTP server at `endpoint`
    /// (`http://127.0.0.1:9000`, `http://127.0.0.1:10000/devstoreaccount1`);
    /// returns it and the same endpoint through the proxy.
    ///
    /// # Panics
    /// If `endpoint` is not `http://HOST:PORT[/PATH]` on loopback.
    pub async fn in_front_of(endpoint: &str) -> (Self, String) {
        let target = http_target(endpoint);
        let proxy = Self::start(target).await;
        let proxied = through(endpoint, proxy.addr());
        (proxy, proxied)
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Loses the answers to the next `count` requests whose first bytes are
    /// `prefix`; their connections stay open until [`release`](Self::release).
    /// Starts a new record: [`dropped`](Self::dropped) and
    /// [`wait_dropped`](Self::wait_dropped) count only the answers lost
    /// since, so an earlier scenario's lost answer never stands in for this
    /// one's.
    pub fn drop_answers(&self, prefix: &[u8], count: usize) {
        self.state.dropped.lock().expect("poisoned").clear();
        *self.state.prefix.lock().expect("poisoned") = prefix.to_vec();
        self.state.is_released.store(false, Ordering::SeqCst);
        self.state.armed.store(count, Ordering::SeqCst);
    }

    /// The status lines of the answers lost since the last
    /// [`drop_answers`](Self::drop_answers) (e.g. `HTTP/1.1 200 OK`).
    pub fn dropped(&self) -> Vec<String> {
        self.state.dropped.lock().expect("poisoned").clone()
    }

    /// Waits (at most `within`) until `n` answers have been lost since the
    /// last [`drop_answers`](Self::drop_answers); returns their status lines.
    ///
    /// # Panics
    /// If fewer than `n` were lost in time.
    pub async fn wait_dropped(&self, n: usize, within: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let seen = self.state.seen.notified();
            let dropped = self.dropped();
            if dropped.len() >= n {
                return dropped;
            }
            assert!(
                tokio::time::timeout_at(deadline, seen).await.is_ok(),
                "only {} answers dropped within {within:?}, expected {n}",
                dropped.len()
            );
        }
    }

    /// Closes the connections whose answers were lost.
    pub fn release(&self) {
        self.state.is_released.store(true, Ordering::SeqCst);
        self.state.released.notify_waiters();
    }
}

#[async_trait::async_trait]
impl fencing_testkit::blob::LosesAnswers for AnswerDroppingProxy {
    fn drop_answers(&self, prefix: &[u8], count: usize) {
        Self::drop_answers(self, prefix, count);
    }
    async fn wait_dropped(&self, n: usize, within: Duration) -> Vec<String> {
        Self::wait_dropped(self, n, within).await
    }
    fn release(&self) {
        Self::release(self);
    }
}

/// One connection: requests go up as they come; an answer to an armed
/// request is read and swallowed, and the connection closed on release.
async fn drop_pump(client: TcpStream, target: SocketAddr, state: Arc<DropState>) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    // Set when a request starts with the armed prefix (and an arm was
    // taken); cleared when its answer has been swallowed.
    let doomed = Arc::new(AtomicBool::new(false));
    let up_doomed = doomed.clone();
    let up_state = state.clone();
    let up = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut at_request_start = true;
        loop {
            let n = match client_rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if at_request_start {
                let prefix = up_state.prefix.lock().expect("poisoned").clone();
                let take = !prefix.is_empty()
                    && buf[..n].starts_with(&prefix)
                    && up_state
                        .armed
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |a| a.checked_sub(1))
                        .is_ok();
                if take {
                    up_doomed.store(true, Ordering::SeqCst);
                }
                at_request_start = false;
            }
            if server_tx.write_all(&buf[..n]).await.is_err() {
                break;
            }
            // A keep-alive client sends its next request after the answer;
            // the downstream half resets this flag through `doomed` == false.
            if !up_doomed.load(Ordering::SeqCst) {
                at_request_start = true;
            }
        }
        let _ = server_tx.shutdown().await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match server_rx.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if doomed.load(Ordering::SeqCst) {
            let status = String::from_utf8_lossy(&buf[..n])
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned();
            state.dropped.lock().expect("poisoned").push(status);
            state.seen.notify_waiters();
            // Hold the client until the test has done what it needs to do
            // "while the answer is lost", then cut the connection.
            let released = state.released.notified();
            if !state.is_released.load(Ordering::SeqCst) {
                let _ = tokio::time::timeout(LIFETIME, released).await;
            }
            break;
        }
        if client_tx.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    up.abort();
    drop(client_tx);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A loopback server answering every read with an empty 200.
    async fn server() -> SocketAddr {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                        if conn.write_all(answer).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn put(proxy: &AnswerDroppingProxy) {
        let mut conn = TcpStream::connect(proxy.addr()).await.expect("connect");
        conn.write_all(b"PUT /k HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
            .await
            .expect("send");
        // Held open by the proxy until released; nothing comes back.
        let mut buf = [0u8; 64];
        let _ = conn.read(&mut buf).await;
    }

    /// Two lost-answer scenarios on one proxy: waiting for the second's
    /// lost answer must not be satisfied by the first's (it was, and a
    /// test then wrote "while the answer is lost" before its request went).
    #[tokio::test]
    async fn each_arming_waits_for_its_own_lost_answers() {
        let proxy = Arc::new(AnswerDroppingProxy::start(server().await).await);
        proxy.drop_answers(b"PUT ", 1);
        let first = tokio::spawn({
            let proxy = proxy.clone();
            async move { put(&proxy).await }
        });
        let lost = proxy.wait_dropped(1, Duration::from_secs(10)).await;
        assert_eq!(lost, ["HTTP/1.1 200 OK"]);
        proxy.release();
        first.await.expect("first put");

        proxy.drop_answers(b"PUT ", 1);
        let early = tokio::time::timeout(
            Duration::from_millis(300),
            proxy.wait_dropped(1, Duration::from_secs(10)),
        )
        .await;
        assert!(
            early.is_err(),
            "no request was sent since arming: {early:?}"
        );
        let second = tokio::spawn({
            let proxy = proxy.clone();
            async move { put(&proxy).await }
        });
        let lost = proxy.wait_dropped(1, Duration::from_secs(10)).await;
        assert_eq!(lost, ["HTTP/1.1 200 OK"]);
        proxy.release();
        second.await.expect("second put");
    }
}
