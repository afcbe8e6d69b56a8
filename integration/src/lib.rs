//! Every issuer and every store of the workspace, by name, on the servers of
//! `integration/services.sh`: what the cross-backend matrix, the fault tests
//! and the benchmarks iterate over.
//!
//! A backend whose server does not answer fails loudly (naming the server
//! and `integration/services.sh up`); `FENCING_SKIP=name,…` skips it on
//! request. All names of one run share a random prefix.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fencing::memory::{MemoryBlobBackend, MemoryIssuer, MemoryStore};
use fencing::{FencedStore, TokenIssuer};
use fencing_core::adapter::blob::BlobStore;
use fencing_harness::env::{self, Server, with_option};
use fencing_sql::{Db, SqlStore, Tables};

pub mod candidate;
pub mod nemesis;

/// The issuers, by name.
pub const ISSUERS: &[&str] = &[
    "memory",
    "sqlite",
    "postgres",
    "mariadb",
    "redis",
    "etcd",
    "zookeeper",
];

/// The stores, by name.
pub const STORES: &[&str] = &[
    "memory",
    "memory-blob",
    "sqlite",
    "postgres",
    "mariadb",
    "s3",
    "gcs",
    "azure",
];

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
    Tables::with_prefix(&format!("{}_", run_prefix())).expect("valid prefix")
}

fn sqlite_url() -> String {
    let path = std::env::temp_dir().join(format!("fencing-integration-{}.sqlite", run_prefix()));
    format!("sqlite://{}", path.display())
}

/// Connects `make`, failing loudly (or `None` if the run skips `server`).
async fn on<T, F>(server: Option<&Server>, make: F) -> Option<T>
where
    F: Future<Output = fencing::Result<T>>,
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

/// A backend's URL in the registry's grammar (`fencing::registry`), with
/// this run's prefix, and the server it needs (`None`: embedded).
fn issuer_url(name: &str) -> Option<(Option<&'static Server>, String)> {
    let table_prefix = format!("fencing_table_prefix={}_", run_prefix());
    Some(match name {
        "sqlite" => (None, with_option(&sqlite_url(), &table_prefix)),
        "postgres" => (
            Some(&env::POSTGRES),
            with_option(&env::POSTGRES.endpoint(), &table_prefix),
        ),
        "mariadb" => (
            Some(&env::MYSQL),
            with_option(&env::MYSQL.endpoint(), &table_prefix),
        ),
        "redis" => (
            Some(&env::REDIS_AOF),
            with_option(
                &env::REDIS_AOF.endpoint(),
                &format!("prefix={}:", run_prefix()),
            ),
        ),
        "etcd" => (
            Some(&env::ETCD),
            format!(
                "etcd://{}?prefix={}/",
                env::ETCD.endpoint().replace("http://", ""),
                run_prefix()
            ),
        ),
        "zookeeper" => (
            Some(&env::ZOOKEEPER),
            format!("zk://{}/{}", env::ZOOKEEPER.endpoint(), run_prefix()),
        ),
        _ => return None,
    })
}

/// A named issuer's URL on this checkout's servers (registry grammar), with
/// this run's prefix; `None` for `memory` (in-process) and unknown names.
pub fn issuer_url_of(name: &str) -> Option<String> {
    issuer_url(name).map(|(_, url)| url)
}

/// A fresh issuer by name, with the TTL its tests use; `None` if skipped.
///
/// # Panics
/// For an unknown name, or a server that does not answer.
pub async fn issuer(name: &str) -> Option<(Arc<dyn TokenIssuer>, Duration)> {
    let ms = Duration::from_millis;
    let ttl = match name {
        "memory" => return Some((Arc::new(MemoryIssuer::new()), ms(150))),
        "sqlite" | "postgres" | "mariadb" => ms(400),
        "redis" => ms(300),
        "etcd" | "zookeeper" => Duration::from_secs(2),
        other => panic!("unknown issuer {other:?}; known: {ISSUERS:?}"),
    };
    let (server, url) = issuer_url(name).expect("every named issuer has a URL");
    let issuer = on(server, fencing::open_issuer(&url)).await?;
    Some((issuer, ttl))
}

/// A fresh store by name; `None` if skipped.
///
/// # Panics
/// For an unknown name, or a server that does not answer.
pub async fn store(name: &str) -> Option<Arc<dyn FencedStore>> {
    Some(match name {
        "memory" => Arc::new(MemoryStore::new()),
        "memory-blob" => Arc::new(BlobStore::new(MemoryBlobBackend::new())),
        "sqlite" | "postgres" | "mariadb" => {
            let (server, url) = issuer_url(name).expect("a SQL URL");
            on(server, fencing::open_store(&url)).await?
        }
        "s3" => Arc::new(s3().await?),
        "gcs" => Arc::new(gcs().await?),
        "azure" => Arc::new(azure().await?),
        other => panic!("unknown store {other:?}; known: {STORES:?}"),
    })
}

/// A SQL store on this run's tables at `url` (e.g. through a proxy).
///
/// # Panics
/// If the database does not answer.
pub async fn sql_store_at(url: &str) -> SqlStore {
    let db = Db::connect(url)
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
