//! [`CountingProxy`]: request/response exchanges and connections counted
//! on the wire, HTTP/1.1 or HTTP/2.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{AbortOnDrop, serve};

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
