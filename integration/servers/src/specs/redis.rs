//! Redis: without persistence, append-only, a replicated pair, and TLS with
//! an ACL user.

mod check;
mod compose;
mod start;
#[cfg(test)]
mod tests;

use super::{NODEJS, NPM, OPENSSL};
use crate::{Dep, Group, Have, Member, NpmTools, Server, Service, Stop};

/// The Node.js lock clients of the foreign-lock tests: node-redlock,
/// node-redisson (Redisson's lock scripts, ported) and the Redis client both
/// drive.
pub const NODE_LOCKS: NpmTools = NpmTools {
    prefix: "node-locks",
    packages: "redlock@4.2.0 node-redisson@1.0.4 ioredis@5.8.2",
};

const CLI: Dep = Dep::Apt {
    package: "redis-tools",
    unless: &[Have::Command("redis-cli")],
};
const SERVER: Dep = Dep::Apt {
    package: "redis-server",
    unless: &[Have::Command("redis-server")],
};
// A server only if none answers already on the standard port.
const SINGLE_DEPS: &[Dep] = &[
    Dep::Apt {
        package: "redis-server",
        unless: &[Have::Either(
            &Have::Command("redis-server"),
            &Have::Listening(6379),
        )],
    },
    CLI,
];
// Where the foreign-lock tests run node-redlock and node-redisson.
const AOF_DEPS: &[Dep] = &[SERVER, CLI, NODEJS, NPM, Dep::Npm(&NODE_LOCKS)];
const DEPS: &[Dep] = &[SERVER, CLI];
// (Debian's Redis 7 is built with TLS.)
const TLS_DEPS: &[Dep] = &[SERVER, CLI, OPENSSL];

const SINGLE_MEMBERS: &[Member] = &[Member {
    instance: "redis",
    port: 6379,
    peer_ports: &[],
}];
const AOF_MEMBERS: &[Member] = &[Member {
    instance: "redis-aof",
    port: 6380,
    peer_ports: &[],
}];
// An append-only primary and a replica following it (asynchronous replication).
const REPLICATED_MEMBERS: &[Member] = &[
    Member {
        instance: "redis-repl-primary",
        port: 6381,
        peer_ports: &[],
    },
    Member {
        instance: "redis-repl-replica",
        port: 6382,
        peer_ports: &[],
    },
];
// The TLS port; the plaintext port is off.
const TLS_MEMBERS: &[Member] = &[Member {
    instance: "redis-tls",
    port: 6390,
    peer_ports: &[],
}];

/// Redis (the one without persistence).
pub const REDIS: Server = Server {
    name: "Redis",
    service: "redis",
    var: "FENCING_REDIS_URL",
    form: "redis://127.0.0.1:{port}",
    members: SINGLE_MEMBERS,
};
/// Redis with `appendonly yes`.
pub const REDIS_AOF: Server = Server {
    name: "Redis (appendonly)",
    service: "redis-aof",
    var: "FENCING_REDIS_AOF_URL",
    form: "redis://127.0.0.1:{port}",
    members: AOF_MEMBERS,
};
/// The primary of a replicated Redis pair (append-only, one replica).
pub const REDIS_PRIMARY: Server = Server {
    name: "Redis (replicated primary)",
    service: "redis-replica",
    var: "FENCING_REDIS_PRIMARY_URL",
    form: "redis://127.0.0.1:{port}",
    members: std::slice::from_ref(&REPLICATED_MEMBERS[0]),
};
/// The replica following [`REDIS_PRIMARY`].
pub const REDIS_REPLICA: Server = Server {
    name: "Redis (replica)",
    service: "redis-replica",
    var: "FENCING_REDIS_REPLICA_URL",
    form: "redis://127.0.0.1:{port}",
    members: std::slice::from_ref(&REPLICATED_MEMBERS[1]),
};
/// Redis: TLS port only, an ACL user, the default user off.
pub const REDIS_TLS: Server = Server {
    name: "Redis (TLS only, ACL user)",
    service: "redis-tls",
    var: "FENCING_REDIS_TLS_URL",
    form: "rediss://{user}:{password}@127.0.0.1:{port}",
    members: TLS_MEMBERS,
};

/// `redis`.
pub const SINGLE: Service = Service {
    name: "redis",
    about: "Redis 7, nothing on disk",
    group: Group::Standard,
    members: SINGLE_MEMBERS,
    servers: &[REDIS],
    deps: SINGLE_DEPS,
    start: start::single,
    probe: check::probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: compose::single,
};
/// `redis-aof`.
pub const AOF: Service = Service {
    name: "redis-aof",
    about: "Redis with `appendonly yes`, `appendfsync always`",
    group: Group::OnDemand,
    members: AOF_MEMBERS,
    servers: &[REDIS_AOF],
    deps: AOF_DEPS,
    start: start::aof,
    probe: check::probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: compose::aof,
};
/// `redis-replica`.
pub const REPLICATED: Service = Service {
    name: "redis-replica",
    about: "an append-only Redis primary and a replica following it (asynchronous replication), for the replicated-issuer refusal",
    group: Group::OnDemand,
    members: REPLICATED_MEMBERS,
    servers: &[REDIS_PRIMARY, REDIS_REPLICA],
    deps: DEPS,
    start: start::replicated,
    probe: check::probe,
    setup: Some(check::setup_replicated),
    cluster: None,
    stop: Stop::Term,
    compose: compose::replicated,
};
/// `redis-tls`.
pub const TLS: Service = Service {
    name: "redis-tls",
    about: "Redis, TLS port only (`--port 0`), `appendfsync always`, client certificates optional; ACL user `fencing` (all rights), `default` off",
    group: Group::Tls,
    members: TLS_MEMBERS,
    servers: &[REDIS_TLS],
    deps: TLS_DEPS,
    start: start::tls,
    probe: check::probe_tls,
    setup: Some(check::setup_tls),
    cluster: None,
    stop: Stop::Term,
    compose: compose::tls,
};
