//! What the members of an etcd cluster say about themselves (`etcdctl
//! endpoint status -w fields`), and from it who leads and whether the
//! cluster formed. `services` asks the members on 127.0.0.1; the nemesis
//! asks the same of its members in network namespaces ([`leader_of`]).

use std::fmt::Write;
use std::net::Ipv4Addr;

use crate::Service;

/// One member's answer to `endpoint status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    /// The address it was asked at.
    pub ip: Ipv4Addr,
    /// Its client port.
    pub port: u16,
    /// Its member id.
    pub member: u64,
    /// The member id of the leader it follows; 0 while it knows none.
    pub leader: u64,
}

impl MemberStatus {
    /// Whether it says it leads.
    pub fn leads(&self) -> bool {
        self.leader != 0 && self.member == self.leader
    }
}

/// Asks every endpoint (plain http) for its status, in one bounded
/// `etcdctl` call: one [`MemberStatus`] per member that answers (the others
/// are left out).
pub fn status(endpoints: &[(Ipv4Addr, u16)]) -> Vec<MemberStatus> {
    let urls: Vec<String> = endpoints
        .iter()
        .map(|(ip, port)| format!("http://{ip}:{port}"))
        .collect();
    let urls = format!("--endpoints={}", urls.join(","));
    // It exits non-zero when any member does not answer; what the others
    // said is on stdout all the same (stderr's lines never parse as fields).
    let (_, out) = crate::util::output_all(
        10,
        "etcdctl",
        &[
            &urls,
            "--dial-timeout=1s",
            "--command-timeout=2s",
            "endpoint",
            "status",
            "-w",
            "fields",
        ],
        &[("ETCDCTL_API", "3")],
        None,
    );
    parse_status(&out)
}

/// Parses `endpoint status -w fields`: blocks of `"Name" : value` lines,
/// each ended by its `"Endpoint"` line.
pub fn parse_status(text: &str) -> Vec<MemberStatus> {
    let mut out = Vec::new();
    let (mut member, mut leader) = (None, None);
    for line in text.lines() {
        let Some((key, value)) = line.split_once(" : ") else {
            continue;
        };
        match key.trim() {
            "\"MemberID\"" => member = value.trim().parse::<u64>().ok(),
            "\"Leader\"" => leader = value.trim().parse::<u64>().ok(),
            "\"Endpoint\"" => {
                if let (Some((ip, port)), Some(member)) =
                    (parse_endpoint(value.trim().trim_matches('"')), member)
                {
                    out.push(MemberStatus {
                        ip,
                        port,
                        member,
                        leader: leader.unwrap_or(0),
                    });
                }
                (member, leader) = (None, None);
            }
            _ => {}
        }
    }
    out
}

/// `http://IP:PORT` (or `https://`, or bare) -> its address and port.
fn parse_endpoint(url: &str) -> Option<(Ipv4Addr, u16)> {
    let hostport = url.rsplit("://").next()?;
    let (host, port) = hostport.rsplit_once(':')?;
    Some((host.parse().ok()?, port.trim_end_matches('/').parse().ok()?))
}

/// The index in `endpoints` of the member that says it leads (the first,
/// should two say so), if any answers so.
pub fn leader_of(endpoints: &[(Ipv4Addr, u16)]) -> Option<usize> {
    let statuses = status(endpoints);
    let leader = statuses.iter().find(|s| s.leads())?;
    endpoints
        .iter()
        .position(|e| *e == (leader.ip, leader.port))
}

/// The cluster formed: at least `min` members answer, every one knows a
/// leader, they all name the same one, and exactly one of them is it.
pub fn formed(statuses: &[MemberStatus], min: usize) -> bool {
    let Some(first) = statuses.first() else {
        return false;
    };
    statuses.len() >= min
        && statuses
            .iter()
            .all(|s| s.leader != 0 && s.leader == first.leader)
        && statuses.iter().filter(|s| s.leads()).count() == 1
}

/// The service's members, as `services` runs them (on 127.0.0.1).
fn endpoints(service: &Service) -> Vec<(Ipv4Addr, u16)> {
    service
        .members
        .iter()
        .map(|m| (Ipv4Addr::LOCALHOST, m.port))
        .collect()
}

/// [`crate::ClusterOps::leader`]: the leader's client port.
pub(super) fn leader_port(service: &Service) -> Option<u16> {
    leader_of(&endpoints(service)).map(|i| service.members[i].port)
}

/// [`crate::ClusterOps::formed`].
pub(super) fn cluster_formed(service: &Service, min: usize) -> bool {
    formed(&status(&endpoints(service)), min)
}

/// [`crate::ClusterOps::describe`]: `PORT MEMBER_ID LEADER_ID`, one line
/// per member that answers.
pub(super) fn describe(service: &Service) -> String {
    let statuses = status(&endpoints(service));
    if statuses.is_empty() {
        return "no member answers `etcdctl endpoint status`".to_owned();
    }
    let mut out = String::new();
    for s in statuses {
        let _ = writeln!(out, "{} {} {}", s.port, s.member, s.leader);
    }
    out
}
