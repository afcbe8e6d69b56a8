//! Backends named by URL: the one place a URL becomes an issuer or a store.
//!
//! Each scheme is one match arm, present when its feature is enabled:
//!
//! | URL | feature | opens |
//! | --- | --- | --- |
//! | `etcd://HOST:PORT[,HOST:PORT…]` | `etcd` | issuer |
//! | `zk://HOST:PORT[,HOST:PORT…][/PREFIX]` | `zookeeper` | issuer |
//! | `redis://HOST:PORT[/DB][?volatile=1]` | `redis` | issuer |
//! | `postgres://…`, `mysql://…`, `mariadb://…`, `sqlite://PATH` | `postgres`, `mysql`, `sqlite` | store and issuer |
//! | `s3://BUCKET[?region=R&endpoint=URL]` | `s3` | store |
//! | `gs://BUCKET[?endpoint=URL]` | `gcs` | store |
//! | `az://CONTAINER?endpoint=URL&sas=TOKEN` | `azure` | store |
//!
//! Object-store URLs take `adopt_unfenced=true` (take over objects written
//! without fencing at mark 0) and `emulator=true` (use the local emulator's
//! well-known test credentials: moto, fake-gcs-server, Azurite). Emulator
//! credentials are never a fallback for missing real ones.

use std::sync::Arc;

use fencing_core::{Error, FencedStore, TokenIssuer};

/// The issuer URLs `fence` understands, for help texts.
pub const ISSUER_URLS: &str = "sqlite://PATH, postgres://…, mysql://… (mariadb://…), \
     redis://HOST:PORT[/DB][?volatile=1], etcd://HOST:PORT[,HOST:PORT…], zk://HOST:PORT[,HOST:PORT…][/PREFIX]";

/// The store URLs `fence` understands, for help texts.
pub const STORE_URLS: &str = "sqlite://PATH, postgres://…, mysql://… (mariadb://…), \
     s3://BUCKET[?endpoint=URL&region=R], gs://BUCKET[?endpoint=URL], az://CONTAINER?endpoint=URL[&sas=TOKEN]; \
     the object stores take &adopt_unfenced=true to take over objects written without fencing at mark 0";

/// Schemes that name an issuer.
const ISSUER_SCHEMES: &[&str] = &[
    "sqlite",
    "postgres",
    "postgresql",
    "mysql",
    "mariadb",
    "redis",
    "rediss",
    "etcd",
    "zk",
    "zookeeper",
];

/// Schemes that name a store.
const STORE_SCHEMES: &[&str] = &[
    "sqlite",
    "postgres",
    "postgresql",
    "mysql",
    "mariadb",
    "s3",
    "gs",
    "az",
];

fn scheme(url: &str) -> &str {
    url.split_once(':').map_or("", |(s, _)| s)
}

/// What a URL can be opened as: (a store, an issuer). An SQL URL is both.
pub fn roles(url: &str) -> (bool, bool) {
    let scheme = scheme(url);
    (
        STORE_SCHEMES.contains(&scheme),
        ISSUER_SCHEMES.contains(&scheme),
    )
}

/// The URL with `volatile=1` added, for opening a Redis issuer that
/// [`open_issuer`] refused, to inspect it (`fence doctor`).
pub fn with_volatile(url: &str) -> Option<String> {
    matches!(scheme(url), "redis" | "rediss").then(|| {
        let (base, _) = take_flag(url, "volatile");
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}volatile=1")
    })
}

/// Opens the issuer a URL names.
pub async fn open_issuer(url: &str) -> Result<Arc<dyn TokenIssuer>, Error> {
    match scheme(url) {
        #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
        "sqlite" | "postgres" | "postgresql" | "mysql" | "mariadb" => {
            Ok(Arc::new(fencing_sql::SqlIssuer::connect(url).await?))
        }
        #[cfg(feature = "redis")]
        "redis" | "rediss" => {
            let (url, volatile) = take_flag(url, "volatile");
            let durability = if volatile {
                fencing_redis::Durability::AcceptVolatileCounter
            } else {
                fencing_redis::Durability::Required
            };
            Ok(Arc::new(
                fencing_redis::RedisIssuer::connect(&url, durability).await?,
            ))
        }
        #[cfg(feature = "etcd")]
        "etcd" => {
            let hosts = url.trim_start_matches("etcd://").trim_end_matches('/');
            let endpoints: Vec<String> = hosts.split(',').map(|h| format!("http://{h}")).collect();
            Ok(Arc::new(
                fencing_etcd::EtcdIssuer::connect(&endpoints).await?,
            ))
        }
        #[cfg(feature = "zookeeper")]
        "zk" | "zookeeper" => {
            let rest = url.split_once("://").map_or("", |(_, r)| r);
            let (hosts, prefix) = rest
                .split_once('/')
                .map_or((rest, None), |(h, p)| (h, Some(format!("/{p}"))));
            let issuer = match prefix {
                Some(prefix) => {
                    fencing_zookeeper::ZkIssuer::connect_with(
                        hosts,
                        &prefix,
                        fencing_zookeeper::TokenSource::default(),
                    )
                    .await?
                }
                None => fencing_zookeeper::ZkIssuer::connect(hosts).await?,
            };
            Ok(Arc::new(issuer))
        }
        _ => Err(Error::invalid_input(format!(
            "unsupported issuer URL {url:?}; expected one of: {ISSUER_URLS}"
        ))),
    }
}

/// Opens the store a URL names.
pub async fn open_store(url: &str) -> Result<Arc<dyn FencedStore>, Error> {
    match scheme(url) {
        #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
        "sqlite" | "postgres" | "postgresql" | "mysql" | "mariadb" => {
            Ok(Arc::new(fencing_sql::SqlStore::connect(url).await?))
        }
        #[cfg(feature = "s3")]
        "s3" => {
            let (bucket, query) = bucket_and_query(url)?;
            let adopt = adopt_unfenced(&query)?;
            Ok(Arc::new(
                fencing_s3::S3Backend::new(s3_client(&query)?, bucket)
                    .into_store()
                    .adopt_unfenced(adopt),
            ))
        }
        #[cfg(feature = "gcs")]
        "gs" => {
            let (bucket, query) = bucket_and_query(url)?;
            let adopt = adopt_unfenced(&query)?;
            let client = match query.get("endpoint") {
                Some(endpoint) => fencing_gcs::emulator::client(endpoint).await?,
                None => fencing_gcs::google_cloud_storage::client::Storage::builder()
                    .build()
                    .await
                    .map_err(|e| Error::backend("gcs", false, e))?,
            };
            Ok(Arc::new(
                fencing_gcs::GcsBackend::new(client, bucket)
                    .into_store()
                    .adopt_unfenced(adopt),
            ))
        }
        #[cfg(feature = "azure")]
        "az" => {
            let (container, query) = bucket_and_query(url)?;
            let adopt = adopt_unfenced(&query)?;
            let endpoint = query.get("endpoint").ok_or_else(|| {
                Error::invalid_input("az:// needs ?endpoint=https://ACCOUNT.blob.core.windows.net")
            })?;
            let backend = match query.get("sas") {
                Some(sas) => {
                    let url = format!("{}/{container}?{sas}", endpoint.trim_end_matches('/'));
                    let url = url
                        .parse()
                        .map_err(|e| Error::invalid_input(format!("bad Azure URL: {e}")))?;
                    fencing_azure::AzureBackend::new(url, None, None)?
                }
                // No SAS: Azurite's well-known development account.
                None => fencing_azure::azurite::backend(endpoint, &container, None)?,
            };
            Ok(Arc::new(backend.into_store().adopt_unfenced(adopt)))
        }
        _ => Err(Error::invalid_input(format!(
            "unsupported store URL {url:?}; expected one of: {STORE_URLS}"
        ))),
    }
}

/// `scheme://NAME?k=v&…` → (`NAME`, the query pairs).
#[cfg(any(feature = "s3", feature = "gcs", feature = "azure"))]
fn bucket_and_query(
    url: &str,
) -> Result<(String, std::collections::HashMap<String, String>), Error> {
    let rest = url.split_once("://").map_or("", |(_, r)| r);
    let (name, query) = rest.split_once('?').unwrap_or((rest, ""));
    let name = name.trim_end_matches('/');
    if name.is_empty() || name.contains('/') {
        return Err(Error::invalid_input(format!(
            "{url:?}: expected scheme://BUCKET[?options]"
        )));
    }
    let pairs = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect();
    Ok((name.to_owned(), pairs))
}

/// `adopt_unfenced=true|false` (also 1/0, yes/no; absent: false). Anything
/// else is refused rather than read as "no": a typo must not look like a choice.
#[cfg(any(feature = "s3", feature = "gcs", feature = "azure"))]
fn adopt_unfenced(query: &std::collections::HashMap<String, String>) -> Result<bool, Error> {
    match query.get("adopt_unfenced").map(String::as_str) {
        None | Some("false" | "0" | "no") => Ok(false),
        Some("true" | "1" | "yes" | "") => Ok(true),
        Some(other) => Err(Error::invalid_input(format!(
            "adopt_unfenced={other:?}: expected true or false"
        ))),
    }
}

/// An S3 client: credentials from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`
/// (and `AWS_SESSION_TOKEN`), region from `?region=` or `AWS_REGION`; with
/// `?endpoint=` and no credentials set, the emulator's test credentials.
#[cfg(feature = "s3")]
fn s3_client(
    query: &std::collections::HashMap<String, String>,
) -> Result<fencing_s3::aws_sdk_s3::Client, Error> {
    use fencing_s3::aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
    let endpoint = query.get("endpoint");
    let (Ok(key), Ok(secret)) = (
        std::env::var("AWS_ACCESS_KEY_ID"),
        std::env::var("AWS_SECRET_ACCESS_KEY"),
    ) else {
        return match endpoint {
            Some(endpoint) => Ok(fencing_s3::emulator::client(endpoint)),
            None => Err(Error::invalid_input(
                "s3:// needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or ?endpoint= for an emulator)",
            )),
        };
    };
    let region = query
        .get("region")
        .cloned()
        .or_else(|| std::env::var("AWS_REGION").ok())
        .unwrap_or_else(|| "us-east-1".to_owned());
    let credentials = Credentials::new(
        key,
        secret,
        std::env::var("AWS_SESSION_TOKEN").ok(),
        None,
        "fence",
    );
    let mut config = fencing_s3::aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region))
        .credentials_provider(credentials);
    if let Some(endpoint) = endpoint {
        config = config.endpoint_url(endpoint).force_path_style(true);
    }
    Ok(fencing_s3::aws_sdk_s3::Client::from_conf(config.build()))
}

/// Removes `name=1|true|yes` (or a bare `name`) from a URL's query string.
fn take_flag(url: &str, name: &str) -> (String, bool) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), false);
    };
    let mut found = false;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, "1"));
            let ours = key == name;
            found |= ours && matches!(value, "1" | "true" | "yes");
            !ours
        })
        .collect();
    let url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    (url, found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "s3")]
    #[test]
    fn adopt_unfenced_is_parsed_strictly() {
        let query = |q: &str| bucket_and_query(&format!("s3://b?{q}")).unwrap().1;
        assert!(!adopt_unfenced(&query("endpoint=x")).unwrap());
        assert!(adopt_unfenced(&query("adopt_unfenced=true")).unwrap());
        assert!(adopt_unfenced(&query("endpoint=x&adopt_unfenced=1")).unwrap());
        assert!(!adopt_unfenced(&query("adopt_unfenced=false")).unwrap());
        assert!(adopt_unfenced(&query("adopt_unfenced=ture")).is_err());
    }

    #[test]
    fn roles_by_scheme() {
        assert_eq!(roles("sqlite:///tmp/x"), (true, true));
        assert_eq!(roles("s3://b"), (true, false));
        assert_eq!(roles("redis://h:1"), (false, true));
        assert_eq!(roles("ftp://h"), (false, false));
        assert_eq!(
            with_volatile("redis://h:1?volatile=0").as_deref(),
            Some("redis://h:1?volatile=1")
        );
        assert_eq!(with_volatile("s3://b"), None);
    }

    #[test]
    fn flags_are_taken_out_of_the_query() {
        assert_eq!(
            take_flag("redis://h:1?volatile=1", "volatile"),
            ("redis://h:1".into(), true)
        );
        assert_eq!(
            take_flag("redis://h:1?a=b&volatile=true", "volatile"),
            ("redis://h:1?a=b".into(), true)
        );
        assert_eq!(
            take_flag("redis://h:1?volatile=0", "volatile"),
            ("redis://h:1".into(), false)
        );
        assert_eq!(
            take_flag("redis://h:1", "volatile"),
            ("redis://h:1".into(), false)
        );
    }
}
