//! PostgreSQL: the machine's cluster (or Debian's, started here), and a
//! second cluster of its own that takes only TLS and SCRAM passwords.

mod check;
mod compose;
mod private;
mod start;
#[cfg(test)]
mod tests;

pub use private::{private_cluster, private_url};
pub use start::server_bin;

use super::OPENSSL;
use crate::{Dep, Group, Have, Member, Server, Service, Stop};

const CLIENT: Dep = Dep::Apt {
    package: "postgresql-client",
    unless: &[Have::Command("psql"), Have::Command("pg_isready")],
};
// A server only if none answers already; the client tools in any case.
const SINGLE_DEPS: &[Dep] = &[
    Dep::Apt {
        package: "postgresql",
        unless: &[Have::Either(&Have::PostgresServer, &Have::Listening(5432))],
    },
    CLIENT,
];
// A cluster of its own: the server binaries in any case.
const TLS_DEPS: &[Dep] = &[
    Dep::Apt {
        package: "postgresql",
        unless: &[Have::PostgresServer],
    },
    CLIENT,
    OPENSSL,
];

const SINGLE_MEMBERS: &[Member] = &[Member {
    instance: "postgres",
    port: 5432,
    peer_ports: &[],
}];
const TLS_MEMBERS: &[Member] = &[Member {
    instance: "postgres-tls",
    port: 5433,
    peer_ports: &[],
}];

/// PostgreSQL.
pub const POSTGRES: Server = Server {
    name: "PostgreSQL",
    service: "postgres",
    var: "FENCING_PG_URL",
    form: "postgres://fencing:fencing@127.0.0.1:{port}/fencing",
    members: SINGLE_MEMBERS,
};
/// PostgreSQL: `ssl=on`, `hostssl` only, scram password.
pub const POSTGRES_TLS: Server = Server {
    name: "PostgreSQL (TLS only, scram)",
    service: "postgres-tls",
    var: "FENCING_PG_TLS_URL",
    form: "postgres://{user}:{password}@127.0.0.1:{port}/fencing",
    members: TLS_MEMBERS,
};

/// `postgres`.
pub const SINGLE: Service = Service {
    name: "postgres",
    about: "PostgreSQL 15 (the machine's, else Debian's cluster started here); database `fencing`, user `fencing` / `fencing`",
    group: Group::Standard,
    members: SINGLE_MEMBERS,
    servers: &[POSTGRES],
    deps: SINGLE_DEPS,
    start: start::single,
    probe: check::probe,
    setup: Some(check::setup),
    cluster: None,
    stop: Stop::Int,
    compose: compose::single,
};
/// `postgres-tls`.
pub const TLS: Service = Service {
    name: "postgres-tls",
    about: "a second PostgreSQL cluster (`.state/data/postgres-tls`), `ssl=on`, SCRAM; pg_hba: only `hostssl fencing fencing … scram-sha-256`, every non-TLS TCP connection rejected",
    group: Group::Tls,
    members: TLS_MEMBERS,
    servers: &[POSTGRES_TLS],
    deps: TLS_DEPS,
    start: start::tls,
    probe: check::probe_tls,
    setup: Some(check::setup_tls),
    cluster: None,
    stop: Stop::Int,
    compose: compose::tls,
};
