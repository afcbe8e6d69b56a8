//! Backends named by URL: the one place a URL becomes an issuer or a store.
//!
//! Each scheme is one match arm, present when its feature is enabled, that
//! hands the URL to its crate's config (`XConfig::from_url(url)?.connect()`):
//! the adapter parses and validates its own URL, and refuses options it does
//! not know. Adding a backend is one crate, one feature, one arm here (and
//! its line in [`ISSUER_URLS`] or [`STORE_URLS`]).
//!
//! | scheme | feature | opens | config |
//! | --- | --- | --- | --- |
//! | `etcd://` | `etcd` | issuer | `fencing_etcd::EtcdConfig` |
//! | `zk://`, `zookeeper://` | `zookeeper` | issuer | `fencing_zookeeper::ZkConfig` |
//! | `redis://`, `rediss://` | `redis` | issuer | `fencing_redis::RedisConfig` |
//! | `postgres://`, `mysql://`, `mariadb://`, `sqlite://` | `postgres`, `mysql`, `sqlite` | store and issuer | `fencing_sql::SqlConfig` |
//! | `s3://` | `s3` | store | `fencing_s3::S3Config` |
//! | `gs://` | `gcs` | store | `fencing_gcs::GcsConfig` |
//! | `az://` | `azure` | store | `fencing_azure::AzureConfig` |
//!
//! Every backend opened here is wrapped in
//! [`Instrumented`]: its calls record
//! the metrics of `docs/metrics.md` and open `tracing` spans carrying the
//! resource or key and the token. With no `metrics` recorder and no
//! `tracing` subscriber installed that costs a few atomic loads and a
//! small allocation per call, nothing next to one network round trip; in
//! return, installing an exporter is all an application does to see stale
//! refusals, grants and lost leases of every backend. Do not wrap what
//! these return again.
//!
//! Emulator credentials (moto's test keys, fake-gcs-server's anonymous
//! access, Azurite's development account) are used only with
//! `emulator=true` in the URL, never as a fallback for missing real ones.

use std::sync::Arc;

use fencing_core::instrument::Instrumented;
use fencing_core::redact;
use fencing_core::{Error, FencedStore, TokenIssuer};

/// The issuer URL grammar, one line per backend (for help texts).
pub const ISSUER_URLS: &str = "\
sqlite://PATH, postgres://USER:PASS@HOST/DB, mysql://… (mariadb://…)  [&fencing_table_prefix=P]
    [&fencing_accept_volatile_commits=true]  (a server whose commits a crash can lose)
redis://[USER:PASS@]HOST:PORT[/DB][?volatile=true | ?replicas=N&wait=500ms][&prefix=P]  (rediss://: TLS)
etcd://[USER:PASS@]HOST:PORT[,HOST:PORT…][?prefix=P&timeout=2s&min_ttl=1s]
zk://[USER:PASS@]HOST:PORT[,HOST:PORT…][/PREFIX][?token=czxid|cversion]  (USER:PASS: digest auth)
TLS on every one but sqlite: sslmode=disable|prefer|require|verify-ca|verify-full (each takes those its client can), sslrootcert=CA.pem,
    sslcert=CERT.pem&sslkey=KEY.pem (a CA or a certificate alone means verify-full)";

/// The store URL grammar, one line per backend (for help texts).
pub const STORE_URLS: &str = "\
sqlite://PATH, postgres://USER:PASS@HOST/DB, mysql://… (mariadb://…)  [&fencing_table_prefix=P]
s3://BUCKET[?region=R&endpoint=URL&path_style=true&emulator=true]  (AWS's credential chain)
gs://BUCKET[?endpoint=URL&emulator=true]  (application default credentials)
az://CONTAINER?endpoint=URL|account=NAME[&sas=TOKEN&emulator=true]  (or AZURE_STORAGE_CONNECTION_STRING,
    AZURE_STORAGE_SAS_TOKEN, AZURE_STORAGE_KEY)
s3/gs/az take adopt_unfenced=true (take over objects written without fencing, at mark 0) and
emulator=true (a local emulator's well-known test credentials; never used otherwise);
s3 takes sslrootcert=CA.pem (an https:// endpoint with a private CA); SQL stores take the TLS options above";

/// What each scheme is: (scheme, feature, store, issuer).
const SCHEMES: &[(&str, &str, bool, bool)] = &[
    ("sqlite", "sqlite", true, true),
    ("postgres", "postgres", true, true),
    ("postgresql", "postgres", true, true),
    ("mysql", "mysql", true, true),
    ("mariadb", "mysql", true, true),
    ("redis", "redis", false, true),
    ("rediss", "redis", false, true),
    ("etcd", "etcd", false, true),
    ("zk", "zookeeper", false, true),
    ("zookeeper", "zookeeper", false, true),
    ("s3", "s3", true, false),
    ("gs", "gcs", true, false),
    ("az", "azure", true, false),
];

fn scheme(url: &str) -> &str {
    url.split_once(':').map_or("", |(s, _)| s)
}

/// What a URL can be opened as: (a store, an issuer). An SQL URL is both.
pub fn roles(url: &str) -> (bool, bool) {
    SCHEMES
        .iter()
        .find(|(s, ..)| *s == scheme(url))
        .map_or((false, false), |&(_, _, store, issuer)| (store, issuer))
}

/// The URL with `volatile=true` in place of any durability option, for
/// opening a Redis issuer that [`open_issuer`] refused, to inspect it
/// (`fence doctor`).
pub fn with_volatile(url: &str) -> Option<String> {
    matches!(scheme(url), "redis" | "rediss").then(|| {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut pairs: Vec<&str> = query
            .split('&')
            .filter(|p| {
                let key = p.split_once('=').map_or(*p, |(k, _)| k);
                !p.is_empty() && !matches!(key, "volatile" | "replicas" | "wait")
            })
            .collect();
        pairs.push("volatile=true");
        format!("{base}?{}", pairs.join("&"))
    })
}

/// The error for a scheme this build cannot open as `role`.
fn unsupported(url: &str, role: &str, grammar: &str) -> Error {
    let scheme = scheme(url);
    match SCHEMES.iter().find(|(s, ..)| *s == scheme) {
        Some((_, feature, store, issuer))
            if (role == "store" && *store) || (role == "issuer" && *issuer) =>
        {
            Error::invalid_input(format!(
                "{scheme}:// needs the `{feature}` feature of the `fencing` crate"
            ))
        }
        _ => Error::invalid_input(format!(
            "{:?} is not a {role} URL; expected one of:\n{grammar}",
            redact(url)
        )),
    }
}

/// Opens the issuer a URL names.
///
/// # Errors
/// [`Error::InvalidInput`] for a URL no enabled backend takes, or one its
/// backend refuses; otherwise what the backend's `connect` returns.
pub async fn open_issuer(url: &str) -> Result<Arc<dyn TokenIssuer>, Error> {
    match scheme(url) {
        #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
        "sqlite" | "postgres" | "postgresql" | "mysql" | "mariadb" => issuer(
            fencing_sql::SqlConfig::from_url(url)?
                .connect_issuer()
                .await?,
        ),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => issuer(fencing_redis::RedisConfig::from_url(url)?.connect().await?),
        #[cfg(feature = "etcd")]
        "etcd" => issuer(fencing_etcd::EtcdConfig::from_url(url)?.connect().await?),
        #[cfg(feature = "zookeeper")]
        "zk" | "zookeeper" => issuer(
            fencing_zookeeper::ZkConfig::from_url(url)?
                .connect()
                .await?,
        ),
        _ => Err(unsupported(url, "issuer", ISSUER_URLS)),
    }
}

/// Opens the store a URL names.
///
/// # Errors
/// [`Error::InvalidInput`] for a URL no enabled backend takes, or one its
/// backend refuses (an object store without credentials names
/// `emulator=true`); otherwise what the backend's `connect` returns.
pub async fn open_store(url: &str) -> Result<Arc<dyn FencedStore>, Error> {
    match scheme(url) {
        #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
        "sqlite" | "postgres" | "postgresql" | "mysql" | "mariadb" => store(
            fencing_sql::SqlConfig::from_url(url)?
                .connect_store()
                .await?,
        ),
        #[cfg(feature = "s3")]
        "s3" => store(fencing_s3::S3Config::from_url(url)?.connect().await?),
        #[cfg(feature = "gcs")]
        "gs" => store(fencing_gcs::GcsConfig::from_url(url)?.connect().await?),
        #[cfg(feature = "azure")]
        "az" => store(fencing_azure::AzureConfig::from_url(url)?.connect().await?),
        _ => Err(unsupported(url, "store", STORE_URLS)),
    }
}

/// An issuer as every registry arm returns it: instrumented, shared.
#[allow(dead_code)] // with no issuer feature enabled
fn issuer(inner: impl TokenIssuer + 'static) -> Result<Arc<dyn TokenIssuer>, Error> {
    Ok(Arc::new(Instrumented::new(inner)))
}

/// A store as every registry arm returns it: instrumented, shared.
#[allow(dead_code)] // with no store feature enabled
fn store(inner: impl FencedStore + 'static) -> Result<Arc<dyn FencedStore>, Error> {
    Ok(Arc::new(Instrumented::new(inner)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_by_scheme() {
        assert_eq!(roles("sqlite:///tmp/x"), (true, true));
        assert_eq!(roles("s3://b"), (true, false));
        assert_eq!(roles("redis://h:1"), (false, true));
        assert_eq!(roles("ftp://h"), (false, false));
        assert_eq!(
            with_volatile("redis://h:1?volatile=0&prefix=p").as_deref(),
            Some("redis://h:1?prefix=p&volatile=true")
        );
        assert_eq!(
            with_volatile("redis://h:1?replicas=1&wait=1s").as_deref(),
            Some("redis://h:1?volatile=true")
        );
        assert_eq!(with_volatile("s3://b"), None);
    }

    #[tokio::test]
    async fn unknown_schemes_name_the_grammar_and_hide_secrets() {
        let e = open_store("ftp://u:secret@h/x").await.unwrap_err();
        let message = e.to_string();
        assert!(matches!(e, Error::InvalidInput { .. }));
        assert!(
            message.contains("s3://BUCKET") && !message.contains("secret"),
            "{message}"
        );
        let e = open_issuer("s3://b").await.unwrap_err();
        assert!(
            e.to_string().contains("etcd://[USER:PASS@]HOST:PORT"),
            "{e}"
        );
    }
}
