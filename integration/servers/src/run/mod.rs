//! The `services` program (`integration/services.sh` is its shim): it
//! installs, starts, probes and stops the test servers natively on
//! 127.0.0.1, every step derived from [`SERVICES`].
//!
//! State lives under [`Paths`]: `pids/<instance>.pid` (`PID STARTTIME`:
//! only a process recorded there is ours, and only ours is ever stopped),
//! `logs/<instance>.log`, `data/<instance>/`; `pids/<instance>.adopted`
//! marks a server `restart` took over from whoever ran it (the machine's
//! PostgreSQL), which `down` leaves running. A port that answers already
//! is reused, never restarted. The commands that change anything hold
//! `<state>/.lock`, so concurrent callers take turns.
//!
//! The tests call [`up`], [`down`], [`leader`], [`restart_member`] and
//! [`restart`] in-process; [`main`] is the command line.

mod cluster;
mod install;
mod lock;
mod pids;
mod report;
mod spawn;
mod stop;
mod sys;
mod up;

use std::net::Ipv4Addr;

pub use cluster::{leader, restart_member};
pub use report::{env, status};
pub use up::{clean, deps, down, restart, up};

use crate::{Group, Instance, Paths, Peer, SERVICES, Service};

/// The default bound on waiting for one server (or a cluster) to answer.
const DEFAULT_WAIT_SECS: u64 = 90;

/// Runs the command line `args` (without the program name); the exit
/// status: 0, 1 after an error (printed), 2 for a usage error.
pub fn main(args: &[String]) -> i32 {
    let (command, rest) = match args.split_first() {
        Some((c, rest)) => (c.as_str(), rest),
        None => ("", args),
    };
    let arg = |i: usize| rest.get(i).map_or("", String::as_str);
    let result = match command {
        "up" => up(rest),
        "down" => down(rest),
        "deps" => deps(rest),
        "restart" => restart(arg(0)),
        "clean" => clean(),
        "status" => print_lines(status()),
        "env" => print_lines(env()),
        "leader" => leader(arg(0)).map(|(pid, port)| println!("{pid} {port}")),
        "restart-member" => {
            cluster::restart_member_on(arg(0), arg(1)).map(|(pid, port)| println!("{pid} {port}"))
        }
        "compose" => print_lines([crate::compose::render()]),
        "help" | "-h" | "--help" => {
            print!("{}", usage());
            return 0;
        }
        _ => {
            eprint!("{}", usage());
            return 2;
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            log(format!("error: {e}"));
            1
        }
    }
}

/// The usage text, with the groups' members listed from [`SERVICES`].
fn usage() -> String {
    let names = |group: Group| -> String {
        let names: Vec<&str> = SERVICES
            .iter()
            .filter(|s| s.group == group)
            .map(|s| s.name)
            .collect();
        names.join(" ")
    };
    let tls_servers: Vec<&str> = SERVICES
        .iter()
        .filter(|s| s.group == Group::Tls && !s.members.is_empty())
        .map(|s| s.name)
        .collect();
    format!(
        r#"  services.sh up [NAMES...]        install what is missing, start what is not answering, wait
  services.sh down [NAMES...]      stop what this checkout's services.sh started (never anything else)
  services.sh status               one line per server: name, port, answering, ours/external
  services.sh env                  `export` lines; use: eval "$(integration/services.sh env)"
  services.sh deps [NAMES...]      only install the packages and tools (up does this too)
  services.sh leader CLUSTER       print "PID PORT" of the leader of {clusters}
  services.sh restart-member CLUSTER PORT   start a killed member again; prints "PID PORT"
  services.sh restart NAME         stop a single server (ours or not: for fault tests) and start it as ours
                                   (one we had not started is adopted: down leaves it running)
  services.sh clean                down all, then delete data, logs and the test PKI (keeps installed tools)
  services.sh compose              print docker-compose.yml, generated from the same specs

NAMES: with no names, `up` (and `deps`) take the standard servers
({standard}) and `down` stops everything this
checkout started, the on-demand servers included; `all` means the standard ones plus
the on-demand ones ({on_demand}, and the group `tls`),
which is what integration/test.sh starts. `tls` means the TLS-only, password-required
variants ({tls}) and `pki`, their throwaway CA and
certificates in .state/tls/.
"#,
        clusters = cluster_names(),
        standard = names(Group::Standard),
        on_demand = names(Group::OnDemand),
        tls = tls_servers.join(" "),
    )
}

fn cluster_names() -> String {
    let names: Vec<&str> = SERVICES
        .iter()
        .filter(|s| s.cluster.is_some())
        .map(|s| s.name)
        .collect();
    if names.is_empty() {
        "none declared".to_owned()
    } else {
        names.join(" or ")
    }
}

/// A log line on stderr.
pub(crate) fn log(message: impl std::fmt::Display) {
    eprintln!("services: {message}");
}

/// `FENCING_WAIT_SECS`: the bound on waiting for one server (or a
/// cluster) to answer.
pub(crate) fn wait_secs() -> u64 {
    std::env::var("FENCING_WAIT_SECS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_WAIT_SECS)
}

/// Whether something accepts connections on `port` of 127.0.0.1.
pub(crate) fn port_open(port: u16) -> bool {
    crate::util::port_open(Ipv4Addr::LOCALHOST, port)
}

/// The services `names` select (see [`crate::expand`]).
fn selected<S: AsRef<str>>(names: &[S]) -> Result<Vec<&'static Service>, String> {
    let names: Vec<String> = names.iter().map(|n| n.as_ref().to_owned()).collect();
    crate::expand(&names)
}

/// Member `index` of `service` as `services` runs it: on 127.0.0.1, in
/// `<data>/<instance>`, its cluster every member when there are several.
pub(crate) fn instance(paths: &Paths, service: &Service, index: usize) -> Instance {
    let member = &service.members[index];
    let cluster = if service.members.len() > 1 {
        service
            .members
            .iter()
            .map(|m| Peer {
                ip: Ipv4Addr::LOCALHOST,
                port: m.port,
                peer_ports: m.peer_ports.to_vec(),
            })
            .collect()
    } else {
        Vec::new()
    };
    Instance {
        name: member.instance.to_owned(),
        number: index + 1,
        ip: Ipv4Addr::LOCALHOST,
        port: member.port,
        peer_ports: member.peer_ports.to_vec(),
        cluster,
        dir: paths.data.join(member.instance),
        paths: paths.clone(),
    }
}

/// Writes `lines` to stdout. A reader that stopped early (`status | head`)
/// ends the output quietly, where `println!` would panic on the closed pipe.
fn print_lines(lines: impl IntoIterator<Item = String>) -> Result<(), String> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for line in lines {
        let line = if line.ends_with('\n') {
            line
        } else {
            line + "\n"
        };
        if let Err(e) = out.write_all(line.as_bytes()) {
            return match e.kind() {
                std::io::ErrorKind::BrokenPipe => Ok(()),
                _ => Err(format!("writing to stdout: {e}")),
            };
        }
    }
    out.flush().or_else(|e| match e.kind() {
        std::io::ErrorKind::BrokenPipe => Ok(()),
        _ => Err(format!("writing to stdout: {e}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_know_their_cluster() {
        let paths = Paths::new("/tmp/state", None);
        let cluster = crate::service("etcd-cluster").unwrap();
        let second = instance(&paths, cluster, 1);
        assert_eq!(second.name, "etcd-cluster-2");
        assert_eq!(second.number, 2);
        assert_eq!(second.port, 12379);
        assert_eq!(second.peer_ports, [12380]);
        assert_eq!(second.cluster.len(), 3);
        assert_eq!(second.cluster[2].port, 13379);
        assert_eq!(
            second.dir,
            std::path::Path::new("/tmp/state/data/etcd-cluster-2")
        );
        let single = instance(&paths, crate::service("etcd").unwrap(), 0);
        assert!(single.cluster.is_empty());
    }

    #[test]
    fn usage_errors_exit_2_and_help_0() {
        assert_eq!(main(&[]), 2);
        assert_eq!(main(&["nope".to_owned()]), 2);
        assert_eq!(main(&["--help".to_owned()]), 0);
        assert!(usage().contains("services.sh restart-member CLUSTER PORT"));
    }

    #[test]
    fn bad_arguments_are_errors_not_panics() {
        assert_eq!(main(&["up".to_owned(), "nope".to_owned()]), 1);
        assert_eq!(main(&["leader".to_owned()]), 1);
        assert_eq!(main(&["restart-member".to_owned(), "etcd".to_owned()]), 1);
        assert_eq!(main(&["restart".to_owned(), "etcd-cluster".to_owned()]), 1);
    }
}
