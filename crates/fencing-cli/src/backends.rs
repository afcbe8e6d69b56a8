//! Backends named by URL.

use std::sync::Arc;

use fencing::{Error, FencedStore, TokenIssuer};

/// The issuer URLs `fence` understands, for help texts.
pub(crate) const ISSUER_URLS: &str = "sqlite://PATH, postgres://…, mysql://… (mariadb://…), \
     redis://HOST:PORT[/DB][?volatile=1], etcd://HOST:PORT[,HOST:PORT…], zk://HOST:PORT[,HOST:PORT…][/PREFIX]";

/// The store URLs `fence` understands, for help texts.
pub(crate) const STORE_URLS: &str = "sqlite://PATH, postgres://…, mysql://… (mariadb://…)";

fn scheme(url: &str) -> &str {
    url.split_once(':').map_or("", |(s, _)| s)
}

/// Opens the issuer a URL names.
pub(crate) async fn issuer(url: &str) -> Result<Arc<dyn TokenIssuer>, Error> {
    match scheme(url) {
        "sqlite" | "postgres" | "postgresql" | "mysql" | "mariadb" => {
            Ok(Arc::new(fencing_sql::SqlIssuer::connect(url).await?))
        }
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
        "etcd" => {
            let hosts = url.trim_start_matches("etcd://").trim_end_matches('/');
            let endpoints: Vec<String> = hosts.split(',').map(|h| format!("http://{h}")).collect();
            Ok(Arc::new(
                fencing_etcd::EtcdIssuer::connect(&endpoints).await?,
            ))
        }
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
pub(crate) async fn store(url: &str) -> Result<Arc<dyn FencedStore>, Error> {
    match scheme(url) {
        "sqlite" | "postgres" | "postgresql" | "mysql" | "mariadb" => {
            Ok(Arc::new(fencing_sql::SqlStore::connect(url).await?))
        }
        _ => Err(Error::invalid_input(format!(
            "unsupported store URL {url:?}; expected one of: {STORE_URLS}"
        ))),
    }
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
