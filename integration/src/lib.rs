//! Every issuer and every store of the workspace, by name, on the servers of
//! `integration/services.sh`: what the cross-backend matrix, the fault tests
//! and the benchmarks iterate over.
//!
//! A backend whose server does not answer fails loudly (naming the server
//! and `integration/services.sh up`); `FENCING_SKIP=name,…` skips it on
//! request. All names of one run share a random prefix.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fencing_core::adapter::blob::BlobStore;
use fencing_harness::env::{self, Server, with_option};
use fencing_sql::{SqlConfig, SqlStore, Tables};
use fencing_tokens::memory::{MemoryBlobBackend, MemoryIssuer, MemoryStore};
use fencing_tokens::registry::Role;
use fencing_tokens::{FencedStore, TokenIssuer};

pub mod candidate;
pub mod nemesis;

/// The variable that hands a run's prefix to the processes it starts.
pub const RUN_PREFIX_VAR: &str = "FENCING_RUN_PREFIX";

/// This run's random prefix, for tables, buckets and keys (inherited from
/// [`RUN_PREFIX_VAR`] by child processes, so they see the same backends).
pub fn run_prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(|| {
        std::env::var(RUN_PREFIX_VAR)
            .unwrap_or_else(|_| fencing_testkit::unique_prefix().replace('-', "_"))
    })
}

fn tables() -> Tables {
    Tables::from_prefix(&format!("{}_", run_prefix())).expect("valid prefix")
}

fn sqlite_url() -> String {
    let path = std::env::temp_dir().join(format!("fencing-integration-{}.sqlite", run_prefix()));
    format!("sqlite://{}", path.display())
}

/// Connects `make`, failing loudly (or `None` if the run skips `server`).
async fn on<T, F>(server: Option<&Server>, make: F) -> Option<T>
where
    F: Future<Output = fencing_tokens::Result<T>>,
{
    if server.is_some_and(Server::skipped) {
        return None;
    }
    match make.await {
        Ok(backend) => Some(backend),
        Err(e) => match server {
            Some(server) => server.unavailable(&e.chain()),
            None => panic!("cannot open an embedded backend: {}", e.chain()),
        },
    }
}

/// This run's bucket or container name: the run prefix in the characters
/// every object store accepts.
fn bucket_name() -> String {
    format!("{}-matrix", run_prefix().replace('_', "-"))
}

/// The bucket issuer's URL on this run's bucket of an emulator, its lease
/// records under this run's prefix.
fn bucket_issuer_url(scheme: &str, server: &Server) -> String {
    format!(
        "{scheme}://{}?endpoint={}&emulator=true&lease_prefix={}-lease/",
        bucket_name(),
        server.endpoint(),
        run_prefix()
    )
}

/// Where the tests run a backend of the registry: one row per test server.
/// What each opens (issuer, store, both) is its descriptor's
/// (`fencing_tokens::registry`), not this table's.
struct Instance {
    /// The name tests and `FENCING_SKIP` use (`postgres`).
    name: &'static str,
    /// Its backend's descriptor name (`sql`).
    backend: &'static str,
    /// The server it needs (`None`: embedded).
    server: Option<&'static Server>,
    /// Its URL in the registry's grammar, on this run's prefix (`None`:
    /// opened by [`store`](Self::store)).
    url: Option<fn() -> String>,
    /// The lease TTL its issuer's tests use (zero for a store only).
    ttl: Duration,
    /// Opens its store another way than by URL (an emulator's bucket must
    /// be made first).
    store: Option<fn() -> Opening<dyn FencedStore>>,
}

type Opening<T> = std::pin::Pin<Box<dyn Future<Output = Option<Arc<T>>> + Send>>;

fn table_prefix() -> String {
    format!("fencing_table_prefix={}_", run_prefix())
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const INSTANCES: &[Instance] = &[
    Instance {
        name: "sqlite",
        backend: "sql",
        server: None,
        url: Some(|| with_option(&sqlite_url(), &table_prefix())),
        ttl: ms(400),
        store: None,
    },
    Instance {
        name: "postgres",
        backend: "sql",
        server: Some(&env::POSTGRES),
        url: Some(|| with_option(&env::POSTGRES.endpoint(), &table_prefix())),
        ttl: ms(400),
        store: None,
    },
    Instance {
        name: "mariadb",
        backend: "sql",
        server: Some(&env::MYSQL),
        url: Some(|| with_option(&env::MYSQL.endpoint(), &table_prefix())),
        ttl: ms(400),
        store: None,
    },
    Instance {
        name: "redis",
        backend: "redis",
        server: Some(&env::REDIS_AOF),
        url: Some(|| {
            with_option(
                &env::REDIS_AOF.endpoint(),
                &format!("prefix={}:", run_prefix()),
            )
        }),
        ttl: ms(300),
        store: None,
    },
    Instance {
        name: "etcd",
        backend: "etcd",
        server: Some(&env::ETCD),
        url: Some(|| {
            format!(
                "etcd://{}?prefix={}/",
                env::ETCD.endpoint().replace("http://", ""),
                run_prefix()
            )
        }),
        ttl: Duration::from_secs(2),
        store: None,
    },
    Instance {
        name: "zookeeper",
        backend: "zookeeper",
        server: Some(&env::ZOOKEEPER),
        url: Some(|| format!("zk://{}/{}", env::ZOOKEEPER.endpoint(), run_prefix())),
        ttl: Duration::from_secs(2),
        store: None,
    },
    Instance {
        name: "s3",
        backend: "s3",
        server: Some(&env::S3),
        url: Some(|| bucket_issuer_url("s3", &env::S3)),
        ttl: Duration::from_secs(1),
        store: Some(|| Box::pin(async { Some(Arc::new(s3().await?) as Arc<dyn FencedStore>) })),
    },
    Instance {
        name: "gcs",
        backend: "gcs",
        server: Some(&env::GCS),
        url: Some(|| bucket_issuer_url("gs", &env::GCS)),
        ttl: Duration::from_secs(1),
        store: Some(|| Box::pin(async { Some(Arc::new(gcs().await?) as Arc<dyn FencedStore>) })),
    },
    Instance {
        name: "azure",
        backend: "azure",
        server: Some(&env::AZURE),
        url: Some(|| bucket_issuer_url("az", &env::AZURE)),
        ttl: Duration::from_secs(1),
        store: Some(|| Box::pin(async { Some(Arc::new(azure().await?) as Arc<dyn FencedStore>) })),
    },
    Instance {
        name: "dynamodb",
        backend: "dynamodb",
        server: Some(&env::DYNAMODB),
        // The issuer by URL, on the store's table (its items apart by prefix).
        url: Some(|| {
            format!(
                "dynamodb://{}?endpoint={}&emulator=true&create_table=true",
                bucket_name(),
                env::DYNAMODB.endpoint()
            )
        }),
        ttl: ms(400),
        store: Some(|| {
            Box::pin(async { Some(Arc::new(dynamodb().await?) as Arc<dyn FencedStore>) })
        }),
    },
];

fn instance(name: &str) -> Option<&'static Instance> {
    INSTANCES.iter().find(|i| i.name == name)
}

fn opens(instance: &Instance, role: Role) -> bool {
    fencing_tokens::registry::BACKENDS
        .iter()
        .any(|d| d.name == instance.backend && d.opens(role))
}

/// The issuers, by name: the in-process one, then every test server of an
/// issuer backend of the registry.
pub fn issuers() -> Vec<&'static str> {
    let servers = INSTANCES.iter().filter(|i| opens(i, Role::Issuer));
    std::iter::once("memory")
        .chain(servers.map(|i| i.name))
        .collect()
}

/// The stores, by name: the in-process ones, then every test server of a
/// store backend of the registry.
pub fn stores() -> Vec<&'static str> {
    let servers = INSTANCES.iter().filter(|i| opens(i, Role::Store));
    ["memory", "memory-blob"]
        .into_iter()
        .chain(servers.map(|i| i.name))
        .collect()
}

/// A named issuer's URL on this checkout's servers (registry grammar), with
/// this run's prefix; `None` for `memory` (in-process) and unknown names.
pub fn issuer_url_of(name: &str) -> Option<String> {
    instance(name)
        .filter(|i| opens(i, Role::Issuer))
        .and_then(|i| i.url)
        .map(|url| url())
}

/// The store URL an issuer runs against in the clock runs of the nemesis:
/// its own where its URL opens a store made for this run (one bucket or
/// one table as issuer and store, the simplest deployment), else
/// PostgreSQL's.
pub fn own_store_url_of(name: &str) -> Option<String> {
    instance(name)
        .filter(|i| i.store.is_some() && opens(i, Role::Store))
        .and_then(|i| i.url)
        .map(|url| url())
}

/// A fresh issuer by name, with the TTL its tests use; `None` if skipped.
///
/// # Panics
/// For an unknown name, or a server that does not answer.
pub async fn issuer(name: &str) -> Option<(Arc<dyn TokenIssuer>, Duration)> {
    if name == "memory" {
        return Some((Arc::new(MemoryIssuer::new()), ms(150)));
    }
    let Some(instance) = instance(name).filter(|i| opens(i, Role::Issuer)) else {
        panic!("unknown issuer {name:?}; known: {:?}", issuers());
    };
    let url = instance.url.expect("an issuer is opened by URL")();
    // The store's opener makes the bucket (or table) the URL names.
    if let Some(open_store) = instance.store {
        open_store().await?;
    }
    let issuer = on(instance.server, fencing_tokens::open_issuer(&url)).await?;
    Some((issuer, instance.ttl))
}

/// A fresh store by name; `None` if skipped.
///
/// # Panics
/// For an unknown name, or a server that does not answer.
pub async fn store(name: &str) -> Option<Arc<dyn FencedStore>> {
    match name {
        "memory" => return Some(Arc::new(MemoryStore::new())),
        "memory-blob" => return Some(Arc::new(BlobStore::new(MemoryBlobBackend::new()))),
        _ => {}
    }
    let Some(instance) = instance(name).filter(|i| opens(i, Role::Store)) else {
        panic!("unknown store {name:?}; known: {:?}", stores());
    };
    match (instance.store, instance.url) {
        (Some(open), _) => open().await,
        (None, Some(url)) => on(instance.server, fencing_tokens::open_store(&url())).await,
        (None, None) => panic!("{name}: neither a URL nor an opener"),
    }
}

/// Runs `test` on every name, `concurrency` at a time, and fails naming
/// each one whose run panicked: one test over a list that comes from the
/// registry, instead of a test function per backend written out by hand.
///
/// # Panics
/// If any run panicked, with every failure.
pub async fn for_each<F, Fut>(names: Vec<&'static str>, concurrency: usize, test: F)
where
    F: Fn(&'static str) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let limit = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut runs = Vec::new();
    for name in names {
        let permit = limit.clone().acquire_owned();
        let run = test(name);
        runs.push((
            name,
            tokio::spawn(async move {
                let _permit = permit.await.expect("the semaphore stays open");
                run.await;
            }),
        ));
    }
    let mut failures = Vec::new();
    for (name, run) in runs {
        if let Err(e) = run.await {
            let message = match e.try_into_panic() {
                Ok(panic) => panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            failures.push(format!("{name}: {message}"));
        }
    }
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n"));
}

/// A SQL store on this run's tables at `url` (e.g. through a proxy).
///
/// # Panics
/// If the database does not answer.
pub async fn sql_store_at(url: &str) -> SqlStore {
    let config = SqlConfig::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    let db = config
        .connect_db()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    SqlStore::new(db.with_tables(tables()))
        .await
        .expect("table")
}

/// An S3 store on this run's bucket at `FENCING_S3_ENDPOINT` (moto).
pub async fn s3() -> Option<fencing_s3::S3Store> {
    s3_at(&env::S3.endpoint()).await
}

/// An S3 store on this run's bucket at `endpoint` (e.g. through a proxy).
///
/// # Panics
/// If the emulator does not answer (naming `FENCING_S3_ENDPOINT`).
pub async fn s3_at(endpoint: &str) -> Option<fencing_s3::S3Store> {
    on(
        Some(&env::S3),
        fencing_s3::emulator::store(endpoint, &bucket_name()),
    )
    .await
}

/// A GCS store on this run's bucket at `FENCING_GCS_ENDPOINT`
/// (fake-gcs-server).
///
/// # Panics
/// If the emulator does not answer.
pub async fn gcs() -> Option<fencing_gcs::GcsStore> {
    on(
        Some(&env::GCS),
        fencing_gcs::emulator::store(&env::GCS.endpoint(), &bucket_name()),
    )
    .await
}

/// An Azure Blob store on this run's container at `FENCING_AZURE_ENDPOINT`
/// (Azurite).
///
/// # Panics
/// If the emulator does not answer.
pub async fn azure() -> Option<fencing_azure::AzureStore> {
    on(
        Some(&env::AZURE),
        fencing_azure::emulator::store(&env::AZURE.endpoint(), &bucket_name()),
    )
    .await
}

/// A DynamoDB store on this run's table at `FENCING_DYNAMODB_ENDPOINT`
/// (moto), creating the table.
///
/// # Panics
/// If the emulator does not answer.
pub async fn dynamodb() -> Option<fencing_dynamodb::DynamoStore> {
    on(
        Some(&env::DYNAMODB),
        fencing_dynamodb::emulator::store(&env::DYNAMODB.endpoint(), &bucket_name()),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_of_the_registry_has_a_test_server() {
        for backend in fencing_tokens::registry::BACKENDS {
            assert!(
                INSTANCES.iter().any(|i| i.backend == backend.name),
                "backend {} has no test server: add its row to INSTANCES (integration/src/lib.rs), \
                 its server to integration/services.sh and a Server to fencing_harness::env",
                backend.name
            );
        }
        for instance in INSTANCES {
            assert!(
                fencing_tokens::registry::BACKENDS
                    .iter()
                    .any(|d| d.name == instance.backend),
                "{} names no backend of the registry",
                instance.name
            );
        }
    }

    #[test]
    fn the_lists_come_from_the_registry() {
        assert_eq!(
            issuers(),
            [
                "memory",
                "sqlite",
                "postgres",
                "mariadb",
                "redis",
                "etcd",
                "zookeeper",
                "s3",
                "gcs",
                "azure",
                "dynamodb"
            ]
        );
        assert_eq!(
            stores(),
            [
                "memory",
                "memory-blob",
                "sqlite",
                "postgres",
                "mariadb",
                "s3",
                "gcs",
                "azure",
                "dynamodb"
            ]
        );
        for name in issuers().into_iter().skip(1) {
            let url = issuer_url_of(name).unwrap();
            assert!(
                fencing_tokens::registry::backend_for(&url).is_some(),
                "{url}"
            );
        }
    }
}
