//! [`EtcdConfig`]: an etcd issuer from a URL, the environment or setters.

use std::time::Duration;

use fencing_core::url::{BackendUrl, env, env_any};
use fencing_core::{Error, Result};

use crate::EtcdIssuer;

/// The options an `etcd://` URL takes.
const OPTIONS: &[&str] = &["prefix", "timeout", "min_ttl"];

/// How to reach etcd: parsed from `etcd://HOST:PORT[,HOST:PORT…]`, read
/// from the environment, or set with the `with_*` setters;
/// [`connect`](Self::connect) opens the issuer.
///
/// | URL option | meaning |
/// | --- | --- |
/// | `prefix=P` | the key prefix (default [`DEFAULT_PREFIX`](crate::DEFAULT_PREFIX)) |
/// | `timeout=DURATION` | the per-request timeout (`2s`) |
/// | `min_ttl=DURATION` | the shortest TTL a lease may ask for |
///
/// ```
/// let config = fencing_etcd::EtcdConfig::from_url("etcd://127.0.0.1:2379,127.0.0.1:22379?prefix=jobs/")?;
/// assert_eq!(config.endpoints(), ["http://127.0.0.1:2379", "http://127.0.0.1:22379"]);
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct EtcdConfig {
    endpoints: Vec<String>,
    prefix: Option<String>,
    timeout: Option<Duration>,
    min_ttl: Option<Duration>,
}

impl EtcdConfig {
    /// A config for `endpoints` (`http://host:port`).
    pub fn new<E: Into<String>>(endpoints: impl IntoIterator<Item = E>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Parses `etcd://HOST:PORT[,HOST:PORT…][?prefix=P&timeout=D&min_ttl=D]`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for another scheme, no host, an empty host in
    /// the list, a path, an unknown option (naming the known ones) or a bad
    /// duration.
    pub fn from_url(url: &str) -> Result<Self> {
        let mut url = BackendUrl::parse_as(
            url,
            &["etcd"],
            "an etcd URL (etcd://HOST:PORT[,HOST:PORT…])",
        )?;
        url.expect_no_path("etcd://HOST:PORT[,HOST:PORT…][?prefix=P]")?;
        let mut config = Self::new(hosts(url.authority())?);
        let query = url.query();
        config.prefix = query.take_nonempty("prefix")?;
        config.timeout = query.take_duration("timeout")?;
        config.min_ttl = query.take_duration("min_ttl")?;
        std::mem::take(query).finish(OPTIONS)?;
        Ok(config)
    }

    /// From the environment: `FENCING_ETCD_ENDPOINTS`, else etcdctl's
    /// `ETCDCTL_ENDPOINTS` (comma-separated, with or without `http://`),
    /// and `FENCING_ETCD_PREFIX`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if neither variable is set.
    pub fn from_env() -> Result<Self> {
        let list = env_any(&["FENCING_ETCD_ENDPOINTS", "ETCDCTL_ENDPOINTS"])?;
        let hosts = list
            .split(',')
            .map(|h| h.trim().trim_start_matches("http://"))
            .collect::<Vec<_>>()
            .join(",");
        let mut config = Self::new(self::hosts(&hosts)?);
        config.prefix = env("FENCING_ETCD_PREFIX");
        Ok(config)
    }

    /// The key prefix.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// The per-request timeout.
    #[must_use]
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The shortest TTL a lease may ask for.
    #[must_use]
    pub fn with_min_ttl(mut self, min_ttl: Duration) -> Self {
        self.min_ttl = Some(min_ttl);
        self
    }

    /// The endpoints.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Connects and applies the options.
    ///
    /// # Errors
    /// As [`EtcdIssuer::connect`] and [`EtcdIssuer::with_prefix`].
    pub async fn connect(&self) -> Result<EtcdIssuer> {
        let mut issuer = EtcdIssuer::connect(&self.endpoints).await?;
        if let Some(prefix) = &self.prefix {
            issuer = issuer.with_prefix(prefix.clone())?;
        }
        if let Some(timeout) = self.timeout {
            issuer = issuer.with_operation_timeout(timeout);
        }
        if let Some(min_ttl) = self.min_ttl {
            issuer = issuer.with_min_ttl(min_ttl);
        }
        Ok(issuer)
    }
}

/// `a:1,b:2` → `["http://a:1", "http://b:2"]`.
fn hosts(list: &str) -> Result<Vec<String>> {
    if list.is_empty() {
        return Err(Error::invalid_input(
            "no etcd host: expected etcd://HOST:PORT[,HOST:PORT…]",
        ));
    }
    list.split(',')
        .map(|h| {
            if h.is_empty() || h.contains(['@', ' ']) {
                Err(Error::invalid_input(format!(
                    "{h:?} is not an etcd HOST:PORT"
                )))
            } else {
                Ok(format!("http://{h}"))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use fencing_core::url::invalid_input_message;

    use super::*;

    #[test]
    fn good_urls() {
        let c = EtcdConfig::from_url("etcd://h:1").unwrap();
        assert_eq!(c.endpoints(), ["http://h:1"]);
        let c = EtcdConfig::from_url("etcd://h:1,g:2?prefix=p/&timeout=3s&min_ttl=500ms").unwrap();
        assert_eq!(c.endpoints().len(), 2);
        assert_eq!(c.prefix.as_deref(), Some("p/"));
        assert_eq!(c.timeout, Some(Duration::from_secs(3)));
        assert_eq!(c.min_ttl, Some(Duration::from_millis(500)));
    }

    #[test]
    fn bad_urls_are_invalid_input_naming_the_problem() {
        let invalid = |url| invalid_input_message(url, EtcdConfig::from_url(url));
        assert!(invalid("zk://h:1").contains("not an etcd URL"));
        assert!(invalid("etcd://").contains("no etcd host"));
        assert!(invalid("etcd://h:1,,g:2").contains("\"\" is not an etcd HOST:PORT"));
        assert!(invalid("etcd://h:1/x").contains("\"/x\""));
        let unknown = invalid("etcd://h:1?prefx=a");
        assert!(unknown.contains("\"prefx\"") && unknown.contains("prefix, timeout, min_ttl"));
        assert!(invalid("etcd://h:1?timeout=2").contains("timeout=\"2\""));
        assert!(invalid("etcd://h:1?prefix=").contains("prefix needs a value"));
    }
}
