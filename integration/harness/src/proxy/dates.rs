//! [`DateShiftingProxy`]: answers whose `Date` a fast clock stamped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{AbortOnDrop, http_target, serve, through};

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
