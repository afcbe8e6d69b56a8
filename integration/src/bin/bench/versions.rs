//! Asking the servers which versions they run, for the report's list
//! (apart from the report, since the cases ask too).

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

/// ZooKeeper's answer to the `srvr` four-letter word: its version line.
pub(crate) async fn zookeeper_version(addr: std::net::SocketAddr) -> Option<String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream.write_all(b"srvr").await.ok()?;
        let mut out = String::new();
        stream.read_to_string(&mut out).await.ok()?;
        out.lines()
            .find_map(|l| l.strip_prefix("Zookeeper version:"))
            .map(|v| {
                let v = v.trim();
                // "3.8.4-9316c2a7…, built on …": the version is enough.
                let v = v.split([',', '-']).next().unwrap_or(v);
                format!("ZooKeeper {v}")
            })
    };
    tokio::time::timeout(Duration::from_secs(3), exchange)
        .await
        .ok()
        .flatten()
}
