//! [`ZkConfig`]: a ZooKeeper issuer from a URL, the environment or setters.

use fencing_core::adapter::descriptor::{self, Descriptor, OptionKind, UrlOption};
use fencing_core::adapter::url::env_any;
use fencing_core::auth::Credentials;
use fencing_core::tls::TlsOptions;
use fencing_core::{Error, Result};

use crate::access::{Access, check_digest};
use crate::{DEFAULT_PREFIX, TokenSource, ZkIssuer, tls};

/// The ZooKeeper backend, as the registry, `fence --help` and the README
/// see it.
pub const BACKEND: Descriptor = Descriptor {
    name: "zookeeper",
    title: "ZooKeeper",
    crate_name: "fencing-zookeeper",
    features: &["zookeeper"],
    schemes: &["zk", "zookeeper"],
    shape: SHAPE,
    options: &[UrlOption::new(
        "token",
        OptionKind::Choice(&["czxid", "cversion"]),
        "the token: the lock node's czxid (cluster-wide), or the resource znode's cversion (small, per resource)",
    )
    .default("czxid")],
    tls_modes: tls::OFFERED,
    check: |url| ZkConfig::from_url(url).map(drop),
    open_issuer: Some(|url| {
        Box::pin(async move { descriptor::issuer(ZkConfig::from_url(&url)?.connect_issuer().await?) })
    }),
    open_store: None,
};

/// The URL's shape, for messages (USER:PASSWORD: digest credentials).
const SHAPE: &str = "zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…][/PREFIX]";

/// How to reach ZooKeeper: parsed from
/// `zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…][/PREFIX][?OPTIONS]`, read
/// from the environment, or set with the `with_*` setters;
/// [`connect_issuer`](Self::connect_issuer) opens the issuer.
///
/// | URL part | meaning |
/// | --- | --- |
/// | `USER:PASSWORD@` | digest credentials (percent-encoded): every session logs in (`addauth digest`), and every znode the issuer creates is that identity's alone |
/// | `/PREFIX` | the prefix znode (default [`DEFAULT_PREFIX`]) |
/// | `token=czxid` / `token=cversion` | the [`TokenSource`] (default `czxid`) |
/// | `sslrootcert=PATH` | TLS to the servers' `secureClientPort`, trusting the CA certificates in `PATH` (PEM; required for TLS: zookeeper-client trusts no system roots) |
/// | `sslcert=PATH`, `sslkey=PATH` | a client certificate and its key (PEM), for a server with `ssl.clientAuth=need` |
/// | `sslmode=disable\|verify-full` | plaintext (the default without the options above), or TLS with the certificate and host name checked (the default with them); `require` and `verify-ca` are refused: zookeeper-client always checks the chain, and skips the host name only through an `unsafe` call |
///
/// ```
/// let config = fencing_zookeeper::ZkConfig::from_url(
///     "zk://fencing:s3cret@127.0.0.1:2281/locks?token=cversion&sslrootcert=/etc/zk/ca.pem",
/// )?;
/// assert_eq!(config.connect_string(), "127.0.0.1:2281");
/// assert_eq!(config.prefix(), "/locks");
/// assert!(!format!("{config:?}").contains("s3cret"));
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct ZkConfig {
    connect_string: String,
    prefix: String,
    token_source: TokenSource,
    tls: TlsOptions,
    /// Its `Debug` shows the password as `***`.
    credentials: Option<Credentials>,
}

impl ZkConfig {
    /// A config for `connect_string` (`host:port[,host:port…]`), plaintext
    /// and without credentials.
    pub fn new(connect_string: impl Into<String>) -> Self {
        Self {
            connect_string: connect_string.into(),
            prefix: DEFAULT_PREFIX.to_owned(),
            token_source: TokenSource::default(),
            tls: TlsOptions::new(),
            credentials: None,
        }
    }

    /// Parses
    /// `zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…][/PREFIX][?token=czxid|cversion&sslmode=…&sslrootcert=…&sslcert=…&sslkey=…]`
    /// (`zookeeper://` too). The files are read at [`connect_issuer`](Self::connect_issuer).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for another scheme, no host, an empty host in
    /// the list, an unknown option (naming the known ones) or token source,
    /// a TLS mode zookeeper-client cannot do, TLS without `sslrootcert`, or
    /// credentials without a user or password (never showing the password).
    pub fn from_url(url: &str) -> Result<Self> {
        let mut url = BACKEND.parse(url)?;
        let (credentials, hosts) = Credentials::split_authority(url.authority())?;
        if hosts.is_empty() || hosts.split(',').any(str::is_empty) {
            return Err(Error::invalid_input(format!("{hosts:?}: expected {SHAPE}")));
        }
        if let Some(credentials) = &credentials {
            check_digest(credentials)?;
        }
        let mut config = Self::new(hosts);
        config.credentials = credentials;
        if !matches!(url.path(), "" | "/") {
            config.prefix = url.path().trim_end_matches('/').to_owned();
        }
        let query = url.query();
        if let Some(token) = query.take("token") {
            config.token_source = match token.as_str() {
                "czxid" => TokenSource::Czxid,
                "cversion" => TokenSource::ParentCversion,
                // BACKEND.parse checked it against the same two.
                other => {
                    return Err(Error::invalid_input(format!(
                        "token={other:?}: expected czxid or cversion"
                    )));
                }
            };
        }
        config.tls = query.take_tls()?;
        BACKEND.finish(url)?;
        tls::mode(&config.tls)?;
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

    /// TLS to the servers' `secureClientPort`: a CA file is required, a
    /// client certificate optional; modes `disable` and `verify-full`
    /// (checked at [`connect_issuer`](Self::connect_issuer)).
    #[must_use]
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = tls;
        self
    }

    /// Digest credentials: every session logs in as `user:password`, and
    /// every znode the issuer creates is that identity's alone (the user
    /// name may not hold `:`; checked at [`connect_issuer`](Self::connect_issuer)).
    #[must_use]
    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
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

    /// The TLS options.
    pub fn tls(&self) -> &TlsOptions {
        &self.tls
    }

    /// The digest user, if any.
    pub fn user(&self) -> Option<&str> {
        self.credentials.as_ref().map(|c| c.user.as_str())
    }

    /// Connects (reading the TLS files), learns the server's session-timeout
    /// bounds and creates the prefix znode: [`ZkIssuer`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad prefix, TLS mode, file or
    /// credentials; [`Error::Tls`] when a server refuses our TLS handshake
    /// or we its certificate; [`Error::Unauthenticated`] when the prefix
    /// znode admits another identity (a wrong password, or none);
    /// a retryable [`Error::Backend`] if no server answers.
    pub async fn connect_issuer(&self) -> Result<ZkIssuer> {
        let access = Access::load(&self.tls, self.credentials.as_ref())?;
        ZkIssuer::open(
            &self.connect_string,
            access,
            &self.prefix,
            self.token_source,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use fencing_testkit::refusal::invalid_input_message;

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
        assert!(invalid("zk:///x").contains("HOST:PORT[,HOST:PORT…]"));
        assert!(invalid("zk://h:1,").contains("HOST:PORT[,HOST:PORT…]"));
        assert!(invalid("zk://h:1?token=mzxid").contains("czxid, cversion"));
        let unknown = invalid("zk://h:1?prefix=/x");
        assert!(unknown.contains("\"prefix\"") && unknown.contains("known options: token"));
        assert!(unknown.contains("sslrootcert"), "{unknown}");
    }

    #[test]
    fn tls_and_credentials_come_from_the_url() {
        let c = ZkConfig::from_url(
            "zk://fencing:p%40ss@h:2281,g:2281/p?sslrootcert=/ca.pem&sslcert=/c.pem&sslkey=/k.pem",
        )
        .unwrap();
        assert_eq!((c.connect_string(), c.prefix()), ("h:2281,g:2281", "/p"));
        assert_eq!(c.user(), Some("fencing"));
        assert_eq!(c.credentials.as_ref().unwrap().password(), "p@ss");
        assert_eq!(c.tls().ca_file(), Some(std::path::Path::new("/ca.pem")));
        assert!(c.tls().client_cert_files().is_some());
        assert!(!format!("{c:?}").contains("p@ss"), "{c:?}");
        let plain = ZkConfig::from_url("zk://h:1").unwrap();
        assert!(plain.tls().is_default() && plain.user().is_none());
        let off = ZkConfig::from_url("zk://h:1?sslmode=disable").unwrap();
        assert_eq!(
            tls::mode(off.tls()).unwrap(),
            fencing_core::tls::TlsMode::Disable
        );
    }

    #[test]
    fn bad_tls_or_credentials_are_refused_without_the_password() {
        let invalid = |url| invalid_input_message(url, ZkConfig::from_url(url));
        for (url, says) in [
            (
                "zk://u:hunter2@h:1?sslmode=require&sslrootcert=/ca.pem",
                "disable, verify-full",
            ),
            (
                "zk://u:hunter2@h:1?sslmode=verify-ca&sslrootcert=/ca.pem",
                "disable, verify-full",
            ),
            (
                "zk://u:hunter2@h:1?sslmode=verify-full",
                "needs sslrootcert",
            ),
            ("zk://u:hunter2@h:1?sslcert=/c.pem", "without sslkey"),
            (
                "zk://u:hunter2@h:1?sslmode=disable&sslrootcert=/ca.pem",
                "certificates need TLS",
            ),
            (
                "zk://u:hunter2@h:1?sslrootcert=/ca.pem&sslpassword=x",
                "unknown option",
            ),
            ("zk://u:hunter2@h:1,", "expected zk://"),
            ("zk://u:hunter2@", "expected zk://"),
            ("zk://:hunter2@h:1", "user name"),
            ("zk://a%3Ab:hunter2@h:1", "without ':'"),
            ("zk://u@h:1", "no password"),
            ("zk://u:hunter2%zz@h:1", "percent-encoding"),
        ] {
            let message = invalid(url);
            assert!(message.contains(says), "{url}: {message}");
            assert!(!message.contains("hunter2"), "{url}: {message}");
        }
    }
}
