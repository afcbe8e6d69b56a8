//! Finding the real servers the suites run against.
//!
//! Endpoints come from `FENCING_*` environment variables whose defaults are
//! the ports `integration/services.sh` and `docker-compose.yml` use. A test
//! whose server does not answer **fails**, naming the server and how to
//! start it. The only way to skip is to ask: `FENCING_SKIP=etcd,s3`.

/// A server a test needs.
#[derive(Clone, Copy, Debug)]
pub struct Server {
    /// What to call it in messages, e.g. `"PostgreSQL"`.
    pub name: &'static str,
    /// The short name used by `FENCING_SKIP` and `services.sh`, e.g. `"postgres"`.
    pub service: &'static str,
    /// The environment variable holding its endpoint.
    pub var: &'static str,
    /// The endpoint when the variable is unset.
    pub default: &'static str,
}

/// `url` with `option` (`name=value`) appended to its query.
pub fn with_option(url: &str, option: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{option}")
}

impl Server {
    /// The endpoint: the variable if set, the default otherwise.
    pub fn endpoint(&self) -> String {
        std::env::var(self.var).unwrap_or_else(|_| self.default.to_owned())
    }

    /// Whether this run asked to skip the server (`FENCING_SKIP`). Prints
    /// that it was skipped, so a skip is never silent.
    pub fn skipped(&self) -> bool {
        let skip = std::env::var("FENCING_SKIP").unwrap_or_default();
        let asked = skip
            .split(',')
            .map(str::trim)
            .any(|s| s == self.service || s == "all");
        if asked {
            eprintln!(
                "SKIPPED: {} tests (FENCING_SKIP={skip}); remove it to run them",
                self.name
            );
        }
        asked
    }

    /// Fails the test with a message naming the server, the endpoint and
    /// how to start it.
    pub fn unavailable(&self, error: &dyn std::fmt::Display) -> ! {
        panic!(
            "{name} is not answering at {endpoint} ({var}): {error}\n\
             Start it with `integration/services.sh up {service}` (or `docker compose up {service}`), \
             point {var} at a running server, or skip these tests explicitly with FENCING_SKIP={service}.",
            name = self.name,
            endpoint = self.endpoint(),
            var = self.var,
            service = self.service,
        )
    }
}

/// etcd (a single member).
pub const ETCD: Server = Server {
    name: "etcd",
    service: "etcd",
    var: "FENCING_ETCD_ENDPOINTS",
    default: "http://127.0.0.1:2379",
};
/// ZooKeeper (standalone).
pub const ZOOKEEPER: Server = Server {
    name: "ZooKeeper",
    service: "zookeeper",
    var: "FENCING_ZK_ADDR",
    default: "127.0.0.1:2181",
};
/// Redis (the one without persistence).
pub const REDIS: Server = Server {
    name: "Redis",
    service: "redis",
    var: "FENCING_REDIS_URL",
    default: "redis://127.0.0.1:6379",
};
/// Redis with `appendonly yes`.
pub const REDIS_AOF: Server = Server {
    name: "Redis (appendonly)",
    service: "redis-aof",
    var: "FENCING_REDIS_AOF_URL",
    default: "redis://127.0.0.1:6380",
};
/// The primary of a replicated Redis pair (append-only, one replica).
pub const REDIS_PRIMARY: Server = Server {
    name: "Redis (replicated primary)",
    service: "redis-replica",
    var: "FENCING_REDIS_PRIMARY_URL",
    default: "redis://127.0.0.1:6381",
};
/// The replica following [`REDIS_PRIMARY`].
pub const REDIS_REPLICA: Server = Server {
    name: "Redis (replica)",
    service: "redis-replica",
    var: "FENCING_REDIS_REPLICA_URL",
    default: "redis://127.0.0.1:6382",
};
/// PostgreSQL.
pub const POSTGRES: Server = Server {
    name: "PostgreSQL",
    service: "postgres",
    var: "FENCING_PG_URL",
    default: "postgres://fencing:fencing@127.0.0.1:5432/fencing",
};
/// MariaDB / MySQL.
pub const MYSQL: Server = Server {
    name: "MariaDB",
    service: "mariadb",
    var: "FENCING_MYSQL_URL",
    default: "mysql://fencing:fencing@127.0.0.1:3306/fencing",
};
/// The S3 emulator (moto).
pub const S3: Server = Server {
    name: "S3 (moto)",
    service: "s3",
    var: "FENCING_S3_ENDPOINT",
    default: "http://127.0.0.1:9000",
};
/// The GCS emulator (fake-gcs-server).
pub const GCS: Server = Server {
    name: "GCS (fake-gcs-server)",
    service: "gcs",
    var: "FENCING_GCS_ENDPOINT",
    default: "http://127.0.0.1:4443",
};
/// The Azure Blob emulator (Azurite).
pub const AZURE: Server = Server {
    name: "Azure Blob (Azurite)",
    service: "azurite",
    var: "FENCING_AZURE_ENDPOINT",
    default: "http://127.0.0.1:10000/devstoreaccount1",
};
/// s3rver (`integration/services.sh up s3rver`, on demand): an S3 emulator
/// that ignores `If-Match` / `If-None-Match`, the unsafe server `fence
/// doctor` must flag. It checks SigV4 with access key and secret `S3RVER`.
pub const S3RVER: Server = Server {
    name: "s3rver (ignores S3 preconditions)",
    service: "s3rver",
    var: "FENCING_S3RVER_ENDPOINT",
    default: "http://127.0.0.1:9100",
};
/// moto's DynamoDB (`integration/services.sh up dynamodb`), served one
/// request at a time so that its conditional writes are atomic.
pub const DYNAMODB: Server = Server {
    name: "DynamoDB (moto)",
    service: "dynamodb",
    var: "FENCING_DYNAMODB_ENDPOINT",
    default: "http://127.0.0.1:5010",
};
/// The 3-member etcd cluster of `integration/services.sh up etcd-cluster`,
/// for the failover tests.
pub const ETCD_CLUSTER: Server = Server {
    name: "etcd cluster (3 members)",
    service: "etcd-cluster",
    var: "FENCING_ETCD_CLUSTER_ENDPOINTS",
    default: "http://127.0.0.1:11379,http://127.0.0.1:12379,http://127.0.0.1:13379",
};
/// The 3-server ZooKeeper ensemble of `integration/services.sh up
/// zk-ensemble`, for the failover tests.
pub const ZK_ENSEMBLE: Server = Server {
    name: "ZooKeeper ensemble (3 servers)",
    service: "zk-ensemble",
    var: "FENCING_ZK_ENSEMBLE",
    default: "127.0.0.1:11181,127.0.0.1:12181,127.0.0.1:13181",
};

// The TLS-only, password-required variants (`integration/services.sh up
// tls`): a throwaway CA in `FENCING_TLS_DIR`, user `fencing`, password
// [`TLS_PASSWORD`]. URLs carry the password; the tests add the TLS options.

/// The password of user `fencing` on every TLS variant: what the
/// secret-in-error tests look for in every message.
pub const TLS_PASSWORD: &str = "fencing-tls-secret";

/// PostgreSQL: `ssl=on`, `hostssl` only, scram password.
pub const POSTGRES_TLS: Server = Server {
    name: "PostgreSQL (TLS only, scram)",
    service: "postgres-tls",
    var: "FENCING_PG_TLS_URL",
    default: "postgres://fencing:fencing-tls-secret@127.0.0.1:5433/fencing",
};
/// MariaDB: `require_secure_transport`, the user `REQUIRE SSL`.
pub const MYSQL_TLS: Server = Server {
    name: "MariaDB (TLS only)",
    service: "mariadb-tls",
    var: "FENCING_MYSQL_TLS_URL",
    default: "mysql://fencing:fencing-tls-secret@127.0.0.1:3307/fencing",
};
/// Redis: TLS port only, an ACL user, the default user off.
pub const REDIS_TLS: Server = Server {
    name: "Redis (TLS only, ACL user)",
    service: "redis-tls",
    var: "FENCING_REDIS_TLS_URL",
    default: "rediss://fencing:fencing-tls-secret@127.0.0.1:6390",
};
/// etcd: client certificates required, `auth enable`, user `fencing`
/// limited to the prefix `fencing/`.
pub const ETCD_TLS: Server = Server {
    name: "etcd (mutual TLS, auth)",
    service: "etcd-tls",
    var: "FENCING_ETCD_TLS_ENDPOINTS",
    default: "127.0.0.1:2389",
};
/// ZooKeeper: `secureClientPort` only; digest authentication.
pub const ZK_TLS: Server = Server {
    name: "ZooKeeper (TLS)",
    service: "zk-tls",
    var: "FENCING_ZK_TLS_ADDR",
    default: "127.0.0.1:2281",
};
/// S3 (moto) over HTTPS with the throwaway CA's certificate.
pub const S3_TLS: Server = Server {
    name: "S3 (moto, HTTPS)",
    service: "s3-tls",
    var: "FENCING_S3_TLS_ENDPOINT",
    default: "https://127.0.0.1:9443",
};

/// A file of the throwaway PKI (`ca.pem`, `other-ca.pem`, `client.pem`,
/// `client-key.pem`): `FENCING_TLS_DIR`, else `integration/.state/tls`.
pub fn tls_file(name: &str) -> std::path::PathBuf {
    let dir = std::env::var("FENCING_TLS_DIR").map_or_else(
        |_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.state/tls"),
        std::path::PathBuf::from,
    );
    dir.join(name)
}

/// `url` with the TLS options that trust the throwaway CA and present its
/// client certificate: `sslrootcert=…&sslcert=…&sslkey=…`.
pub fn with_test_tls(url: &str) -> String {
    let file = |n: &str| tls_file(n).display().to_string();
    with_option(
        url,
        &format!(
            "sslrootcert={}&sslcert={}&sslkey={}",
            file("ca.pem"),
            file("client.pem"),
            file("client-key.pem")
        ),
    )
}

/// Asserts that no text of `error` (its `Display`, every `source()`, its
/// `Debug`, and [`fencing_core::Error::chain`]) shows `secret`.
///
/// # Panics
/// When one does, quoting it.
pub fn assert_no_secret(what: &str, error: &fencing_core::Error, secret: &str) {
    let mut texts = vec![error.to_string(), format!("{error:?}"), error.chain()];
    let mut cause = std::error::Error::source(error);
    while let Some(e) = cause {
        texts.push(e.to_string());
        texts.push(format!("{e:?}"));
        cause = e.source();
    }
    for text in texts {
        assert!(
            !text.contains(secret),
            "{what}: the secret shows in {text:?}"
        );
    }
}
