//! What a ZooKeeper server says it is (`srvr`'s Mode: leader, follower,
//! standalone; nothing while it does not serve), and from it who leads an
//! ensemble and whether it formed. The nemesis asks the same of its
//! servers in network namespaces ([`mode`]).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::{Paths, Service};

/// The `Mode:` of `srvr`'s answer, if it has one.
pub fn mode_in(answer: &str) -> Option<String> {
    answer
        .lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|m| m.trim().to_owned())
}

/// The server's mode (`leader`, `follower`, `standalone`), asked with
/// `srvr` within 3 s; `None` while it does not serve. (`ruok` answers imok
/// before the server serves; `srvr` does not.)
pub fn mode(ip: Ipv4Addr, port: u16) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(3);
    let addr = SocketAddr::from((ip, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.write_all(b"srvr").ok()?;
    // It answers and closes; read until then, within the deadline.
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    mode_in(&String::from_utf8_lossy(&answer))
}

/// The mode of a TLS-only server: `srvr` asked over TLS (ZooKeeper's Netty
/// server answers four-letter words there too) with `openssl s_client`,
/// the server's certificate verified against the test CA for `ip`.
pub fn tls_mode(paths: &Paths, ip: Ipv4Addr, port: u16) -> Option<String> {
    let connect = format!("{ip}:{port}");
    let ca = paths.tls_file("ca.pem").display().to_string();
    let ip = ip.to_string();
    let (_, out) = crate::util::output_all(
        3,
        "openssl",
        &[
            "s_client",
            "-connect",
            &connect,
            "-CAfile",
            &ca,
            "-verify_return_error",
            "-verify_ip",
            &ip,
            "-quiet",
        ],
        &[],
        Some("srvr\n"),
    );
    mode_in(&out)
}

/// The ensemble formed: exactly one leader, and at least `min` members
/// leading or following.
pub fn formed(modes: &[Option<String>], min: usize) -> bool {
    let is = |m: &Option<String>, what: &str| m.as_deref() == Some(what);
    modes.iter().filter(|m| is(m, "leader")).count() == 1
        && modes
            .iter()
            .filter(|m| is(m, "leader") || is(m, "follower"))
            .count()
            >= min
}

/// Each member's port and mode, as `services` runs them (on 127.0.0.1).
fn modes(service: &Service) -> Vec<(u16, Option<String>)> {
    service
        .members
        .iter()
        .map(|m| (m.port, mode(Ipv4Addr::LOCALHOST, m.port)))
        .collect()
}

/// [`crate::ClusterOps::leader`]: the leader's client port.
pub(super) fn leader_port(service: &Service) -> Option<u16> {
    modes(service)
        .into_iter()
        .find(|(_, m)| m.as_deref() == Some("leader"))
        .map(|(port, _)| port)
}

/// [`crate::ClusterOps::formed`].
pub(super) fn cluster_formed(service: &Service, min: usize) -> bool {
    let modes: Vec<Option<String>> = modes(service).into_iter().map(|(_, m)| m).collect();
    formed(&modes, min)
}

/// [`crate::ClusterOps::describe`]: `PORT MODE` per member (no mode while
/// it does not serve).
pub(super) fn describe(service: &Service) -> String {
    let mut out = String::new();
    for (port, mode) in modes(service) {
        let _ = writeln!(out, "{port} {}", mode.unwrap_or_default());
    }
    out
}
