//! `leader` and `restart-member`: the failover tests' view of a cluster,
//! through its service's [`ClusterOps`].

use std::time::{Duration, Instant};

use super::lock::Lock;
use super::pids;
use super::spawn::{log_file, wait_answering};
use super::up::start_instance;
use super::{install, instance, log, port_open, wait_secs};
use crate::{ClusterOps, Paths, SERVICES, Service};

/// The cluster service `name`, or an error naming the clusters there are.
fn cluster(name: &str) -> Result<(&'static Service, ClusterOps), String> {
    if let Some(service) = crate::service(name)
        && let Some(ops) = service.cluster
    {
        return Ok((service, ops));
    }
    let clusters: Vec<&str> = SERVICES
        .iter()
        .filter(|s| s.cluster.is_some())
        .map(|s| s.name)
        .collect();
    Err(if clusters.is_empty() {
        format!("expected a cluster, got '{name}' (no service declares its cluster operations)")
    } else {
        format!("expected {}, got '{name}'", clusters.join(" or "))
    })
}

/// `leader CLUSTER`: the pid and client port of the cluster's current
/// leader (ours, or whoever listens on its port).
///
/// # Errors
/// Not a cluster, no leader (it is not up), or a leader whose pid is
/// unknown.
pub fn leader(cluster_name: &str) -> Result<(u32, u16), String> {
    let (service, ops) = cluster(cluster_name)?;
    let port = (ops.leader)(service).ok_or_else(|| {
        format!("{cluster_name}: no leader found (is it up? services.sh up {cluster_name})")
    })?;
    let paths = Paths::from_env();
    let ours = service
        .members
        .iter()
        .find(|m| m.port == port)
        .and_then(|m| pids::our_pid(&paths, m.instance));
    let pid = ours
        .or_else(|| pids::listener_pid(port))
        .ok_or_else(|| format!("{cluster_name}: leader on port {port}, but its pid is unknown"))?;
    Ok((pid, port))
}

/// `restart-member CLUSTER PORT`: starts a killed member again, as ours;
/// its pid and port. When other members run, waits until it answers and
/// the running members agree on a leader; alone, it cannot serve, so it
/// only checks that it did not exit.
///
/// # Errors
/// Not a cluster, no member on that port, the member still running, or
/// one that does not start, answer or rejoin.
pub fn restart_member(cluster_name: &str, port: u16) -> Result<(u32, u16), String> {
    restart_member_on(cluster_name, &port.to_string())
}

/// [`restart_member`] with the port as given on the command line.
pub(crate) fn restart_member_on(cluster_name: &str, port: &str) -> Result<(u32, u16), String> {
    let (service, ops) = cluster(cluster_name)?;
    let index = service
        .members
        .iter()
        .position(|m| m.port.to_string() == port)
        .ok_or_else(|| {
            let ports: Vec<String> = service.members.iter().map(|m| m.port.to_string()).collect();
            format!(
                "{cluster_name} has no member on port '{port}' (members: {})",
                ports.join(" ")
            )
        })?;
    let paths = Paths::from_env();
    let member = instance(&paths, service, index);
    let _lock = Lock::take(&paths)?;
    if port_open(member.port) {
        let pid = pids::our_pid(&paths, &member.name)
            .or_else(|| pids::listener_pid(member.port))
            .map_or_else(|| "?".to_owned(), |p| p.to_string());
        return Err(format!(
            "{} is still running on 127.0.0.1:{} (pid {pid}); kill it first",
            member.name, member.port
        ));
    }
    install::install(&paths, &[service], false)?;
    // Running, serving or not.
    let others = service
        .members
        .iter()
        .filter(|m| m.port != member.port && port_open(m.port))
        .count();
    start_instance(&paths, service, &member)?;
    let log_path = log_file(&paths, &member.name);
    if others > 0 {
        // With this member a majority runs: wait until it serves and the
        // running members agree on a leader.
        wait_answering(&paths, service, &member)?;
        wait_formed(&paths, service, ops, others + 1)?;
    } else {
        // Alone it cannot serve (an etcd member does not even answer
        // /version before it joins a quorum).
        std::thread::sleep(Duration::from_secs(1));
        if pids::ours(&paths, &member.name).is_none() {
            return Err(format!(
                "{} exited right away; see {}",
                member.name,
                log_path.display()
            ));
        }
        log(format!(
            "{}: running, but no other member serves: it answers once {} of {} run; restart another member",
            member.name,
            service.members.len() / 2 + 1,
            service.members.len()
        ));
    }
    let pid = pids::our_pid(&paths, &member.name)
        .ok_or_else(|| format!("{} exited; see {}", member.name, log_path.display()))?;
    Ok((pid, member.port))
}

/// Waits until at least `min` members answer and agree on one leader.
pub(crate) fn wait_formed(
    paths: &Paths,
    service: &Service,
    ops: ClusterOps,
    min: usize,
) -> Result<(), String> {
    let secs = wait_secs();
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !(ops.formed)(service, min) {
        if Instant::now() >= deadline {
            log(format!(
                "{}: the members did not agree on a leader within {secs}s; what they say:",
                service.name
            ));
            eprintln!("{}", (ops.describe)(service));
            let logs: Vec<String> = service
                .members
                .iter()
                .map(|m| log_file(paths, m.instance).display().to_string())
                .collect();
            return Err(format!(
                "{} did not form; logs: {}",
                service.name,
                logs.join(" ")
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let leader = (ops.leader)(service).map_or_else(|| "?".to_owned(), |p| p.to_string());
    log(format!("{}: formed, leader on port {leader}", service.name));
    Ok(())
}
