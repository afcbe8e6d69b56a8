//! One module per backend of the registry, where the tests run it: its
//! test instance (server, URL, TTL, how its store is opened), a URL of it
//! where nothing listens (the "server down" case of the bad-input tests)
//! and, with the `bench` feature, what the bench compares its fenced
//! operations with (`plain`).
//!
//! [`ALL`] lists the modules once; the lists of issuers and stores
//! (`crate::issuers`, `crate::stores`), the bad-input tests and the bench's
//! backends all come from it. A new backend is its module here and its
//! name in the `backends!` list below.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use fencing_harness::env::Server;
use fencing_sql::Tables;
use fencing_tokens::FencedStore;
use fencing_tokens::registry::Role;

use crate::run_prefix;

#[cfg(feature = "bench")]
pub mod plain;

/// Declares each backend's module and lists it in `ALL`: a backend is
/// named once.
macro_rules! backends {
    ($($name:ident),* $(,)?) => {
        $(pub mod $name;)*

        /// Every backend, in the registry's order
        /// (`fencing_tokens::registry`): the order of [`crate::issuers`]
        /// and [`crate::stores`].
        pub const ALL: &[&Backend] = &[$(&$name::BACKEND),*];
    };
}

backends!(
    sqlite, postgres, mariadb, redis, etcd, zookeeper, s3, gcs, azure, dynamodb,
);

/// A store being opened: `None` if the run skips its server.
pub type Opening<T> = Pin<Box<dyn Future<Output = Option<Arc<T>>> + Send>>;

/// Where the tests run a backend of the registry: one test server (or
/// none: embedded). What it opens (issuer, store, both) is its
/// descriptor's (`fencing_tokens::registry`), not this one's.
#[derive(Debug)]
pub struct Backend {
    /// The name tests, `FENCING_SKIP` and the bench's `--only` use
    /// (`postgres`).
    pub name: &'static str,
    /// Its descriptor's name in the registry (`sql`).
    pub descriptor: &'static str,
    /// The server it needs (`None`: embedded).
    pub server: Option<&'static Server>,
    /// Its URL in the registry's grammar, on this run's prefix.
    pub url: fn() -> String,
    /// The lease TTL its issuer's tests use (zero for a store only).
    pub ttl: Duration,
    /// Opens its store another way than by URL (an emulator's bucket must
    /// be made first).
    pub store: Option<fn() -> Opening<dyn FencedStore>>,
    /// A URL of it where nothing listens: opening it, or the first call
    /// after (for a client that connects lazily), must fail with a
    /// retryable backend error, within seconds. `None` for an embedded
    /// backend, and for a client whose default retry policy keeps trying a
    /// refused connection for minutes (the tests would wait it out).
    pub unreachable: Option<&'static str>,
    /// What the bench compares its fenced operations with.
    #[cfg(feature = "bench")]
    pub bench: plain::Bench,
}

impl Backend {
    /// Whether its descriptor opens `role` (an issuer, a store).
    pub fn opens(&self, role: Role) -> bool {
        fencing_tokens::registry::BACKENDS
            .iter()
            .any(|d| d.name == self.descriptor && d.opens(role))
    }
}

/// The backend called `name`.
pub fn find(name: &str) -> Option<&'static Backend> {
    ALL.iter().copied().find(|b| b.name == name)
}

/// This run's SQL tables.
pub(crate) fn tables() -> Tables {
    Tables::from_prefix(&format!("{}_", run_prefix())).expect("valid prefix")
}

/// The SQL URL option that puts a store or issuer on this run's tables.
fn table_prefix() -> String {
    format!("fencing_table_prefix={}_", run_prefix())
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

/// Connects `make`, failing loudly (or `None` if the run skips `server`).
pub(crate) async fn on<T, F>(server: Option<&Server>, make: F) -> Option<T>
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_of_the_registry_has_a_test_server() {
        for descriptor in fencing_tokens::registry::BACKENDS {
            assert!(
                ALL.iter().any(|b| b.descriptor == descriptor.name),
                "backend {} has no test server: add its module to integration/src/backends/ \
                 (and its line to ALL in backends/mod.rs), its server spec to \
                 integration/servers (fencing_servers::specs)",
                descriptor.name
            );
        }
        for backend in ALL {
            assert!(
                fencing_tokens::registry::BACKENDS
                    .iter()
                    .any(|d| d.name == backend.descriptor),
                "{} names no backend of the registry",
                backend.name
            );
            assert_eq!(
                find(backend.name).map(|b| b.descriptor),
                Some(backend.descriptor),
                "{} is listed twice",
                backend.name
            );
            assert!(
                backend.server.is_some() || backend.unreachable.is_none(),
                "{}: an embedded backend has no URL where nothing listens",
                backend.name
            );
        }
    }
}
