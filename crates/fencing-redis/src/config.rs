//! [`RedisConfig`]: a Redis issuer from a URL, the environment or setters.

use std::time::Duration;

use fencing_core::adapter::descriptor::{self, Descriptor, OptionKind, UrlOption};
use fencing_core::adapter::url::env_any;
use fencing_core::auth::Credentials;
use fencing_core::redact;
use fencing_core::tls::TlsOptions;
use fencing_core::{Error, Result};
use redis::aio::ConnectionManager;

use crate::target::{OFFERED, SHAPE, Target};
use crate::{Durability, Layout, RedisIssuer};

/// The Redis backend, as the registry, `fence --help` and the README see it.
pub const BACKEND: Descriptor = Descriptor {
    name: "redis",
    title: "Redis",
    crate_name: "fencing-redis",
    features: &["redis"],
    schemes: &["redis", "rediss"],
    shape: SHAPE,
    options: &[
        UrlOption::new(
            "volatile",
            OptionKind::Bool,
            "accept a counter a crash can lose (no appendonly): tests and demos only",
        )
        .default("false"),
        UrlOption::new(
            "replicas",
            OptionKind::Count,
            "WAIT for this many replicas after each grant (a replicated primary)",
        ),
        UrlOption::new(
            "wait",
            OptionKind::Duration,
            "how long WAIT waits, with replicas",
        )
        .default("1s"),
        UrlOption::new(
            "prefix",
            OptionKind::Text,
            "the key prefix (none by default with layout=set-nx or redisson)",
        )
        .default("fencing:"),
        UrlOption::new(
            "layout",
            OptionKind::Choice(Layout::WORDS),
            "whose lock keys to use: ours; the lock name itself (redis-py, redlock); or Redisson's RLock/RFencedLock hash and token counter",
        )
        .default("fencing"),
    ],
    tls_modes: OFFERED,
    check: |url| RedisConfig::from_url(url).map(drop),
    open_issuer: Some(|url| {
        Box::pin(async move { descriptor::issuer(RedisConfig::from_url(&url)?.connect_issuer().await?) })
    }),
    open_store: None,
};

/// How long `WAIT` waits for replicas when `replicas=` comes without `wait=`.
const DEFAULT_WAIT: Duration = Duration::from_secs(1);

/// How to reach Redis: parsed from
/// `redis[s]://[USER:PASSWORD@]HOST[:PORT][/DB]`, read from the environment,
/// or set with the `with_*` setters; [`connect_issuer`](Self::connect_issuer) opens the
/// issuer.
///
/// `rediss://` is TLS, the server's certificate and host name checked
/// against the system roots; `redis://` is plaintext unless a TLS option
/// below asks for TLS. `USER:PASSWORD@` logs in with `AUTH USER PASSWORD`
/// (an ACL user); `:PASSWORD@` with `AUTH PASSWORD` (`requirepass`, or the
/// `default` user). Percent-encode `@`, `:`, `/` and `#` in a password.
///
/// | URL option | meaning |
/// | --- | --- |
/// | (none) | [`Durability::Required`]: a single persistent primary |
/// | `replicas=N&wait=500ms` | [`Durability::Replicated`]: `WAIT N 500` after each grant (`wait` defaults to 1s) |
/// | `volatile=true` | [`Durability::AcceptVolatileCounter`]: tests and demos only |
/// | `prefix=P` | the key prefix (default [`RedisIssuer::DEFAULT_PREFIX`]; none with `layout=set-nx` or `redisson`) |
/// | `layout=set-nx` | [`Layout::SetNx`]: our record at the lock name `{prefix}{resource}` itself, where redis-py's `Lock` and node-redlock keep theirs |
/// | `layout=redisson` | [`Layout::Redisson`]: join Redisson's `RLock`/`RFencedLock` on the lock named `{prefix}{resource}`, its counter shared |
/// | `sslmode=verify-full` | TLS, the certificate and host name checked (the default of `rediss://`, and of `redis://` with a CA or client certificate) |
/// | `sslmode=require` | TLS **without any certificate check** (`fence doctor` warns); only by this explicit option |
/// | `sslmode=disable` | plaintext (the default of `redis://`; refused with `rediss://`) |
/// | `sslrootcert=PATH` | trust the CA certificates in `PATH` (PEM) instead of the system roots |
/// | `sslcert=PATH&sslkey=PATH` | present this client certificate and key (PEM): `tls-auth-clients yes` |
///
/// `sslmode=verify-ca` is refused (redis-rs checks the certificate chain
/// only together with the host name), and so is `prefer` (Redis has no
/// STARTTLS).
///
/// ```
/// use fencing_redis::{Durability, RedisConfig};
/// let config = RedisConfig::from_url("redis://127.0.0.1:6379/0?replicas=1&wait=500ms")?;
/// assert_eq!(
///     config.durability(),
///     Durability::Replicated { replicas: 1, timeout: std::time::Duration::from_millis(500) }
/// );
/// let tls = RedisConfig::from_url("rediss://app:s3cret@redis.internal:6380?sslrootcert=/etc/redis/ca.pem")?;
/// assert!(!format!("{tls:?}").contains("s3cret"));
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    /// The URL without its query (from [`from_url`](Self::from_url)), or
    /// as given to [`new`](Self::new) (TLS options and all).
    url: String,
    /// The TLS options, in place of any in `url`.
    tls: Option<TlsOptions>,
    /// The login, in place of the URL's `USER:PASSWORD@`.
    credentials: Option<Credentials>,
    durability: Durability,
    layout: Layout,
    prefix: Option<String>,
}

impl std::fmt::Debug for RedisConfig {
    /// Hides the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact(&self.url))
            .field("tls", &self.tls)
            .field("credentials", &self.credentials)
            .field("durability", &self.durability)
            .field("layout", &self.layout)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl RedisConfig {
    /// A config for the Redis URL `url` (the TLS options may be in it, no
    /// other option of ours), [`Durability::Required`]. The URL is parsed
    /// by [`connect_issuer`](Self::connect_issuer).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            tls: None,
            credentials: None,
            durability: Durability::Required,
            layout: Layout::Fencing,
            prefix: None,
        }
    }

    /// Parses `redis://…` or `rediss://…` with the options above.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for another scheme, no host, several hosts,
    /// a bad port or database, a user name without a password, an unknown
    /// option (naming the known ones), a bad boolean, number or duration,
    /// `volatile` with `replicas`, `wait` without `replicas`,
    /// `replicas=0`, or TLS options that do not fit together
    /// (`rediss://` with `sslmode=disable`, `sslmode=require` with
    /// `sslrootcert`, `sslcert` without `sslkey`…) or that redis-rs cannot
    /// do (`verify-ca`, `prefer`). No message shows the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let mut parsed = BACKEND.parse(url)?;
        let query = parsed.query();
        let volatile = query.take_bool("volatile")?.unwrap_or(false);
        let replicas = query.take_parsed::<u32>("replicas")?;
        let wait = query.take_duration("wait")?;
        let prefix = query.take_nonempty("prefix")?;
        // The descriptor checked the word.
        let layout = query
            .take("layout")
            .and_then(|word| Layout::parse(&word))
            .unwrap_or_default();
        let target = Target::take_from(&mut parsed)?;
        BACKEND.finish(parsed)?;
        let durability = match (volatile, replicas, wait) {
            (true, Some(_), _) => {
                return Err(Error::invalid_input(
                    "volatile=true and replicas= contradict each other: pick one",
                ));
            }
            (_, None, Some(_)) => {
                return Err(Error::invalid_input(
                    "wait= needs replicas=N (how many replicas must acknowledge)",
                ));
            }
            (_, Some(0), _) => {
                return Err(Error::invalid_input("replicas=0: expected at least 1"));
            }
            (_, Some(_), Some(wait)) if wait.is_zero() => {
                return Err(Error::invalid_input(
                    "wait=0ms would block forever: expected above zero",
                ));
            }
            (_, Some(replicas), wait) => Durability::Replicated {
                replicas,
                timeout: wait.unwrap_or(DEFAULT_WAIT),
            },
            (true, None, None) => Durability::AcceptVolatileCounter,
            (false, None, None) => Durability::Required,
        };
        let base = url.split_once('?').map_or(url, |(base, _)| base);
        Ok(Self {
            url: base.to_owned(),
            tls: Some(target.tls),
            credentials: None,
            durability,
            layout,
            prefix,
        })
    }

    /// From the environment: `FENCING_REDIS_URL`, else `REDIS_URL`, parsed
    /// as [`from_url`](Self::from_url).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if neither is set, or as
    /// [`from_url`](Self::from_url).
    pub fn from_env() -> Result<Self> {
        Self::from_url(&env_any(&["FENCING_REDIS_URL", "REDIS_URL"])?)
    }

    /// What to accept of the server's durability.
    #[must_use]
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The TLS options, in place of those of the URL: a CA, a client
    /// certificate, a mode (`rediss://` still defaults to `verify-full`).
    #[must_use]
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The login, in place of the URL's `USER:PASSWORD@`: `AUTH USER
    /// PASSWORD`, or `AUTH PASSWORD` with an empty user.
    #[must_use]
    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// Whose lock keys to use (default [`Layout::Fencing`]).
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

    /// The durability asked for.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Connects (reading the TLS files), logs in and checks durability.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL or durability (the
    /// message never shows the password);
    /// [`Error::Tls`] if the TLS handshake fails (an untrusted certificate,
    /// a client certificate missing or refused);
    /// [`Error::Unauthenticated`] if the server refuses the user and
    /// password, or wants a login and got none;
    /// [`Error::Backend`] if the server does not answer;
    /// [`Error::UnsafeConfiguration`] if the server could lose or re-issue
    /// the counter under the durability asked for.
    pub async fn connect_issuer(&self) -> Result<RedisIssuer> {
        let mut target = Target::parse(&self.url)?;
        if let Some(tls) = &self.tls {
            target.tls = tls.clone();
        }
        if let Some(credentials) = &self.credentials {
            target.credentials = Some(credentials.clone());
        }
        let issuer = RedisIssuer::open(&target, self.durability).await?;
        Ok(self.prefixed(issuer))
    }

    /// The issuer on a connection manager of the caller's, with this
    /// config's durability and prefix: [`RedisIssuer::new`] with a prefix.
    /// The manager brings its own server, TLS and login; this config's
    /// URL, TLS options and login are not used.
    ///
    /// ```no_run
    /// # async fn f(manager: redis::aio::ConnectionManager) -> fencing_core::Result<()> {
    /// let issuer = fencing_redis::RedisConfig::from_url("redis://cache:6379?prefix=app:")?
    ///     .issuer_on(manager)
    ///     .await?;
    /// assert_eq!(issuer.prefix(), "app:");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`RedisIssuer::new`].
    pub async fn issuer_on(&self, connection: ConnectionManager) -> Result<RedisIssuer> {
        let issuer = RedisIssuer::new(connection, self.durability).await?;
        Ok(self.prefixed(issuer))
    }

    fn prefixed(&self, issuer: RedisIssuer) -> RedisIssuer {
        issuer.laid_out(self.layout, self.prefix.clone())
    }
}

#[cfg(test)]
mod tests {
    use fencing_testkit::refusal::invalid_input_message;

    use super::*;

    #[test]
    fn good_urls() {
        let c = RedisConfig::from_url("redis://h:1/2").unwrap();
        assert_eq!(
            (c.url.as_str(), c.durability()),
            ("redis://h:1/2", Durability::Required)
        );
        let c = RedisConfig::from_url("rediss://u:pw@h:1?volatile=1&prefix=app:").unwrap();
        assert_eq!(c.durability(), Durability::AcceptVolatileCounter);
        assert_eq!(c.url, "rediss://u:pw@h:1");
        assert_eq!(c.prefix.as_deref(), Some("app:"));
        assert!(!format!("{c:?}").contains("pw"));
        let c = RedisConfig::from_url("redis://h:1?replicas=2").unwrap();
        assert_eq!(
            c.durability(),
            Durability::Replicated {
                replicas: 2,
                timeout: DEFAULT_WAIT
            }
        );
        let c = RedisConfig::from_url("redis://h:1?volatile=false").unwrap();
        assert_eq!(c.durability(), Durability::Required);
        assert_eq!(c.layout, Layout::Fencing);
        let c = RedisConfig::from_url("redis://h:1?layout=redisson").unwrap();
        assert_eq!((c.layout, c.prefix), (Layout::Redisson, None));
    }

    #[test]
    fn bad_urls_are_invalid_input_naming_the_problem() {
        let invalid = |url| invalid_input_message(url, RedisConfig::from_url(url));
        assert!(invalid("etcd://h:1").contains("not a Redis URL"));
        assert!(invalid("redis://").contains("no Redis host"));
        let unknown = invalid("redis://h:1?volatle=1");
        assert!(
            unknown.contains("\"volatle\"")
                && unknown.contains("volatile, replicas, wait, prefix, layout")
        );
        assert!(invalid("redis://h:1?volatile=si").contains("volatile=\"si\""));
        assert!(invalid("redis://h:1?volatile=1&replicas=1").contains("contradict"));
        assert!(invalid("redis://h:1?wait=1s").contains("needs replicas="));
        assert!(invalid("redis://h:1?replicas=0").contains("at least 1"));
        assert!(invalid("redis://h:1?replicas=-1").starts_with("replicas=\"-1\""));
        assert!(invalid("redis://h:1?replicas=1&wait=0ms").contains("block forever"));
        assert!(invalid("redis://h:1?replicas=1&wait=5").contains("wait=\"5\""));
        assert!(
            unknown.contains("sslmode, sslrootcert, sslcert, sslkey"),
            "{unknown}"
        );
        let message = invalid("rediss://default:PW@h:1/notadb?volatile=1");
        assert!(
            message.contains("notadb") && !message.contains("PW"),
            "{message}"
        );
        assert!(invalid("rediss://h:1?sslmode=verify-ca").contains("verify-ca"));
        assert!(invalid("redis://h:1?layout=hash").contains("fencing, set-nx, redisson"));
    }

    #[test]
    fn tls_options_and_the_login_come_from_the_url_or_the_setters() {
        let c = RedisConfig::from_url(
            "redis://fencing:PW@h:1?sslrootcert=/ca.pem&prefix=p:&sslcert=/c.pem&sslkey=/k.pem",
        )
        .unwrap();
        assert_eq!(c.url, "redis://fencing:PW@h:1");
        let tls = c.tls.as_ref().unwrap();
        assert_eq!(tls.ca_file(), Some(std::path::Path::new("/ca.pem")));
        assert!(tls.client_cert_files().is_some());
        let c = c
            .with_tls(TlsOptions::new().with_mode(fencing_core::tls::TlsMode::Require))
            .with_credentials(Credentials::new("other", "SECRET2"));
        let debug = format!("{c:?}");
        assert!(
            debug.contains("Require") && debug.contains("other"),
            "{debug}"
        );
        assert!(
            !debug.contains("PW") && !debug.contains("SECRET2"),
            "{debug}"
        );
        // new() takes the TLS options in the URL, parsed at connect.
        assert!(
            RedisConfig::new("rediss://h:1?sslmode=require")
                .tls
                .is_none()
        );
    }
}
