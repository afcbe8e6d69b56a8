//! [`RedisConfig`]: a Redis issuer from a URL, the environment or setters.

use std::time::Duration;

use fencing_core::url::{BackendUrl, env_any, redact};
use fencing_core::{Error, Result};

use crate::{Durability, RedisIssuer};

/// The options a `redis://` URL takes (the rest of the URL is Redis's own).
const OPTIONS: &[&str] = &["volatile", "replicas", "wait", "prefix"];

/// How long `WAIT` waits for replicas when `replicas=` comes without `wait=`.
const DEFAULT_WAIT: Duration = Duration::from_secs(1);

/// How to reach Redis: parsed from `redis://[USER:PASS@]HOST:PORT[/DB]`,
/// read from the environment, or set with the `with_*` setters;
/// [`connect`](Self::connect) opens the issuer.
///
/// | URL option | meaning |
/// | --- | --- |
/// | (none) | [`Durability::Required`]: a single persistent primary |
/// | `replicas=N&wait=500ms` | [`Durability::Replicated`]: `WAIT N 500` after each grant (`wait` defaults to 1s) |
/// | `volatile=true` | [`Durability::AcceptVolatileCounter`]: tests and demos only |
/// | `prefix=P` | the key prefix (default [`RedisIssuer::DEFAULT_PREFIX`]) |
///
/// ```
/// use fencing_redis::{Durability, RedisConfig};
/// let config = RedisConfig::from_url("redis://127.0.0.1:6379/0?replicas=1&wait=500ms")?;
/// assert_eq!(
///     config.durability(),
///     Durability::Replicated { replicas: 1, timeout: std::time::Duration::from_millis(500) }
/// );
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    url: String,
    durability: Durability,
    prefix: Option<String>,
}

impl std::fmt::Debug for RedisConfig {
    /// Hides the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact(&self.url))
            .field("durability", &self.durability)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl RedisConfig {
    /// A config for the Redis URL `url` (no options of ours in it),
    /// [`Durability::Required`].
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            durability: Durability::Required,
            prefix: None,
        }
    }

    /// Parses `redis://…` or `rediss://…` with the options above.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for another scheme, no host, an unknown
    /// option (naming the known ones), a bad boolean, number or duration,
    /// `volatile` with `replicas`, `wait` without `replicas`, or
    /// `replicas=0`.
    pub fn from_url(url: &str) -> Result<Self> {
        let mut parsed = BackendUrl::parse_as(
            url,
            &["redis", "rediss"],
            "a Redis URL (redis://HOST:PORT[/DB])",
        )?;
        if parsed.authority().is_empty() {
            return Err(Error::invalid_input(
                "no Redis host: expected redis://HOST:PORT[/DB]",
            ));
        }
        let query = parsed.query();
        let volatile = query.take_bool("volatile")?.unwrap_or(false);
        let replicas = query.take_parsed::<u32>("replicas")?;
        let wait = query.take_duration("wait")?;
        let prefix = query.take_nonempty("prefix")?;
        std::mem::take(query).finish(OPTIONS)?;
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
            durability,
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

    /// Connects and checks durability: [`RedisIssuer::connect`].
    ///
    /// # Errors
    /// As [`RedisIssuer::connect`].
    pub async fn connect(&self) -> Result<RedisIssuer> {
        let issuer = RedisIssuer::connect(&self.url, self.durability).await?;
        Ok(match &self.prefix {
            Some(prefix) => issuer.with_prefix(prefix.clone()),
            None => issuer,
        })
    }
}

#[cfg(test)]
mod tests {
    use fencing_core::url::invalid_input_message;

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
    }

    #[test]
    fn bad_urls_are_invalid_input_naming_the_problem() {
        let invalid = |url| invalid_input_message(url, RedisConfig::from_url(url));
        assert!(invalid("etcd://h:1").contains("not a Redis URL"));
        assert!(invalid("redis://").contains("no Redis host"));
        let unknown = invalid("redis://h:1?volatle=1");
        assert!(
            unknown.contains("\"volatle\"") && unknown.contains("volatile, replicas, wait, prefix")
        );
        assert!(invalid("redis://h:1?volatile=si").contains("volatile=\"si\""));
        assert!(invalid("redis://h:1?volatile=1&replicas=1").contains("contradict"));
        assert!(invalid("redis://h:1?wait=1s").contains("needs replicas="));
        assert!(invalid("redis://h:1?replicas=0").contains("at least 1"));
        assert!(invalid("redis://h:1?replicas=-1").starts_with("replicas=\"-1\""));
        assert!(invalid("redis://h:1?replicas=1&wait=0ms").contains("block forever"));
        assert!(invalid("redis://h:1?replicas=1&wait=5").contains("wait=\"5\""));
    }
}
