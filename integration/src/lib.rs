//! Every issuer and every store of the workspace, by name, on the servers of
//! `integration/services.sh`: what the cross-backend matrix, the fault tests
//! and the benchmarks iterate over.
//!
//! Each backend is a module of [`backends`]; the lists here come from them
//! and the registry. A backend whose server does not answer fails loudly
//! (naming the server and `integration/services.sh up`);
//! `FENCING_SKIP=name,…` skips it on request. All names of one run share a
//! random prefix.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fencing_core::adapter::blob::BlobStore;
use fencing_sql::{SqlConfig, SqlStore};
use fencing_tokens::memory::{MemoryBlobBackend, MemoryIssuer, MemoryStore};
use fencing_tokens::registry::Role;
use fencing_tokens::{FencedStore, TokenIssuer};

use crate::backends::{ALL, Backend, on};

pub mod backends;
pub mod candidate;
pub mod nemesis;
pub mod object_stores;

pub use backends::azure::store as azure;
pub use backends::dynamodb::store as dynamodb;
pub use backends::gcs::store as gcs;
pub use backends::s3::{store as s3, store_at as s3_at};

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

/// The backend called `name`, if it opens `role`.
fn opening(name: &str, role: Role) -> Option<&'static Backend> {
    backends::find(name).filter(|b| b.opens(role))
}

/// The issuers, by name: the in-process one, then every test server of an
/// issuer backend of the registry.
pub fn issuers() -> Vec<&'static str> {
    let servers = ALL.iter().filter(|b| b.opens(Role::Issuer));
    std::iter::once("memory")
        .chain(servers.map(|b| b.name))
        .collect()
}

/// The stores, by name: the in-process ones, then every test server of a
/// store backend of the registry.
pub fn stores() -> Vec<&'static str> {
    let servers = ALL.iter().filter(|b| b.opens(Role::Store));
    ["memory", "memory-blob"]
        .into_iter()
        .chain(servers.map(|b| b.name))
        .collect()
}

/// A named issuer's URL on this checkout's servers (registry grammar), with
/// this run's prefix; `None` for `memory` (in-process) and unknown names.
pub fn issuer_url_of(name: &str) -> Option<String> {
    opening(name, Role::Issuer).map(|b| (b.url)())
}

/// The store URL an issuer runs against in the clock runs of the nemesis:
/// its own where its URL opens a store made for this run (one bucket or
/// one table as issuer and store, the simplest deployment), else
/// PostgreSQL's.
pub fn own_store_url_of(name: &str) -> Option<String> {
    opening(name, Role::Store)
        .filter(|b| b.store.is_some())
        .map(|b| (b.url)())
}

/// A fresh issuer by name, with the TTL its tests use; `None` if skipped.
///
/// # Panics
/// For an unknown name, or a server that does not answer.
pub async fn issuer(name: &str) -> Option<(Arc<dyn TokenIssuer>, Duration)> {
    if name == "memory" {
        return Some((Arc::new(MemoryIssuer::new()), Duration::from_millis(150)));
    }
    let Some(backend) = opening(name, Role::Issuer) else {
        panic!("unknown issuer {name:?}; known: {:?}", issuers());
    };
    // The store's opener makes the bucket (or table) the URL names.
    if let Some(open_store) = backend.store {
        open_store().await?;
    }
    let issuer = on(
        backend.server,
        fencing_tokens::open_issuer(&(backend.url)()),
    )
    .await?;
    Some((issuer, backend.ttl))
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
    let Some(backend) = opening(name, Role::Store) else {
        panic!("unknown store {name:?}; known: {:?}", stores());
    };
    match backend.store {
        Some(open) => open().await,
        None => on(backend.server, fencing_tokens::open_store(&(backend.url)())).await,
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
    SqlStore::new(db.with_tables(backends::tables()))
        .await
        .expect("table")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lists follow the registry: every issuer or store a descriptor
    /// opens has a test server in its list, and every issuer's URL is its
    /// descriptor's. (No names here: a new backend is its module alone.)
    #[test]
    fn the_lists_come_from_the_registry() {
        let (issuers, stores) = (issuers(), stores());
        assert_eq!(issuers[0], "memory");
        assert_eq!(stores[..2], ["memory", "memory-blob"]);
        for descriptor in fencing_tokens::registry::BACKENDS {
            for (role, list) in [(Role::Issuer, &issuers), (Role::Store, &stores)] {
                if descriptor.opens(role) {
                    assert!(
                        ALL.iter()
                            .any(|b| b.descriptor == descriptor.name && list.contains(&b.name)),
                        "{}: no test server in the {role:?} list",
                        descriptor.name
                    );
                }
            }
        }
        for name in issuers.into_iter().skip(1) {
            let url = issuer_url_of(name).unwrap();
            assert_eq!(
                fencing_tokens::registry::backend_for(&url).map(|d| d.name),
                backends::find(name).map(|b| b.descriptor),
                "{url}"
            );
        }
    }
}
