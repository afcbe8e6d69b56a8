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
//! use fencing_core::url::BackendUrl;
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

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::{Error, Result};

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
fn parse_duration(value: &str) -> Option<Duration> {
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

/// Decodes `%XX` escapes; `+` is left as it is (base64 in a SAS uses it).
pub(crate) fn percent_decode(s: &str) -> Result<String> {
    if !s.contains('%') {
        return Ok(s.to_owned());
    }
    let bad = || Error::invalid_input(format!("bad percent-encoding in URL option {s:?}"));
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// Option names whose values are secrets wherever they appear (compared
/// without case, `-` as `_`): an Azure SAS or its signature, an S3
/// presigned URL's signature and credential, passwords, keys, tokens.
const SECRET_OPTIONS: &[&str] = &[
    "sas",
    "sig",
    "password",
    "pass",
    "passwd",
    "pwd",
    "sslpassword",
    "key",
    "account_key",
    "accountkey",
    "access_key",
    "secret",
    "secret_key",
    "secret_access_key",
    "token",
    "access_token",
    "session_token",
    "security_token",
    "credentials",
    "sharedaccesssignature",
    "x_amz_signature",
    "x_amz_credential",
    "x_amz_security_token",
];

/// The one redaction of the workspace, for every message, `Debug` print
/// and report that shows a URL (the CLI's too): the password of
/// `user:password@` is replaced by `***` (also when it holds a raw `/`,
/// `?` or `@`, and in a mistyped URL without `://`), and so is the value of
/// every secret option (`sas`, `sig`, `password`, `key`, `token`,
/// `X-Amz-Signature`, …), also inside an option whose value is itself a
/// URL. Other options stay readable.
pub fn redact(url: &str) -> String {
    let Some(i) = url.find("://") else {
        return redact_typo(url);
    };
    let (head, rest) = url.split_at(i + 3);
    // The authority ends at the first `/` or `?` after its last `@`: a
    // password may hold a raw `/`, `?` or `@` (a malformed URL, but one
    // people write), and it must not show in the message that says so.
    let end = match rest.find('@') {
        Some(at) => at + rest[at..].find(['/', '?']).unwrap_or(rest.len() - at),
        None => rest.find(['/', '?']).unwrap_or(rest.len()),
    };
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) if userinfo.contains(':') => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{user}:***@{host}")
        }
        _ => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => format!("{path}?{}", redact_query(query)),
        None => tail.to_owned(),
    };
    format!("{head}{authority}{tail}")
}

/// A URL without `://` (`redis:/u:PW@h`, `u:PW@h`): everything between the
/// first `:` and the last `@` of the authority goes, user name included,
/// since which colon starts the password cannot be told.
fn redact_typo(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = match (base.find(':'), base.rfind('@')) {
        (Some(colon), Some(at)) if colon < at => format!("{}***{}", &base[..=colon], &base[at..]),
        _ => base.to_owned(),
    };
    if let Some(query) = query {
        out.push('?');
        out.push_str(&redact_query(query));
    }
    out
}

/// `a=1&sig=x&endpoint=https://u:p@h` → `a=1&sig=***&endpoint=https://u:***@h`;
/// a value that is a URL once percent-decoded is redacted decoded.
fn redact_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if is_secret_option(key) => format!("{key}=***"),
            Some((key, value)) => {
                let decoded = percent_decode(value).unwrap_or_else(|_| value.to_owned());
                if decoded.contains("://") || decoded.contains('?') {
                    format!("{key}={}", redact_embedded(&decoded))
                } else {
                    pair.to_owned()
                }
            }
            None => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A decoded option value that holds a URL or a query of its own (an Azure
/// SAS URL given as `endpoint=`).
fn redact_embedded(value: &str) -> String {
    if value.contains("://") {
        redact(value)
    } else {
        redact_query(value)
    }
}

fn is_secret_option(key: &str) -> bool {
    let key = key.trim().to_ascii_lowercase().replace('-', "_");
    SECRET_OPTIONS.contains(&key.as_str())
}

/// `text` (an SDK's error message) with every URL in it redacted (some
/// SDKs print the request URL, SAS signature and all), and every
/// `Key=value;` pair of a connection string whose key is a secret
/// (`Password=…;`, `AccountKey=…;`).
pub fn redact_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        // Back to the start of the scheme, forward to the end of the URL:
        // whitespace or a quote; a closing bracket or stop at its very end
        // belongs to the sentence (`(https://…)`), not the URL.
        let scheme_start = rest[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || "+-.".contains(c)))
            .map_or(0, |j| j + 1);
        let mut end = rest[i..]
            .find(|c: char| c.is_whitespace() || "\"'<>`".contains(c))
            .map_or(rest.len(), |j| i + j);
        while end > i + 3 && rest[..end].ends_with([')', ']', '}', ',', '.', ';', ':']) {
            end -= 1;
        }
        out.push_str(&rest[..scheme_start]);
        out.push_str(&redact(&rest[scheme_start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    redact_connection_string(&out)
}

/// `Host=h;Password=pw;` → `Host=h;Password=***;`.
fn redact_connection_string(text: &str) -> String {
    if !text.contains('=') || !text.contains(';') {
        return text.to_owned();
    }
    text.split_inclusive(';')
        .map(|part| {
            let body = part.strip_suffix(';').unwrap_or(part);
            let key_start = body
                .rfind(|c: char| c.is_whitespace() || c == '"' || c == '\'')
                .map_or(0, |j| j + 1);
            match body[key_start..].split_once('=') {
                Some((key, _)) if is_secret_option(key) => {
                    let semicolon = if part.ends_with(';') { ";" } else { "" };
                    format!("{}{key}=***{semicolon}", &body[..key_start])
                }
                _ => part.to_owned(),
            }
        })
        .collect()
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

/// The message of an [`Error::InvalidInput`]: what a config's tests check.
///
/// # Panics
/// For anything else, naming `what` (the URL tried).
#[doc(hidden)]
pub fn invalid_input_message<T: fmt::Debug>(what: &str, result: Result<T>) -> String {
    match result {
        Err(Error::InvalidInput { message }) => message,
        other => panic!("{what}: expected InvalidInput, got {other:?}"),
    }
}

/// Asserts that `parse` refuses each URL with an [`Error::InvalidInput`]
/// whose message mentions every fragment listed for it: a config's
/// refusals, as a table.
///
/// # Panics
/// On the first URL accepted or refused otherwise, or whose message lacks
/// a fragment.
#[doc(hidden)]
pub fn assert_refused<T: fmt::Debug>(parse: impl Fn(&str) -> Result<T>, cases: &[(&str, &[&str])]) {
    for (url, fragments) in cases {
        let message = invalid_input_message(url, parse(url));
        for fragment in *fragments {
            assert!(
                message.contains(fragment),
                "{url}: {message:?} does not mention {fragment:?}"
            );
        }
    }
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

    #[test]
    fn redaction_hides_passwords_and_secret_values_only() {
        assert_eq!(
            redact("postgres://u:secret@h/db?sslmode=require&password=pw"),
            "postgres://u:***@h/db?sslmode=require&password=***"
        );
        assert_eq!(
            redact("az://c?endpoint=https://a.blob.core.windows.net&sas=sv%3D1%26sig%3Dx"),
            "az://c?endpoint=https://a.blob.core.windows.net&sas=***"
        );
        assert_eq!(redact("etcd://h:1"), "etcd://h:1");
        assert_eq!(redact("redis://:pw@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact("etcd://user:pw@h:1,g:2"), "etcd://user:***@h:1,g:2");
        assert_eq!(redact("sqlite:///tmp/a.db"), "sqlite:///tmp/a.db");
        assert_eq!(
            redact("s3://b?Secret-Key=x&region=r"),
            "s3://b?Secret-Key=***&region=r"
        );
        assert_eq!(
            redact("postgres://h/db?user=u&password=secret&sslmode=disable"),
            "postgres://h/db?user=u&password=***&sslmode=disable"
        );
        assert_eq!(
            redact("s3://b/k?X-Amz-Signature=abc&X-Amz-Credential=AKID%2F1"),
            "s3://b/k?X-Amz-Signature=***&X-Amz-Credential=***"
        );
        assert_eq!(
            redact("postgres://h/db?email=a@b.c"),
            "postgres://h/db?email=a@b.c"
        );
        assert_eq!(
            redact("postgres://u:p@h/db?email=a@b.c"),
            "postgres://u:***@h/db?email=a@b.c"
        );
    }

    #[test]
    fn raw_slashes_question_marks_and_ats_in_a_password_are_hidden() {
        for (url, shown) in [
            (
                "postgres://fencing:pa/ss@127.0.0.1:5433/db",
                "postgres://fencing:***@127.0.0.1:5433/db",
            ),
            ("redis://u:pa?ss@h:1", "redis://u:***@h:1"),
            ("mysql://u:p@ss@h/db", "mysql://u:***@h/db"),
            ("redis://u:pa)ss@h:1/0", "redis://u:***@h:1/0"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn mistyped_urls_lose_everything_between_the_first_colon_and_the_at() {
        assert_eq!(redact("redis:/u:PW@h"), "redis:***@h");
        assert_eq!(redact("redis:u:p:w@h"), "redis:***@h");
        assert_eq!(redact("u:PW@h:1"), "u:***@h:1");
        assert_eq!(redact("no-url-at-all"), "no-url-at-all");
    }

    #[test]
    fn urls_inside_option_values_are_redacted() {
        // An Azure "Blob service SAS URL", percent-encoded as the docs say.
        let shown = redact(
            "az://c?endpoint=https%3A%2F%2Facct.blob.core.windows.net%2F%3Fsv%3D1%26sig%3DSIGNATURE",
        );
        assert!(!shown.contains("SIGNATURE"), "{shown}");
        assert!(shown.contains("acct.blob.core.windows.net"), "{shown}");
        let shown = redact("s3://b?endpoint=https://user:PW@minio.internal:9000");
        assert!(
            !shown.contains("PW") && shown.contains("minio.internal"),
            "{shown}"
        );
    }

    #[test]
    fn urls_inside_a_message_are_redacted() {
        let message = "error sending request for url (https://acct.blob.core.windows.net/c/k?sv=1&sig=SIGNATURE&se=2): 403";
        let shown = redact_text(message);
        assert!(!shown.contains("SIGNATURE"), "{shown}");
        assert!(
            shown.starts_with("error sending request for url (https://acct.blob"),
            "{shown}"
        );
        assert!(shown.ends_with("&se=2): 403"), "{shown}");
        assert_eq!(redact_text("no url here"), "no url here");
        assert_eq!(
            redact_text("to redis://u:PW@h:1 and postgres://p:Q@h/d."),
            "to redis://u:***@h:1 and postgres://p:***@h/d."
        );
        assert_eq!(
            redact_text("url \"redis://u:pa)ss@h:1\", then"),
            "url \"redis://u:***@h:1\", then"
        );
    }

    #[test]
    fn secret_pairs_of_connection_strings_are_redacted() {
        assert_eq!(
            redact_text("Host=db;Username=u;Password=hunter2;Database=x"),
            "Host=db;Username=u;Password=***;Database=x"
        );
        assert_eq!(
            redact_text(
                "bad: DefaultEndpointsProtocol=https;AccountName=a;AccountKey=KEY==;EndpointSuffix=core.windows.net"
            ),
            "bad: DefaultEndpointsProtocol=https;AccountName=a;AccountKey=***;EndpointSuffix=core.windows.net"
        );
        assert_eq!(redact_text("a; b=c; d"), "a; b=c; d");
    }
}
