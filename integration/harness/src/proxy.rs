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
//!
//! Bounded: all listen on 127.0.0.1 only, forward only to a loopback
//! target, keep at most [`MAX_CONNECTIONS`] connections open, hold at most one
//! read buffer per direction of a connection, and stop by themselves when
//! dropped or after [`LIFETIME`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

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

/// Round trips and connections seen by a [`CountingProxy`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exchanges {
    /// Request/response exchanges, over all connections: on each
    /// connection, the client's first bytes start one, and so do bytes the
    /// client sends after the server has answered. Bytes a client sends
    /// while still waiting (a request in several writes, a pipelined
    /// request) belong to the exchange already open.
    pub round_trips: u64,
    /// Connections accepted from clients (each also costs a TCP handshake,
    /// which is not counted in `round_trips`).
    pub connections: u64,
}

impl std::ops::Sub for Exchanges {
    type Output = Self;

    fn sub(self, earlier: Self) -> Self {
        Self {
            round_trips: self.round_trips.saturating_sub(earlier.round_trips),
            connections: self.connections.saturating_sub(earlier.connections),
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    round_trips: AtomicU64,
    connections: AtomicU64,
}

/// A running proxy that forwards bytes unchanged and counts exchanges
/// ([`Exchanges`]). Dropping it stops it and closes its connections.
///
/// Counting is exact for a client that waits for each answer before it
/// sends again (one operation at a time); concurrent requests on one
/// connection (pipelining, HTTP/2 streams) merge into fewer exchanges.
/// Messages a server sends on its own (a watch event, a keep-alive) make
/// the client's next request count as a new exchange, as it is one.
///
/// A connection that opens with the HTTP/2 preface (gRPC, as etcd speaks)
/// is read frame by frame: only a `HEADERS` frame (a new request) opens an
/// exchange, so the flow-control and keep-alive frames a client sends on
/// its own (`WINDOW_UPDATE`, `PING`, `SETTINGS` acks) are not counted as
/// round trips.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use fencing_harness::proxy::CountingProxy;
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
///
/// // An echo server stands in for a database.
/// let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
/// let target = server.local_addr().unwrap();
/// tokio::spawn(async move {
///     let (mut s, _) = server.accept().await.unwrap();
///     let mut buf = [0u8; 16];
///     while let Ok(n @ 1..) = s.read(&mut buf).await {
///         s.write_all(&buf[..n]).await.unwrap();
///     }
/// });
///
/// let proxy = CountingProxy::start(target).await;
/// let mut client = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
/// let mut answer = [0u8; 4];
/// for _ in 0..3 {
///     client.write_all(b"ping").await.unwrap();
///     client.read_exact(&mut answer).await.unwrap();
/// }
/// assert_eq!(proxy.exchanges().round_trips, 3);
/// assert_eq!(proxy.exchanges().connections, 1);
/// # }
/// ```
#[derive(Debug)]
pub struct CountingProxy {
    addr: SocketAddr,
    counters: Arc<Counters>,
    /// Stops the accept loop when the proxy is dropped.
    _task: AbortOnDrop,
}

impl CountingProxy {
    /// Starts a proxy to `target`, which must be a loopback address.
    ///
    /// # Panics
    /// If `target` is not on loopback or no port can be bound.
    pub async fn start(target: SocketAddr) -> Self {
        let counters = Arc::new(Counters::default());
        let counting = counters.clone();
        let (addr, task) = serve(target, move |client| {
            counting.connections.fetch_add(1, Ordering::SeqCst);
            count_pump(client, target, counting.clone())
        })
        .await;
        Self {
            addr,
            counters,
            _task: task,
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the proxy has seen so far; subtract an earlier reading to count
    /// one stretch of work.
    pub fn exchanges(&self) -> Exchanges {
        Exchanges {
            round_trips: self.counters.round_trips.load(Ordering::SeqCst),
            connections: self.counters.connections.load(Ordering::SeqCst),
        }
    }
}

/// Forwards both directions of one connection, counting a new exchange
/// whenever the client sends after the server has answered.
async fn count_pump(client: TcpStream, target: SocketAddr, counters: Arc<Counters>) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    // Forward small messages at once, as the client and server would see
    // them without the proxy.
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    // True until the client speaks: its first bytes open an exchange.
    let answered = Arc::new(AtomicBool::new(true));
    let server_answered = answered.clone();
    let up = async {
        let mut buf = vec![0u8; 64 * 1024];
        let mut http2: Option<Http2Frames> = None;
        let mut first = true;
        loop {
            let n = match client_rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if std::mem::take(&mut first) && buf[..n].starts_with(HTTP2_PREFACE) {
                http2 = Some(Http2Frames::default());
            }
            let request = http2.as_mut().is_none_or(|f| f.feed(&buf[..n]) > 0);
            if request && answered.swap(false, Ordering::SeqCst) {
                counters.round_trips.fetch_add(1, Ordering::SeqCst);
            }
            if server_tx.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = server_tx.shutdown().await;
    };
    let down = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // Marked before the client can see the answer (and reply to it).
            server_answered.store(true, Ordering::SeqCst);
            if client_tx.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_tx.shutdown().await;
    };
    tokio::join!(up, down);
}

/// What an HTTP/2 client sends first (RFC 9113, section 3.4).
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Splits a client's HTTP/2 byte stream into frames, across reads.
#[derive(Debug, Default)]
struct Http2Frames {
    /// Bytes of the preface and of frames seen so far: frames start after
    /// the preface.
    preface_seen: usize,
    /// The frame header being read (9 bytes).
    header: [u8; 9],
    header_len: usize,
    /// Payload bytes of the current frame still to skip.
    payload_left: usize,
}

impl Http2Frames {
    /// `HEADERS` frame type (RFC 9113, section 6.2).
    const HEADERS: u8 = 0x1;

    /// Reads `bytes`; returns how many `HEADERS` frames (requests) start
    /// in them.
    fn feed(&mut self, mut bytes: &[u8]) -> usize {
        let mut requests = 0;
        let skip = (HTTP2_PREFACE.len() - self.preface_seen).min(bytes.len());
        self.preface_seen += skip;
        bytes = &bytes[skip..];
        while !bytes.is_empty() {
            if self.payload_left > 0 {
                let n = self.payload_left.min(bytes.len());
                self.payload_left -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (9 - self.header_len).min(bytes.len());
            self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[..n]);
            self.header_len += n;
            bytes = &bytes[n..];
            if self.header_len == 9 {
                let h = self.header;
                self.payload_left =
                    usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                if h[3] == Self::HEADERS {
                    requests += 1;
                }
                self.header_len = 0;
            }
        }
        requests
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![
            u8::try_from(len >> 16).unwrap(),
            u8::try_from((len >> 8) & 0xff).unwrap(),
            u8::try_from(len & 0xff).unwrap(),
            kind,
            0,
            0,
            0,
            0,
            1,
        ];
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn http2_requests_are_headers_frames_across_reads() {
        let settings = frame(0x4, &[0; 6]);
        let headers = frame(Http2Frames::HEADERS, &[7; 40]);
        let data = frame(0x0, &[1; 300]);
        let window_update = frame(0x8, &[0; 4]);
        let mut stream = HTTP2_PREFACE.to_vec();
        for f in [&settings, &headers, &data, &window_update, &headers, &data] {
            stream.extend_from_slice(f);
        }
        // Whole, and cut into 5-byte reads.
        assert_eq!(Http2Frames::default().feed(&stream), 2);
        let mut frames = Http2Frames::default();
        let counted: usize = stream.chunks(5).map(|c| frames.feed(c)).sum();
        assert_eq!(counted, 2);
        // Control frames alone open nothing.
        assert_eq!(
            Http2Frames::default().feed(&[HTTP2_PREFACE, &window_update[..]].concat()),
            0
        );
    }
}

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
    pub fn drop_answers(&self, prefix: &[u8], count: usize) {
        *self.state.prefix.lock().expect("poisoned") = prefix.to_vec();
        self.state.is_released.store(false, Ordering::SeqCst);
        self.state.armed.store(count, Ordering::SeqCst);
    }

    /// The status lines of the answers lost so far (e.g. `HTTP/1.1 200 OK`).
    pub fn dropped(&self) -> Vec<String> {
        self.state.dropped.lock().expect("poisoned").clone()
    }

    /// Waits (at most `within`) until `n` answers have been lost; returns
    /// their status lines.
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

/// A loopback proxy that, when armed, moves the `Date` header of the next
/// HTTP/1.1 answers forward: what a gateway or load balancer with a fast
/// clock, or an error page a proxy stamped, shows a client. Everything
/// else passes through unchanged.
#[derive(Debug)]
pub struct DateShiftingProxy {
    state: Arc<ShiftState>,
    /// Stops the accept loop when the proxy is dropped.
    _task: AbortOnDrop,
}

#[derive(Debug, Default)]
struct ShiftState {
    /// Seconds to add to the `Date` of the next `armed` answers.
    by: AtomicU64,
    armed: AtomicUsize,
    shifted: AtomicUsize,
}

impl DateShiftingProxy {
    /// Starts a proxy in front of the loopback HTTP server at `endpoint`;
    /// returns it and the same endpoint through the proxy.
    ///
    /// # Panics
    /// If `endpoint` is not `http://HOST:PORT[/PATH]` on loopback.
    pub async fn in_front_of(endpoint: &str) -> (Self, String) {
        let target = http_target(endpoint);
        let state = Arc::new(ShiftState::default());
        let shared = state.clone();
        let (addr, task) = serve(target, move |client| {
            shift_pump(client, target, shared.clone())
        })
        .await;
        let proxy = Self { state, _task: task };
        (proxy, through(endpoint, addr))
    }

    /// Moves the `Date` of the next `count` answers `by` forward.
    pub fn shift_dates(&self, by: Duration, count: usize) {
        self.state.by.store(by.as_secs(), Ordering::SeqCst);
        self.state.armed.store(count, Ordering::SeqCst);
    }

    /// How many answers' `Date` was moved so far.
    pub fn shifted(&self) -> usize {
        self.state.shifted.load(Ordering::SeqCst)
    }
}

/// The header's value in `chunk`: where it starts and its text. An
/// IMF-fixdate is always 29 bytes, so a shifted one replaces it in place
/// and the answer's framing is untouched.
fn date_header(chunk: &[u8]) -> Option<(usize, &str)> {
    const NAME: &[u8] = b"\r\ndate: ";
    let start = chunk
        .windows(NAME.len())
        .position(|w| w.eq_ignore_ascii_case(NAME))?
        + NAME.len();
    let value = chunk.get(start..start + 29)?;
    Some((start, std::str::from_utf8(value).ok()?))
}

async fn shift_pump(client: TcpStream, target: SocketAddr, state: Arc<ShiftState>) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let up = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_rx, &mut server_tx).await;
        let _ = server_tx.shutdown().await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match server_rx.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let found = date_header(&buf[..n])
            .and_then(|(at, text)| Some((at, httpdate::parse_http_date(text).ok()?)));
        if let Some((at, date)) = found
            && state
                .armed
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |a| a.checked_sub(1))
                .is_ok()
        {
            let by = Duration::from_secs(state.by.load(Ordering::SeqCst));
            let moved = httpdate::fmt_http_date(date + by);
            buf[at..at + 29].copy_from_slice(moved.as_bytes());
            state.shifted.fetch_add(1, Ordering::SeqCst);
        }
        if client_tx.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    up.abort();
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
