//! The servers tables of `integration/README.md`, rendered from the specs
//! (`tests/readme.rs` fails when the README's copy is stale).

use crate::{Group, SERVICES, Server, Service};

/// The markdown table of `group`'s services: name, ports, what it is, the
/// variables the tests read and their defaults.
pub fn markdown(group: Group) -> String {
    let mut out = String::from(
        "| service | ports | what | env variable (default) |\n| --- | --- | --- | --- |\n",
    );
    for service in SERVICES.iter().filter(|s| s.group == group) {
        let vars: Vec<String> = service
            .servers
            .iter()
            .map(|s| format!("`{}={}`", s.var, documented(s)))
            .collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            service.name,
            ports(service),
            service.about,
            vars.join(", ")
        ));
    }
    out
}

/// The client ports, then the others (peer, quorum, election) in brackets.
fn ports(service: &Service) -> String {
    if service.members.is_empty() {
        return "–".to_owned();
    }
    let list = |ports: Vec<u16>| {
        ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let client = list(service.members.iter().map(|m| m.port).collect());
    let others: Vec<u16> = service
        .members
        .iter()
        .flat_map(|m| m.peer_ports.iter().copied())
        .collect();
    if others.is_empty() {
        client
    } else {
        format!("{client} (also {})", list(others))
    }
}

/// The default as a reader of this checkout sees it: the PKI directory
/// relative to the repository, not this machine's absolute path.
fn documented(server: &Server) -> String {
    if server.form.contains("{tls_dir}") {
        return server.form.replace("{tls_dir}", "integration/.state/tls");
    }
    server.default_endpoint()
}
