//! MariaDB: the machine's server (or Debian's, started here), and a second
//! server of its own that requires TLS.

mod check;
mod compose;
mod start;
#[cfg(test)]
mod tests;

use super::OPENSSL;
use crate::{Dep, Group, Have, Member, Server, Service, Stop};

const SINGLE_DEPS: &[Dep] = &[
    Dep::Apt {
        package: "mariadb-server",
        unless: &[Have::Either(
            &Have::File("/usr/sbin/mariadbd"),
            &Have::Listening(3306),
        )],
    },
    Dep::Apt {
        package: "mariadb-client",
        unless: &[Have::Command("mariadb"), Have::Command("mariadb-admin")],
    },
];
// A server of its own: the server binaries in any case.
const TLS_DEPS: &[Dep] = &[
    Dep::Apt {
        package: "mariadb-server",
        unless: &[
            Have::File("/usr/sbin/mariadbd"),
            Have::Command("mariadb-install-db"),
        ],
    },
    Dep::Apt {
        package: "mariadb-client",
        unless: &[Have::Command("mariadb")],
    },
    OPENSSL,
];

const SINGLE_MEMBERS: &[Member] = &[Member {
    instance: "mariadb",
    port: 3306,
    peer_ports: &[],
}];
const TLS_MEMBERS: &[Member] = &[Member {
    instance: "mariadb-tls",
    port: 3307,
    peer_ports: &[],
}];

/// MariaDB / MySQL.
pub const MYSQL: Server = Server {
    name: "MariaDB",
    service: "mariadb",
    var: "FENCING_MYSQL_URL",
    form: "mysql://fencing:fencing@127.0.0.1:{port}/fencing",
    members: SINGLE_MEMBERS,
};
/// MariaDB: `require_secure_transport`, the user `REQUIRE SSL`.
pub const MYSQL_TLS: Server = Server {
    name: "MariaDB (TLS only)",
    service: "mariadb-tls",
    var: "FENCING_MYSQL_TLS_URL",
    form: "mysql://{user}:{password}@127.0.0.1:{port}/fencing",
    members: TLS_MEMBERS,
};

/// `mariadb`.
pub const SINGLE: Service = Service {
    name: "mariadb",
    about: "MariaDB 10.11 (the machine's, else Debian's started here); database `fencing`, users `fencing@%` and `fencing@localhost` / `fencing`",
    group: Group::Standard,
    members: SINGLE_MEMBERS,
    servers: &[MYSQL],
    deps: SINGLE_DEPS,
    start: start::single,
    probe: check::probe,
    setup: Some(check::setup),
    cluster: None,
    stop: Stop::Term,
    compose: compose::single,
};
/// `mariadb-tls`.
pub const TLS: Service = Service {
    name: "mariadb-tls",
    about: "a second mariadbd (own datadir, socket, no option files), `require_secure_transport=ON`; `fencing@%` and `fencing@localhost` `REQUIRE SSL`",
    group: Group::Tls,
    members: TLS_MEMBERS,
    servers: &[MYSQL_TLS],
    deps: TLS_DEPS,
    start: start::tls,
    probe: check::probe_tls,
    setup: Some(check::setup_tls),
    cluster: None,
    stop: Stop::Term,
    compose: compose::tls,
};
