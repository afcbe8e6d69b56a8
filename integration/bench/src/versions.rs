//! Asking the emulators which versions they run, for the report's list
//! (the other servers are asked by their plain sides).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The `Server` header of an HTTP `GET path` on `addr`, if any.
pub(crate) async fn http_server_header(addr: std::net::SocketAddr, path: &str) -> Option<String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        // The head only: up to the blank line (or 16 KiB).
        let mut head = Vec::new();
        let mut buf = [0u8; 2048];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            let n = stream.read(&mut buf).await.ok()?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&head).into_owned();
        text.lines().find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("server"))
                .map(|(_, v)| v.trim().to_owned())
        })
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .ok()
        .flatten()
}
