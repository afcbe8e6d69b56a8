//! A backend described once: its schemes, what it opens, its URL options
//! and how to open it from a URL.
//!
//! Each backend crate exports one [`Descriptor`] (`fencing_redis::BACKEND`).
//! The facade's registry, `fence --help`'s URL grammar, the README's
//! backend table and the integration matrix are all generated from the
//! descriptors, and a backend's `from_url` parses its URL with
//! [`Descriptor::parse`]: an unknown option is refused naming the known
//! ones, and every value is checked against its declared [`OptionKind`]
//! here, once for every backend.
//!
//! ```
//! use fencing_core::adapter::descriptor::{Descriptor, OptionKind, UrlOption};
//!
//! const MEM: Descriptor = Descriptor {
//!     name: "mem",
//!     title: "In-memory",
//!     crate_name: "fencing-mem",
//!     features: &["mem"],
//!     schemes: &["mem"],
//!     shape: "mem://NAME",
//!     options: &[
//!         UrlOption::new("ttl", OptionKind::Duration, "the default TTL").default("1s"),
//!         UrlOption::new("key", OptionKind::Text, "an access key").secret(),
//!     ],
//!     tls_modes: &[],
//!     check: |_| Ok(()),
//!     open_issuer: None,
//!     open_store: None,
//! };
//! let mut url = MEM.parse("mem://x?ttl=2s")?;
//! assert_eq!(url.query().take_duration("ttl")?, Some(std::time::Duration::from_secs(2)));
//! MEM.finish(url)?;
//! let typo = MEM.parse("mem://x?tll=2s").unwrap_err().to_string();
//! assert!(typo.contains("\"tll\"") && typo.contains("ttl, key"), "{typo}");
//! assert!(MEM.parse("mem://x?ttl=2").is_err()); // a duration needs its unit
//! # Ok::<(), fencing_core::Error>(())
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::url::{BackendUrl, Query, parse_duration};
use crate::instrument::Instrumented;
use crate::tls::TlsMode;
#[cfg(test)]
use crate::tls::TlsOptions;
use crate::{Error, FencedStore, Result, TokenIssuer};

/// What a backend opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A [`TokenIssuer`].
    Issuer,
    /// A [`FencedStore`].
    Store,
}

impl Role {
    /// `"issuer"` or `"store"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Issuer => "issuer",
            Self::Store => "store",
        }
    }
}

/// The type of an option's value, checked by [`Descriptor::parse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OptionKind {
    /// `true`/`1`/`yes` or `false`/`0`/`no`: a typo must not read as a
    /// choice.
    Bool,
    /// An integer and `ms`, `s`, `m` or `h` (a bare number is refused: its
    /// unit would be a guess).
    Duration,
    /// A non-negative integer.
    Count,
    /// Any text but the empty one.
    Text,
    /// A file's path.
    Path,
    /// One of these words.
    Choice(&'static [&'static str]),
    /// An `sslmode=` the backend's client can do.
    TlsMode(&'static [TlsMode]),
}

impl OptionKind {
    /// The value's placeholder in a grammar line (`DURATION`, `a|b`).
    pub fn placeholder(self) -> String {
        match self {
            Self::Bool => "true|false".to_owned(),
            Self::Duration => "DURATION".to_owned(),
            Self::Count => "N".to_owned(),
            Self::Text => "TEXT".to_owned(),
            Self::Path => "PATH".to_owned(),
            Self::Choice(words) => words.join("|"),
            Self::TlsMode(modes) => modes
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join("|"),
        }
    }

    /// Whether `value` is one of this kind; the message says what was
    /// expected.
    fn check(self, value: &str) -> std::result::Result<(), String> {
        let ok = match self {
            Self::Bool => matches!(value, "true" | "1" | "yes" | "false" | "0" | "no"),
            Self::Duration => parse_duration(value).is_some(),
            Self::Count => value.parse::<u64>().is_ok(),
            Self::Text | Self::Path => !value.is_empty(),
            Self::Choice(words) => words.contains(&value),
            Self::TlsMode(modes) => modes.iter().any(|m| m.as_str() == value),
        };
        if ok {
            return Ok(());
        }
        Err(match self {
            Self::Bool => "expected true or false".to_owned(),
            Self::Duration => "expected a duration like 500ms, 2s, 1m or 1h".to_owned(),
            Self::Count => "expected a whole number".to_owned(),
            Self::Text | Self::Path => "needs a value".to_owned(),
            Self::Choice(_) | Self::TlsMode(_) => {
                format!("expected one of {}", self.placeholder().replace('|', ", "))
            }
        })
    }
}

/// One `key=value` option of a backend's URLs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UrlOption {
    /// The key (`prefix`).
    pub name: &'static str,
    /// Its value's type.
    pub kind: OptionKind,
    /// What an absent option means, for the docs (`fencing:`, `1s`).
    pub default: Option<&'static str>,
    /// One line: what it does.
    pub doc: &'static str,
    /// Whether its value is a credential: [`crate::redact()`] hides it.
    pub secret: bool,
    /// The schemes that take it (empty: all of the backend's).
    pub schemes: &'static [&'static str],
}

impl UrlOption {
    /// An option of every scheme of the backend, no default, not secret.
    pub const fn new(name: &'static str, kind: OptionKind, doc: &'static str) -> Self {
        Self {
            name,
            kind,
            default: None,
            doc,
            secret: false,
            schemes: &[],
        }
    }

    /// What an absent option means.
    #[must_use]
    pub const fn default(mut self, default: &'static str) -> Self {
        self.default = Some(default);
        self
    }

    /// Its value is a credential.
    #[must_use]
    pub const fn secret(mut self) -> Self {
        self.secret = true;
        self
    }

    /// Only these schemes take it (a driver option of one database).
    #[must_use]
    pub const fn only(mut self, schemes: &'static [&'static str]) -> Self {
        self.schemes = schemes;
        self
    }

    /// Whether a `scheme://` URL takes it.
    pub fn applies_to(&self, scheme: &str) -> bool {
        self.schemes.is_empty() || self.schemes.contains(&scheme)
    }
}

/// The TLS options ([`TlsOptions::URL_OPTIONS`]) of a backend whose client
/// can do `modes`.
fn tls_options(modes: &'static [TlsMode]) -> [UrlOption; 4] {
    [
        UrlOption::new(
            "sslmode",
            OptionKind::TlsMode(modes),
            "disable: plaintext; prefer: TLS if offered; require: TLS, no certificate check; verify-ca: the chain; verify-full: chain and host name",
        ),
        UrlOption::new(
            "sslrootcert",
            OptionKind::Path,
            "trust the CA certificates in this PEM file (alone: verify-full)",
        ),
        UrlOption::new(
            "sslcert",
            OptionKind::Path,
            "present this client certificate (PEM), with sslkey",
        ),
        UrlOption::new(
            "sslkey",
            OptionKind::Path,
            "the client certificate's key (PEM)",
        ),
    ]
}

/// An issuer as a descriptor's `open_issuer` returns it: instrumented
/// ([`Instrumented`]: the metrics of `docs/metrics.md` and `tracing` spans),
/// shared. Do not wrap it again.
///
/// # Errors
/// Never; a `Result` so an opener ends with it.
pub fn issuer(inner: impl TokenIssuer + 'static) -> Result<Arc<dyn TokenIssuer>> {
    Ok(Arc::new(Instrumented::new(inner)))
}

/// A store as a descriptor's `open_store` returns it: instrumented, shared.
///
/// # Errors
/// Never; a `Result` so an opener ends with it.
pub fn store(inner: impl FencedStore + 'static) -> Result<Arc<dyn FencedStore>> {
    Ok(Arc::new(Instrumented::new(inner)))
}

/// A boxed future opening a backend.
pub type Opening<T> = Pin<Box<dyn Future<Output = Result<Arc<T>>> + Send + 'static>>;

/// Opens a backend from a URL of one of its schemes.
pub type Open<T> = fn(String) -> Opening<T>;

/// Everything the rest of the workspace needs to know of a backend.
#[derive(Clone, Copy)]
pub struct Descriptor {
    /// Its name, also the integration matrix's (`redis`).
    pub name: &'static str,
    /// What people call it (`Redis`).
    pub title: &'static str,
    /// The crate (`fencing-redis`).
    pub crate_name: &'static str,
    /// The features of the `fencing-tokens` crate that bring it in.
    pub features: &'static [&'static str],
    /// The URL schemes it takes, the usual one first.
    pub schemes: &'static [&'static str],
    /// The URL's shape without options (`redis[s]://[USER:PASS@]HOST[:PORT][/DB]`).
    pub shape: &'static str,
    /// Its own URL options (not the TLS ones).
    pub options: &'static [UrlOption],
    /// The `sslmode=` values its client can do; empty: it takes no TLS
    /// option (its client's TLS is configured otherwise, or it has none).
    pub tls_modes: &'static [TlsMode],
    /// Checks a URL as opening it would, without connecting (`from_url`):
    /// for `fence doctor`, a config check, and the test that every declared
    /// option is read.
    pub check: fn(&str) -> Result<()>,
    /// Opens its issuer, if it is one ([`issuer`] instruments it).
    pub open_issuer: Option<Open<dyn TokenIssuer>>,
    /// Opens its store, if it is one ([`store`] instruments it).
    pub open_store: Option<Open<dyn FencedStore>>,
}

impl fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Descriptor")
            .field("name", &self.name)
            .field("schemes", &self.schemes)
            .field("issuer", &self.opens(Role::Issuer))
            .field("store", &self.opens(Role::Store))
            .finish_non_exhaustive()
    }
}

impl Descriptor {
    /// Whether it opens `role`.
    pub fn opens(&self, role: Role) -> bool {
        match role {
            Role::Issuer => self.open_issuer.is_some(),
            Role::Store => self.open_store.is_some(),
        }
    }

    /// What it opens, for docs (`store and issuer`).
    pub fn roles(&self) -> &'static str {
        match (self.opens(Role::Store), self.opens(Role::Issuer)) {
            (true, true) => "store and issuer",
            (true, false) => "store",
            (false, true) => "issuer",
            (false, false) => "nothing",
        }
    }

    /// Whether `scheme` is one of its schemes.
    pub fn takes(&self, scheme: &str) -> bool {
        self.schemes.contains(&scheme)
    }

    /// Every option, its own then the TLS ones.
    pub fn options(&self) -> Vec<UrlOption> {
        let mut all = self.options.to_vec();
        if !self.tls_modes.is_empty() {
            all.extend(tls_options(self.tls_modes));
        }
        all
    }

    /// The options a `scheme://` URL takes.
    pub fn options_of(&self, scheme: &str) -> Vec<UrlOption> {
        self.options()
            .into_iter()
            .filter(|o| o.applies_to(scheme))
            .collect()
    }

    /// Checks every option of `query` against [`options_of`](Self::options_of)
    /// `scheme`: known, and a value of its kind.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming an unknown option and the known
    /// ones, or an option and what its value should be.
    pub fn check_query(&self, scheme: &str, query: &Query) -> Result<()> {
        let known = self.options_of(scheme);
        for (key, value) in query.pairs() {
            let Some(option) = known.iter().find(|o| o.name == key) else {
                let names: Vec<&str> = known.iter().map(|o| o.name).collect();
                return Err(Error::invalid_input(format!(
                    "unknown option {key:?} in a {scheme}:// URL; known options: {}",
                    names.join(", ")
                )));
            };
            if let Err(expected) = option.kind.check(value) {
                let shown = if option.secret { "***" } else { value };
                return Err(Error::invalid_input(format!("{key}={shown:?}: {expected}")));
            }
        }
        Ok(())
    }

    /// Splits `url`, which must have one of its schemes, and checks its
    /// options ([`check_query`](Self::check_query)); take them from
    /// [`BackendUrl::query`], then [`finish`](Self::finish).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for another scheme (naming the shape), or
    /// as [`BackendUrl::parse`] and [`check_query`](Self::check_query).
    pub fn parse(&self, url: &str) -> Result<BackendUrl> {
        let what = format!("{} URL ({})", with_article(self.title), self.shape);
        let mut parsed = BackendUrl::parse_as(url, self.schemes, &what)?;
        let scheme = parsed.scheme().to_owned();
        self.check_query(&scheme, parsed.query())?;
        Ok(parsed)
    }

    /// Ends a [`parse`](Self::parse): every option was checked there, so
    /// one left untaken is the adapter's bug, refused rather than ignored.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the option left.
    pub fn finish(&self, mut url: BackendUrl) -> Result<()> {
        match url.query().pairs().next() {
            None => Ok(()),
            Some((key, _)) => Err(Error::invalid_input(format!(
                "option {key:?} is declared by {} but was not read: a bug in {}",
                self.crate_name, self.crate_name
            ))),
        }
    }
}

/// `title` after "a" or "an" as it is read aloud: an etcd, an S3 (an
/// acronym read by letters), a GCS, a Redis.
fn with_article(title: &str) -> String {
    let word = title.split(' ').next().unwrap_or(title);
    let first = word.chars().next().unwrap_or('x');
    let acronym = word
        .chars()
        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    let vowel_sound = "aeiouAEIOU".contains(first) || (acronym && "FHLMNRSX".contains(first));
    format!("{} {title}", if vowel_sound { "an" } else { "a" })
}

#[cfg(test)]
mod tests;
