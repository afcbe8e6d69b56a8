//! `restart` adopting a server it did not start, and `down` leaving it
//! running: on a stand-in service (a Python HTTP server on a free port)
//! under a state directory of the test's own.

use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::super::pids;
use super::{down_in, restart_in, takes_over};
use crate::util::port_open;
use crate::{Container, Group, Instance, Launch, Member, Paths, Service, Stop};

#[test]
fn only_a_listener_that_was_not_ours_is_taken_over() {
    assert!(takes_over(None, Some(7)), "the machine's server");
    assert!(!takes_over(Some(7), Some(7)), "ours already");
    assert!(!takes_over(None, None), "nothing ran");
}

fn python() -> &'static str {
    if std::path::Path::new("/usr/bin/python3").is_file() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

fn http_server(i: &Instance) -> Result<Launch, String> {
    let (ip, port) = (i.ip.to_string(), i.port.to_string());
    Ok(Launch::new(
        python(),
        ["-m", "http.server", "--bind", &ip, &port],
        &i.dir,
    ))
}

fn listening(i: &Instance) -> bool {
    port_open(i.ip, i.port)
}

fn no_containers(_: &Service) -> Vec<Container> {
    Vec::new()
}

/// A single-server service on a free port, standing in for the machine's
/// PostgreSQL.
fn stand_in() -> &'static Service {
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let members = Box::leak(Box::new([Member {
        instance: "adoptee",
        port,
        peer_ports: &[],
    }]));
    Box::leak(Box::new(Service {
        name: "adoptee",
        about: "a stand-in for a server the machine runs",
        group: Group::OnDemand,
        members,
        servers: &[],
        deps: &[],
        start: http_server,
        probe: listening,
        setup: None,
        stop: Stop::Term,
        cluster: None,
        compose: no_containers,
    }))
}

fn wait_for(what: &str, holds: impl Fn() -> bool) {
    let started = Instant::now();
    while !holds() {
        assert!(started.elapsed() < Duration::from_secs(20), "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_restarted_external_server_is_adopted_and_down_leaves_it_running() {
    let dir = std::env::temp_dir().join(format!("fencing-adopt-test-{}", std::process::id()));
    let paths = Paths::new(&dir, None);
    let service = stand_in();
    let port = service.members[0].port;
    // The machine's server: running, not ours.
    let mut external = Command::new(python())
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the external server did not listen", || {
        port_open(Ipv4Addr::LOCALHOST, port)
    });

    restart_in(&paths, service).unwrap();
    let status = external.wait().unwrap();
    assert!(!status.success(), "the external server was stopped");
    let ours = pids::ours(&paths, "adoptee").expect("started as ours");
    assert!(pids::adopted(&paths, "adoptee"));

    // A second restart of the (now ours) server keeps it adopted.
    restart_in(&paths, service).unwrap();
    assert!(pids::adopted(&paths, "adoptee"));
    let ours_again = pids::ours(&paths, "adoptee").expect("ours");
    assert_ne!(ours_again, ours);

    down_in(&paths, &[service]).unwrap();
    assert!(ours_again.alive(), "down stopped an adopted server");
    assert_eq!(pids::ours(&paths, "adoptee"), Some(ours_again));
    assert!(port_open(Ipv4Addr::LOCALHOST, port));

    // Without the marker it is an ordinary server of ours: down stops it.
    std::fs::remove_file(paths.pids.join("adoptee.adopted")).unwrap();
    down_in(&paths, &[service]).unwrap();
    assert!(!ours_again.alive());
    let _ = std::fs::remove_dir_all(&dir);
}
