//! [`EtcdConfig`]: an etcd issuer from a URL, the environment or setters.

use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity};
use fencing_core::adapter::descriptor::{self, Descriptor, OptionKind, UrlOption};
use fencing_core::adapter::url::env;
use fencing_core::auth::Credentials;
use fencing_core::tls::{TlsMode, TlsOptions};
use fencing_core::{Error, Result};

use crate::error::NAME;
use crate::keys::Keys;
use crate::{EtcdIssuer, Layout};

/// The etcd backend, as the registry, `fence --help` and the README see it.
pub const BACKEND: Descriptor = Descriptor {
    name: "etcd",
    title: "etcd",
    crate_name: "fencing-etcd",
    features: &["etcd"],
    schemes: &["etcd"],
    shape: SHAPE,
    options: &[
        UrlOption::new(
            "prefix",
            OptionKind::Text,
            "the key prefix (a user whose role is limited to a prefix needs it)",
        )
        .default(crate::DEFAULT_PREFIX),
        UrlOption::new(
            "layout",
            OptionKind::Choice(Layout::WORDS),
            "queue: etcdctl lock's and Go's Mutex's keys; single-key: python-etcd3's lock, one key (prefix /locks/)",
        )
        .default("queue"),
        UrlOption::new(
            "timeout",
            OptionKind::Duration,
            "how long one call may take; a write past it is outcome-unknown",
        )
        .default("5s"),
        UrlOption::new(
            "min_ttl",
            OptionKind::Duration,
            "the shortest TTL accepted (1.5 x the server's election timeout)",
        )
        .default("2s"),
    ],
    tls_modes: OFFERED,
    check: |url| EtcdConfig::from_url(url).map(drop),
    open_issuer: Some(|url| {
        Box::pin(async move { descriptor::issuer(EtcdConfig::from_url(&url)?.connect_issuer().await?) })
    }),
    open_store: None,
};

/// The modes etcd's client (tonic on rustls) can do: it always checks the
/// chain and the host name once TLS is on.
const OFFERED: &[TlsMode] = &[TlsMode::Disable, TlsMode::VerifyFull];

/// The URL's shape, for messages.
const SHAPE: &str = "etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…]";

/// How to reach etcd: parsed from
/// `etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…][?OPTIONS]`, read from
/// the environment, or set with the `with_*` setters;
/// [`connect_issuer`](Self::connect_issuer) opens the issuer.
///
/// | URL option | meaning |
/// | --- | --- |
/// | `prefix=P` | the key prefix (default [`DEFAULT_PREFIX`](crate::DEFAULT_PREFIX), or [`SINGLE_KEY_PREFIX`](crate::SINGLE_KEY_PREFIX) with `layout=single-key`); a user whose role is limited to a prefix needs this one |
/// | `layout=single-key` | [`Layout::SingleKey`]: one key per lock, python-etcd3's `Lock` (default `queue`, shared with `etcdctl lock`) |
/// | `timeout=DURATION` | the per-request timeout (`2s`) |
/// | `min_ttl=DURATION` | the shortest TTL a lease may ask for |
/// | `sslmode=disable\|verify-full` | plaintext, or TLS with the chain and the host name checked. etcd's client (tonic) always checks both once TLS is on, so `require` and `verify-ca` are refused |
/// | `sslrootcert=CA.pem` | the CA certificates to trust instead of the system roots (etcdctl's `--cacert`) |
/// | `sslcert=CERT.pem&sslkey=KEY.pem` | a client certificate and its key, for mutual TLS (`--client-cert-auth`; etcdctl's `--cert`, `--key`) |
///
/// Any TLS option (a CA, a client certificate, `sslmode=verify-full`)
/// switches every endpoint to `https://`; without one the connection is
/// plaintext, as before. `USER:PASSWORD@` logs in as an etcd user
/// (`etcdctl auth enable`; percent-encode `@`, `/`, `?`, `#` and `%` in
/// the password); its role needs read and write rights on the key prefix
/// only (`etcdctl role grant-permission ROLE --prefix=true readwrite
/// fencing/`). With mutual TLS and no user, etcd takes the user name from
/// the certificate's common name.
///
/// ```
/// let config = fencing_etcd::EtcdConfig::from_url("etcd://127.0.0.1:2379,127.0.0.1:22379?prefix=jobs/")?;
/// assert_eq!(config.endpoints(), ["http://127.0.0.1:2379", "http://127.0.0.1:22379"]);
/// let tls = fencing_etcd::EtcdConfig::from_url(
///     "etcd://app:s3cret@etcd.internal:2379?sslrootcert=/etc/etcd/ca.pem&sslcert=/etc/etcd/app.pem&sslkey=/etc/etcd/app-key.pem",
/// )?;
/// assert_eq!(tls.endpoints(), ["https://etcd.internal:2379"]);
/// assert!(!format!("{tls:?}").contains("s3cret"));
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct EtcdConfig {
    /// As given: `host:port`, `http://host:port` or `https://host:port`.
    endpoints: Vec<String>,
    prefix: Option<String>,
    layout: Layout,
    timeout: Option<Duration>,
    min_ttl: Option<Duration>,
    tls: TlsOptions,
    /// Its `Debug` hides the password.
    credentials: Option<Credentials>,
}

/// The endpoints redacted (one given as `user:password@host` shows no
/// password), the credentials hidden by their own `Debug`.
impl std::fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let endpoints: Vec<String> = self
            .endpoints
            .iter()
            .map(|e| fencing_core::redact(e))
            .collect();
        f.debug_struct("EtcdConfig")
            .field("endpoints", &endpoints)
            .field("prefix", &self.prefix)
            .field("layout", &self.layout)
            .field("timeout", &self.timeout)
            .field("min_ttl", &self.min_ttl)
            .field("tls", &self.tls)
            .field("credentials", &self.credentials)
            .finish()
    }
}

impl EtcdConfig {
    /// A config for `endpoints` (`host:port`, `http://host:port`, or
    /// `https://host:port` for TLS with the system roots).
    pub fn new<E: Into<String>>(endpoints: impl IntoIterator<Item = E>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Parses `etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…][?prefix=P&timeout=D&min_ttl=D&sslmode=M&sslrootcert=F&sslcert=F&sslkey=F]`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for another scheme, no host, an empty host in
    /// the list, a path, an unknown option (naming the known ones), a bad
    /// duration, a user without a password (or the reverse), or TLS
    /// options that do not fit together (a certificate without its key,
    /// `sslmode=require`). No message shows the password.
    pub fn from_url(url: &str) -> Result<Self> {
        Self::parse(url).map_err(|e| match e {
            Error::InvalidInput { .. } if at_past_hosts(url) => Error::invalid_input(format!(
                "malformed etcd URL (not quoted: it has an '@' past its host list, which may be part of a \
                 password): percent-encode '@', '/', '?' and '%' in the password (%40, %2F, %3F, %25); \
                 expected {SHAPE}"
            )),
            e => e,
        })
    }

    fn parse(url: &str) -> Result<Self> {
        let mut url = BACKEND.parse(url)?;
        let (credentials, hosts) = Credentials::split_authority(url.authority())?;
        url.expect_no_path(SHAPE)?;
        let mut config = Self::new(self::hosts(hosts)?);
        config.credentials = credentials.map(checked).transpose()?;
        let query = url.query();
        config.prefix = query.take_nonempty("prefix")?;
        // The descriptor checked the word.
        config.layout = query
            .take("layout")
            .and_then(|word| Layout::parse(&word))
            .unwrap_or_default();
        config.timeout = query.take_duration("timeout")?;
        config.min_ttl = query.take_duration("min_ttl")?;
        config.tls = query.take_tls()?;
        BACKEND.finish(url)?;
        config.transport()?;
        Ok(config)
    }

    /// From the environment, with etcdctl's own variables as fallbacks:
    ///
    /// | variable | else | meaning |
    /// | --- | --- | --- |
    /// | `FENCING_ETCD_ENDPOINTS` | `ETCDCTL_ENDPOINTS` | comma-separated `host:port`, `http://…` or `https://…` (required) |
    /// | `FENCING_ETCD_PREFIX` | | the key prefix |
    /// | `FENCING_ETCD_USER` | `ETCDCTL_USER` | `user:password`, or `user` with the password in … |
    /// | `FENCING_ETCD_PASSWORD` | `ETCDCTL_PASSWORD` | … |
    /// | `FENCING_ETCD_CACERT` | `ETCDCTL_CACERT` | the CA file (switches to TLS) |
    /// | `FENCING_ETCD_CERT`, `FENCING_ETCD_KEY` | `ETCDCTL_CERT`, `ETCDCTL_KEY` | the client certificate and key (mutual TLS) |
    ///
    /// `ETCDCTL_INSECURE_SKIP_TLS_VERIFY=true` is refused: etcd's client
    /// always checks the certificate and the host name.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if no endpoint variable is set, a user has
    /// no password, a certificate has no key (or the reverse), or the
    /// certificate check is turned off.
    pub fn from_env() -> Result<Self> {
        Self::from_vars(env)
    }

    /// [`from_env`](Self::from_env), reading the variables through `var`
    /// (set and not empty).
    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let either = |ours: &str, etcdctl: &str| var(ours).or_else(|| var(etcdctl));
        let list = either("FENCING_ETCD_ENDPOINTS", "ETCDCTL_ENDPOINTS").ok_or_else(|| {
            Error::invalid_input("neither FENCING_ETCD_ENDPOINTS nor ETCDCTL_ENDPOINTS is set")
        })?;
        let list: Vec<&str> = list
            .split(',')
            .map(|h| h.trim().trim_end_matches('/'))
            .collect();
        let mut config = Self::new(self::hosts(&list.join(","))?);
        config.prefix = var("FENCING_ETCD_PREFIX");
        if let Some(user) = either("FENCING_ETCD_USER", "ETCDCTL_USER") {
            let (user, password) = match user.split_once(':') {
                Some((user, password)) => (user.to_owned(), Some(password.to_owned())),
                None => (user, either("FENCING_ETCD_PASSWORD", "ETCDCTL_PASSWORD")),
            };
            config.credentials = Some(checked(Credentials {
                user,
                password: password.map(Into::into),
            })?);
        }
        if !matches!(
            var("ETCDCTL_INSECURE_SKIP_TLS_VERIFY").as_deref(),
            None | Some("false" | "0" | "no")
        ) {
            return Err(Error::invalid_input(
                "ETCDCTL_INSECURE_SKIP_TLS_VERIFY=true is not offered: etcd's client always checks the \
                 server's certificate and host name; trust its CA with FENCING_ETCD_CACERT (or ETCDCTL_CACERT)",
            ));
        }
        let mut tls = TlsOptions::new();
        if let Some(ca) = either("FENCING_ETCD_CACERT", "ETCDCTL_CACERT") {
            tls = tls.with_ca_file(ca);
        }
        match (
            either("FENCING_ETCD_CERT", "ETCDCTL_CERT"),
            either("FENCING_ETCD_KEY", "ETCDCTL_KEY"),
        ) {
            (Some(cert), Some(key)) => tls = tls.with_client_cert(cert, key),
            (None, None) => {}
            _ => {
                return Err(Error::invalid_input(
                    "a client certificate needs its key: set both FENCING_ETCD_CERT and FENCING_ETCD_KEY \
                     (or ETCDCTL_CERT and ETCDCTL_KEY)",
                ));
            }
        }
        config.tls = tls;
        config.transport()?;
        Ok(config)
    }

    /// How the lock is kept (default [`Layout::Queue`]).
    #[must_use]
    pub fn with_layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
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

    /// TLS options (replacing the URL's `sslmode`, `sslrootcert`,
    /// `sslcert`, `sslkey`): any but `sslmode=disable` switches the
    /// endpoints to `https://`. Only `disable` and `verify-full` are
    /// offered.
    #[must_use]
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = tls;
        self
    }

    /// Logs in as an etcd user (replacing the URL's `USER:PASSWORD@`).
    #[must_use]
    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// The TLS options.
    pub fn tls(&self) -> &TlsOptions {
        &self.tls
    }

    /// The endpoints the issuer dials: `https://` once TLS is on,
    /// `http://` otherwise.
    pub fn endpoints(&self) -> Vec<String> {
        let tls = self.tls.mode(self.default_mode()) != TlsMode::Disable;
        self.endpoints.iter().map(|e| with_scheme(e, tls)).collect()
    }

    /// Connects and applies the options.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for no endpoint, a bad prefix, a TLS mode
    /// etcd's client cannot do, or a CA or client certificate file that
    /// cannot be read or parsed; a retryable [`Error::Backend`] if etcd
    /// does not answer; [`Error::Tls`] when the handshake fails;
    /// [`Error::Unauthenticated`] when etcd refuses the user.
    pub async fn connect_issuer(&self) -> Result<EtcdIssuer> {
        let (mode, endpoints) = self.transport()?;
        let credentials = self.credentials.clone().map(checked).transpose()?;
        let mut options = ConnectOptions::new();
        if mode == TlsMode::VerifyFull {
            options = options.with_tls(self.client_tls()?);
        }
        EtcdIssuer::open(&endpoints, options, mode, credentials.as_ref(), self.keys())
            .await?
            .configured(None, self.timeout, self.min_ttl)
    }

    /// The keys of the layout under the prefix (the layout's default if
    /// none was given).
    fn keys(&self) -> Keys {
        let prefix = self.prefix.as_deref();
        let prefix = prefix.unwrap_or_else(|| self.layout.default_prefix());
        Keys::new(prefix.to_owned(), self.layout)
    }

    /// An issuer on the caller's own `client`, with this config's prefix,
    /// operation timeout and min TTL. The endpoints, TLS options and
    /// credentials are not used (the client has its own), and nothing is
    /// sent; `verify` knows nothing of the client's TLS or user. For a client
    /// built with options of one's own; [`EtcdIssuer::new`] for the
    /// defaults.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use fencing_etcd::{EtcdConfig, etcd_client::Client};
    /// let client = Client::connect(["http://127.0.0.1:2379"], None).await?;
    /// let issuer = EtcdConfig::default().with_prefix("jobs/").issuer_on(client)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty prefix or one with a NUL byte.
    pub fn issuer_on(&self, client: Client) -> Result<EtcdIssuer> {
        EtcdIssuer::new(client).configured(Some(self.keys()), self.timeout, self.min_ttl)
    }

    /// `verify-full` when an endpoint says `https://`, else plaintext.
    fn default_mode(&self) -> TlsMode {
        if self.endpoints.iter().any(|e| e.starts_with("https://")) {
            TlsMode::VerifyFull
        } else {
            TlsMode::Disable
        }
    }

    /// The mode in force (refused unless etcd's client can do it) and the
    /// endpoints with their scheme.
    fn transport(&self) -> Result<(TlsMode, Vec<String>)> {
        let mode = self.tls.mode_for(NAME, self.default_mode(), OFFERED)?;
        if mode == TlsMode::Disable && self.endpoints.iter().any(|e| e.starts_with("https://")) {
            return Err(Error::invalid_input(
                "sslmode=disable with an https:// endpoint: drop one or the other",
            ));
        }
        // etcd's client would dial such an endpoint and never log in with
        // it; a password written there is one the user believes is in use.
        if let Some(endpoint) = self.endpoints.iter().find(|e| login(e).is_some()) {
            return Err(Error::invalid_input(format!(
                "the endpoint {} holds a login: give it with EtcdConfig::with_credentials, \
                 or in an etcd:// URL ({SHAPE})",
                fencing_core::redact(endpoint)
            )));
        }
        Ok((mode, self.endpoints()))
    }

    /// tonic's TLS config: the CA given, else the system roots; the client
    /// identity, if given.
    fn client_tls(&self) -> Result<etcd_client::TlsOptions> {
        let tls = etcd_client::TlsOptions::new();
        let tls = match self.tls.read_ca()? {
            Some(pem) => tls.ca_certificate(Certificate::from_pem(pem)),
            None => tls.with_native_roots(),
        };
        Ok(match self.tls.read_identity()? {
            Some(identity) => {
                tls.identity(Identity::from_pem(identity.cert, identity.key.expose()))
            }
            None => tls,
        })
    }
}

/// `host:port` with the scheme: `https://` if `tls`, else `http://`.
/// The `user[:password]` of an endpoint written as a URL with a login.
fn login(endpoint: &str) -> Option<&str> {
    let bare = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    // The last `@` before the path: a password may hold an `@` or a `/`.
    let authority_end = bare.rfind('@').map_or(bare.len(), |at| {
        at + bare[at..].find(['/', '?']).unwrap_or(bare.len() - at)
    });
    bare[..authority_end]
        .rsplit_once('@')
        .map(|(login, _)| login)
}

fn with_scheme(endpoint: &str, tls: bool) -> String {
    let bare = endpoint
        .strip_prefix("https://")
        .or_else(|| endpoint.strip_prefix("http://"))
        .unwrap_or(endpoint);
    format!("{}{bare}", if tls { "https://" } else { "http://" })
}

/// Credentials etcd can log in with: a user name and its password.
fn checked(credentials: Credentials) -> Result<Credentials> {
    if credentials.user.is_empty() {
        return Err(Error::invalid_input(format!(
            "etcd credentials need a user name: {SHAPE}"
        )));
    }
    if credentials.password.is_none() {
        // The name is not quoted: a token pasted as the user is a secret.
        return Err(Error::invalid_input(format!(
            "an etcd user needs its password: {SHAPE}"
        )));
    }
    Ok(credentials)
}

/// Whether `url` has an `@` after its authority: a password with a raw
/// `/` or `?` ends the authority early, and a message quoting the path or
/// an option would show the rest of it.
fn at_past_hosts(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    rest[end..].contains('@')
}

/// `a:1,https://b:2` → `["a:1", "https://b:2"]`, each checked. No message
/// quotes an entry with an `@` (it may hold a password).
fn hosts(list: &str) -> Result<Vec<String>> {
    if list.is_empty() {
        return Err(Error::invalid_input(format!(
            "no etcd host: expected {SHAPE}"
        )));
    }
    list.split(',')
        .map(|entry| {
            let host = entry
                .strip_prefix("https://")
                .or_else(|| entry.strip_prefix("http://"))
                .unwrap_or(entry);
            if host.contains('@') {
                Err(Error::invalid_input(
                    "an etcd endpoint holds an '@': give the user once, before the first host \
                     (etcd://USER:PASSWORD@HOST:PORT,HOST:PORT), or in FENCING_ETCD_USER",
                ))
            } else if host.is_empty() || host.contains([' ', '/']) {
                Err(Error::invalid_input(format!(
                    "{entry:?} is not an etcd HOST:PORT"
                )))
            } else {
                Ok(entry.to_owned())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
