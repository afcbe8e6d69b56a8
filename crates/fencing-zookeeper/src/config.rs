//! [`ZkConfig`]: a ZooKeeper issuer from a URL, the environment or setters.

use fencing_core::url::{BackendUrl, env_any};
use fencing_core::{Error, Result};

use crate::{DEFAULT_PREFIX, TokenSource, ZkIssuer};

/// The options a `zk://` URL takes.
const OPTIONS: &[&str] = &["token"];

/// How to reach ZooKeeper: parsed from `zk://HOST:PORT[,HOST:PORT…][/PREFIX]`,
/// read from the environment, or set with the `with_*` setters;
/// [`connect`](Self::connect) opens the issuer.
///
/// | URL part | meaning |
/// | --- | --- |
/// | `/PREFIX` | the prefix znode (default [`DEFAULT_PREFIX`]) |
/// | `token=czxid` / `token=cversion` | the [`TokenSource`] (default `czxid`) |
///
/// ```
/// let config = fencing_zookeeper::ZkConfig::from_url("zk://127.0.0.1:2181/locks?token=cversion")?;
/// assert_eq!(config.connect_string(), "127.0.0.1:2181");
/// assert_eq!(config.prefix(), "/locks");
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct ZkConfig {
    connect_string: String,
    prefix: String,
    token_source: TokenSource,
}

impl ZkConfig {
    /// A config for `connect_string` (`host:port[,host:port…]`).
    pub fn new(connect_string: impl Into<String>) -> Self {
        Self {
            connect_string: connect_string.into(),
            prefix: DEFAULT_PREFIX.to_owned(),
            token_source: TokenSource::default(),
        }
    }

    /// Parses `zk://HOST:PORT[,HOST:PORT…][/PREFIX][?token=czxid|cversion]`
    /// (`zookeeper://` too).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for another scheme, no host, an empty host in
    /// the list, an unknown option (naming the known ones) or token source.
    pub fn from_url(url: &str) -> Result<Self> {
        let mut url = BackendUrl::parse_as(
            url,
            &["zk", "zookeeper"],
            "a ZooKeeper URL (zk://HOST:PORT[,HOST:PORT…][/PREFIX])",
        )?;
        let hosts = url.authority();
        if hosts.is_empty() || hosts.split(',').any(str::is_empty) {
            return Err(Error::invalid_input(format!(
                "{hosts:?}: expected zk://HOST:PORT[,HOST:PORT…]"
            )));
        }
        let mut config = Self::new(hosts);
        if !matches!(url.path(), "" | "/") {
            config.prefix = url.path().trim_end_matches('/').to_owned();
        }
        let query = url.query();
        if let Some(token) = query.take("token") {
            config.token_source = match token.as_str() {
                "czxid" => TokenSource::Czxid,
                "cversion" => TokenSource::ParentCversion,
                other => {
                    return Err(Error::invalid_input(format!(
                        "token={other:?}: expected czxid or cversion"
                    )));
                }
            };
        }
        std::mem::take(query).finish(OPTIONS)?;
        Ok(config)
    }

    /// From the environment: `FENCING_ZOOKEEPER_CONNECT` (`host:port,…`,
    /// required) and `FENCING_ZOOKEEPER_PREFIX`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `FENCING_ZOOKEEPER_CONNECT` is not set.
    pub fn from_env() -> Result<Self> {
        let mut config = Self::new(env_any(&["FENCING_ZOOKEEPER_CONNECT"])?);
        if let Ok(prefix) = std::env::var("FENCING_ZOOKEEPER_PREFIX") {
            config.prefix = prefix;
        }
        Ok(config)
    }

    /// The prefix znode (`/locks`).
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Where tokens come from.
    #[must_use]
    pub fn with_token_source(mut self, token_source: TokenSource) -> Self {
        self.token_source = token_source;
        self
    }

    /// The connect string.
    pub fn connect_string(&self) -> &str {
        &self.connect_string
    }

    /// The prefix znode.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Connects: [`ZkIssuer::connect_with`].
    ///
    /// # Errors
    /// As [`ZkIssuer::connect_with`].
    pub async fn connect(&self) -> Result<ZkIssuer> {
        ZkIssuer::connect_with(&self.connect_string, &self.prefix, self.token_source).await
    }
}

#[cfg(test)]
mod tests {
    use fencing_core::url::invalid_input_message;

    use super::*;

    #[test]
    fn good_urls() {
        let c = ZkConfig::from_url("zk://h:1").unwrap();
        assert_eq!((c.connect_string(), c.prefix()), ("h:1", DEFAULT_PREFIX));
        assert_eq!(c.token_source, TokenSource::Czxid);
        let c = ZkConfig::from_url("zookeeper://h:1,g:2/a/b/?token=cversion").unwrap();
        assert_eq!((c.connect_string(), c.prefix()), ("h:1,g:2", "/a/b"));
        assert_eq!(c.token_source, TokenSource::ParentCversion);
    }

    #[test]
    fn bad_urls_are_invalid_input_naming_the_problem() {
        let invalid = |url| invalid_input_message(url, ZkConfig::from_url(url));
        assert!(invalid("etcd://h:1").contains("not a ZooKeeper URL"));
        assert!(invalid("zk:///x").contains("expected zk://HOST:PORT"));
        assert!(invalid("zk://h:1,").contains("expected zk://HOST:PORT"));
        assert!(invalid("zk://h:1?token=mzxid").contains("czxid or cversion"));
        let unknown = invalid("zk://h:1?prefix=/x");
        assert!(unknown.contains("\"prefix\"") && unknown.contains("known options: token"));
    }
}
