//! Backend URLs, parsed once for every adapter's `from_url`.
//!
//! A backend URL is `scheme://AUTHORITY[/PATH][?key=value&…]`. Each adapter
//! reads what it understands from a [`BackendUrl`] and then calls
//! [`Query::finish`], which refuses every option it did not take, naming the
//! ones it knows: a typo (`adopt_unfencd=true`) is an error, never ignored.
//!
//! Values are percent-decoded (`%26` is `&`, `%3D` is `=`, `+` stays `+`),
//! so a value that holds `&` or `=` (an Azure SAS) must be percent-encoded.
//! Booleans are strict: `true`/`1`/`yes` or `false`/`0`/`no`, nothing else.
//! Durations are an integer and a unit: `500ms`, `2s`, `1m`, `1h`.
//!
//! ```
//! use std::time::Duration;
//! use fencing_core::adapter::url::BackendUrl;
//!
//! let mut url = BackendUrl::parse("redis://127.0.0.1:6379/0?replicas=1&wait=500ms")?;
//! assert_eq!(url.scheme(), "redis");
//! assert_eq!(url.authority(), "127.0.0.1:6379");
//! assert_eq!(url.path(), "/0");
//! assert_eq!(url.query().take_parsed::<u32>("replicas")?, Some(1));
//! assert_eq!(url.query().take_duration("wait")?, Some(Duration::from_millis(500)));
//! assert_eq!(url.query().take_bool("volatile")?, None);
//! url.finish(&["replicas", "wait", "volatile"])?;
//! # Ok::<(), fencing_core::Error>(())
//! ```

use std::str::FromStr;
use std::time::Duration;

use crate::percent::percent_decode;
use crate::{Error, Result, redact};

mod tls;

/// A backend URL split into scheme, authority, path and query options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendUrl {
    scheme: String,
    authority: String,
    path: String,
    query: Query,
}

impl BackendUrl {
    /// Splits `url` (`scheme://AUTHORITY[/PATH][?QUERY]`).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] without `scheme://`, for a query with an
    /// option given twice, or a value that is not valid percent-encoded
    /// UTF-8.
    pub fn parse(url: &str) -> Result<Self> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(Error::invalid_input(format!(
                "{:?} is not a backend URL: expected scheme://…",
                redact(url)
            )));
        };
        if scheme.is_empty()
            || !scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
        {
            return Err(Error::invalid_input(format!(
                "{:?} has no usable scheme",
                redact(url)
            )));
        }
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        Ok(Self {
            scheme: scheme.to_ascii_lowercase(),
            authority: authority.to_owned(),
            path: path.to_owned(),
            query: Query::parse(query)?,
        })
    }

    /// Splits `url` as [`parse`](Self::parse) for a backend that takes
    /// `schemes`, described by `what` when another is given
    /// (`"a Redis URL (redis://HOST:PORT[/DB])"`).
    ///
    /// # Errors
    /// As [`parse`](Self::parse), and [`Error::InvalidInput`] for another
    /// scheme.
    pub fn parse_as(url: &str, schemes: &[&str], what: &str) -> Result<Self> {
        let url = Self::parse(url)?;
        if !schemes.contains(&url.scheme()) {
            return Err(Error::invalid_input(format!(
                "not {what}: scheme {:?}",
                url.scheme()
            )));
        }
        Ok(url)
    }

    /// The scheme, lowercase (`s3`, `redis`…).
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// What sits between `://` and the first `/` or `?`: a host list, a
    /// bucket, `user:password@host:port`.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The path, with its leading `/` (empty if none).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The query options not taken yet.
    pub fn query(&mut self) -> &mut Query {
        &mut self.query
    }

    /// Refuses the options nobody took: [`Query::finish`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the first unknown option and `known`.
    pub fn finish(self, known: &[&str]) -> Result<()> {
        self.query.finish(known)
    }

    /// Refuses a non-empty path (`s3://bucket/sub` names no bucket).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the expected shape.
    pub fn expect_no_path(&self, shape: &str) -> Result<()> {
        match self.path.as_str() {
            "" | "/" => Ok(()),
            path => Err(Error::invalid_input(format!(
                "unexpected path {path:?} in a {}:// URL: expected {shape}",
                self.scheme
            ))),
        }
    }
}

/// The `key=value` options of a URL's query, taken one by one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Parses `a=1&b=two` (no leading `?`). A key without `=` has the value
    /// `""`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an option given twice or bad percent
    /// encoding.
    pub fn parse(query: &str) -> Result<Self> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = percent_decode(key)?;
            if pairs.iter().any(|(k, _)| *k == key) {
                return Err(Error::invalid_input(format!(
                    "option {key:?} is given twice in the URL"
                )));
            }
            pairs.push((key, percent_decode(value)?));
        }
        Ok(Self { pairs })
    }

    /// The options not taken yet, in URL order, values decoded.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether no option is left.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Takes `key`'s value, if given.
    pub fn take(&mut self, key: &str) -> Option<String> {
        let i = self.pairs.iter().position(|(k, _)| k == key)?;
        Some(self.pairs.remove(i).1)
    }

    /// Takes `key`'s value; an empty one is refused.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for `key=` with nothing after it.
    pub fn take_nonempty(&mut self, key: &str) -> Result<Option<String>> {
        match self.take(key) {
            Some(value) if value.is_empty() => Err(Error::invalid_input(format!(
                "option {key} needs a value ({key}=…)"
            ))),
            other => Ok(other),
        }
    }

    /// Takes a strict boolean: `true`, `1`, `yes` or `false`, `0`, `no`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for any other value: a typo must not read as
    /// a choice.
    pub fn take_bool(&mut self, key: &str) -> Result<Option<bool>> {
        self.take(key)
            .map(|value| match value.as_str() {
                "true" | "1" | "yes" => Ok(true),
                "false" | "0" | "no" => Ok(false),
                other => Err(Error::invalid_input(format!(
                    "{key}={other:?}: expected true or false"
                ))),
            })
            .transpose()
    }

    /// Takes a duration: an integer and `ms`, `s`, `m` or `h`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for anything else (a bare number is refused:
    /// its unit would be a guess).
    pub fn take_duration(&mut self, key: &str) -> Result<Option<Duration>> {
        self.take(key)
            .map(|value| {
                parse_duration(&value).ok_or_else(|| {
                    Error::invalid_input(format!(
                        "{key}={value:?}: expected a duration like 500ms, 2s, 1m or 1h"
                    ))
                })
            })
            .transpose()
    }

    /// Takes a value parsed with [`FromStr`] (numbers, enums).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the key, the value and the parse error.
    pub fn take_parsed<T>(&mut self, key: &str) -> Result<Option<T>>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        self.take(key)
            .map(|value| {
                value
                    .parse()
                    .map_err(|e| Error::invalid_input(format!("{key}={value:?}: {e}")))
            })
            .transpose()
    }

    /// Refuses the options nobody took.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the first unknown option and listing
    /// `known`.
    pub fn finish(self, known: &[&str]) -> Result<()> {
        match self.pairs.first() {
            None => Ok(()),
            Some((key, _)) => Err(Error::invalid_input(format!(
                "unknown option {key:?} in the URL; known options: {}",
                known.join(", ")
            ))),
        }
    }
}

/// `500ms`, `2s`, `1m`, `1h` → a [`Duration`].
pub(crate) fn parse_duration(value: &str) -> Option<Duration> {
    let split = value.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = value.split_at(split);
    let n: u64 = digits.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => Some(Duration::from_secs(n.checked_mul(60)?)),
        "h" => Some(Duration::from_secs(n.checked_mul(3600)?)),
        _ => None,
    }
}

/// The variable `name`, if set and not empty.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The variable `name` as a strict boolean (`true`/`1`/`yes`,
/// `false`/`0`/`no`); unset or empty is `false`.
///
/// # Errors
/// [`Error::InvalidInput`] for any other value, naming the variable.
pub fn env_bool(name: &str) -> Result<bool> {
    match env(name).as_deref() {
        None | Some("false" | "0" | "no") => Ok(false),
        Some("true" | "1" | "yes") => Ok(true),
        Some(other) => Err(Error::invalid_input(format!(
            "{name}={other:?}: expected true or false"
        ))),
    }
}

/// The value of the first of `names` that is set and not empty: a
/// config's `from_env`, where the project's own variable comes before the
/// ecosystem's conventional one (`DATABASE_URL`, `REDIS_URL`, …).
///
/// # Errors
/// [`Error::InvalidInput`] naming every variable tried, when none is set.
pub fn env_any(names: &[&str]) -> Result<String> {
    names.iter().find_map(|name| env(name)).ok_or_else(|| {
        Error::invalid_input(match names {
            [one] => format!("{one} is not set"),
            [a, b] => format!("neither {a} nor {b} is set"),
            _ => format!("none of {} is set", names.join(", ")),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(Error::InvalidInput { message }) => message,
            other => panic!("expected InvalidInput, got {other:?}"),
        }
    }

    #[test]
    fn splits_scheme_authority_path_and_query() {
        let mut url = BackendUrl::parse("ZK://a:1,b:2/locks/x?token=czxid").unwrap();
        assert_eq!(url.scheme(), "zk");
        assert_eq!(url.authority(), "a:1,b:2");
        assert_eq!(url.path(), "/locks/x");
        assert_eq!(url.query().take("token").as_deref(), Some("czxid"));
        assert!(url.query().is_empty());
        let url = BackendUrl::parse("s3://bucket").unwrap();
        assert_eq!((url.authority(), url.path()), ("bucket", ""));
        assert!(url.expect_no_path("s3://BUCKET").is_ok());
        let url = BackendUrl::parse("s3://bucket/sub").unwrap();
        assert!(invalid(url.expect_no_path("s3://BUCKET")).contains("\"/sub\""));
    }

    #[test]
    fn refuses_what_is_not_a_url() {
        assert!(invalid(BackendUrl::parse("bucket")).contains("scheme://"));
        assert!(invalid(BackendUrl::parse("://x")).contains("scheme"));
        assert!(invalid(BackendUrl::parse("s3://b?a=1&a=2")).contains("twice"));
        assert!(invalid(BackendUrl::parse("s3://b?a=%zz")).contains("percent"));
        assert!(invalid(BackendUrl::parse("s3://b?a=%4")).contains("percent"));
    }

    #[test]
    fn values_are_percent_decoded_and_plus_is_kept() {
        let mut q = Query::parse("sas=sv%3D1%26sig%3Da+b%2F").unwrap();
        assert_eq!(q.take("sas").as_deref(), Some("sv=1&sig=a+b/"));
    }

    #[test]
    fn booleans_are_strict() {
        let mut q = Query::parse("a=true&b=0&c=yes&d=ture&e=").unwrap();
        assert_eq!(q.take_bool("a").unwrap(), Some(true));
        assert_eq!(q.take_bool("b").unwrap(), Some(false));
        assert_eq!(q.take_bool("c").unwrap(), Some(true));
        assert!(invalid(q.take_bool("d")).contains("d=\"ture\""));
        assert!(invalid(q.take_bool("e")).contains("expected true or false"));
        assert_eq!(q.take_bool("absent").unwrap(), None);
    }

    #[test]
    fn durations_need_a_unit() {
        let mut q = Query::parse("a=500ms&b=2s&c=1m&d=1h&e=5&f=1.5s&g=s").unwrap();
        assert_eq!(
            q.take_duration("a").unwrap(),
            Some(Duration::from_millis(500))
        );
        assert_eq!(q.take_duration("b").unwrap(), Some(Duration::from_secs(2)));
        assert_eq!(q.take_duration("c").unwrap(), Some(Duration::from_secs(60)));
        assert_eq!(
            q.take_duration("d").unwrap(),
            Some(Duration::from_secs(3600))
        );
        for key in ["e", "f", "g"] {
            assert!(invalid(q.take_duration(key)).contains("500ms"));
        }
    }

    #[test]
    fn numbers_and_empty_values() {
        let mut q = Query::parse("n=3&m=x&e=").unwrap();
        assert_eq!(q.take_parsed::<u32>("n").unwrap(), Some(3));
        assert!(invalid(q.take_parsed::<u32>("m")).starts_with("m=\"x\""));
        assert!(invalid(q.take_nonempty("e")).contains("needs a value"));
    }

    #[test]
    fn unknown_options_are_named_with_the_known_ones() {
        let mut q = Query::parse("endpoint=x&adopt_unfencd=true").unwrap();
        q.take("endpoint");
        let message = invalid(q.finish(&["endpoint", "adopt_unfenced"]));
        assert!(message.contains("\"adopt_unfencd\""), "{message}");
        assert!(message.contains("endpoint, adopt_unfenced"), "{message}");
    }
}
