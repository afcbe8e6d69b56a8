//! TLS for every network backend, parsed and checked once.
//!
//! Every backend's config takes the same URL options, named as libpq names
//! them (the most widely known set), and hands the parsed [`TlsOptions`] to
//! its client library's own TLS (rustls in every SDK here):
//!
//! | URL option | meaning |
//! | --- | --- |
//! | `sslmode=disable\|prefer\|require\|verify-ca\|verify-full` | plaintext; TLS if the server offers it (SQL only); encrypted without checking the certificate; the chain checked; the chain and the host name checked |
//! | `sslrootcert=PATH` | the CA certificates (PEM) to trust instead of the system roots: a private CA |
//! | `sslcert=PATH`, `sslkey=PATH` | a client certificate and its key (PEM), for mutual TLS |
//!
//! With no `sslmode`, a CA or client certificate means `verify-full`, and a
//! TLS scheme (`rediss://`, an `https://` endpoint) too; otherwise the
//! connection is plaintext, as before. A backend offers the modes its
//! client library can do ([`TlsOptions::mode_for`] refuses the others by
//! name). An adapter takes these options from its URL with
//! [`Query::take_tls`](crate::adapter::url::Query::take_tls); a program
//! may build them by hand. Passwords are not TLS: see [`crate::auth`].
//!
//! ```
//! use fencing_core::tls::{TlsMode, TlsOptions};
//!
//! let tls = TlsOptions::new().with_ca_file("/etc/ca.pem");
//! assert_eq!(tls.mode(TlsMode::Disable), TlsMode::VerifyFull);
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::auth::Secret;
use crate::safety::SafetyCheck;
use crate::{Error, Result};

/// How a connection is protected, from none to a fully checked certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TlsMode {
    /// Plaintext.
    Disable,
    /// TLS if the server offers it, else plaintext: what the SQL drivers
    /// do when no mode is given. Anyone on the path can force plaintext;
    /// only the SQL backends offer it, and `fence doctor` reports what the
    /// session really got.
    Prefer,
    /// Encrypted, but any certificate is accepted: no protection against a
    /// machine in the middle. `fence doctor` warns of it.
    Require,
    /// The certificate chain is checked against the trusted CAs, the host
    /// name is not.
    VerifyCa,
    /// The chain and the host name are checked.
    VerifyFull,
}

impl TlsMode {
    /// Its `sslmode=` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    /// Whether the connection is sure to be encrypted.
    pub fn encrypted(self) -> bool {
        !matches!(self, Self::Disable | Self::Prefer)
    }
}

impl fmt::Display for TlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TlsMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "disable" => Ok(Self::Disable),
            "prefer" => Ok(Self::Prefer),
            "require" => Ok(Self::Require),
            "verify-ca" => Ok(Self::VerifyCa),
            "verify-full" => Ok(Self::VerifyFull),
            // libpq's `allow` starts in plaintext and tries TLS only if refused.
            "allow" => Err(Error::invalid_input(
                "sslmode=allow is not offered: it starts in plaintext; use disable, prefer, require, verify-ca or verify-full",
            )),
            other => Err(Error::invalid_input(format!(
                "sslmode={other:?}: expected disable, prefer, require, verify-ca or verify-full"
            ))),
        }
    }
}

/// The TLS options of one connection: a mode, trusted CAs, a client
/// identity. Paths only; the files are read at connect, and a key file's
/// contents never appear in a message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsOptions {
    mode: Option<TlsMode>,
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
}

/// A client certificate chain and its private key, as PEM.
pub struct Identity {
    /// The certificate chain (PEM).
    pub cert: Vec<u8>,
    /// The private key (PEM). Never printed.
    pub key: Secret<Vec<u8>>,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("cert", &format_args!("{} bytes", self.cert.len()))
            .field("key", &self.key)
            .finish()
    }
}

impl TlsOptions {
    /// The URL options of the table above, which
    /// [`Query::take_tls`](crate::adapter::url::Query::take_tls) reads.
    pub const URL_OPTIONS: &'static [&'static str] =
        &["sslmode", "sslrootcert", "sslcert", "sslkey"];

    /// No TLS option set: the backend's default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The options as a URL gave them, checked together (a certificate
    /// and its key come in pairs; `sslmode=disable` takes no file), unlike
    /// the builders below, which cannot be given half a pair.
    pub(crate) fn from_url_options(
        mode: Option<TlsMode>,
        ca_file: Option<PathBuf>,
        cert_file: Option<PathBuf>,
        key_file: Option<PathBuf>,
    ) -> Result<Self> {
        let options = Self {
            mode,
            ca_file,
            cert_file,
            key_file,
        };
        options.check()?;
        Ok(options)
    }

    /// The mode, whatever the files would imply.
    #[must_use]
    pub fn with_mode(mut self, mode: TlsMode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Trusts the CA certificates in `path` (PEM) instead of the system
    /// roots.
    #[must_use]
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Presents the client certificate in `cert` with the key in `key`
    /// (both PEM), for mutual TLS.
    #[must_use]
    pub fn with_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.cert_file = Some(cert.into());
        self.key_file = Some(key.into());
        self
    }

    /// Whether no option is set.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The mode in force: the one set, else `verify-full` when a CA or a
    /// client certificate is given, else `default` (the scheme's: plaintext
    /// for `redis://`, `verify-full` for `rediss://`).
    pub fn mode(&self, default: TlsMode) -> TlsMode {
        match self.mode {
            Some(mode) => mode,
            None if self.ca_file.is_some() || self.cert_file.is_some() => TlsMode::VerifyFull,
            None => default,
        }
    }

    /// The mode in force, refused unless `backend`'s client can do it.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the mode and the ones `backend` offers.
    pub fn mode_for(
        &self,
        backend: &str,
        default: TlsMode,
        offered: &[TlsMode],
    ) -> Result<TlsMode> {
        self.check()?;
        let mode = self.mode(default);
        if offered.contains(&mode) {
            return Ok(mode);
        }
        let names: Vec<&str> = offered.iter().map(|m| m.as_str()).collect();
        Err(Error::invalid_input(format!(
            "sslmode={mode} is not offered by {backend}'s client; use one of {}",
            names.join(", ")
        )))
    }

    /// The CA file, if one is given.
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    /// The client certificate and key files, if given.
    pub fn client_cert_files(&self) -> Option<(&Path, &Path)> {
        self.cert_file.as_deref().zip(self.key_file.as_deref())
    }

    /// The trusted CA certificates (PEM), if a CA file is given.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the file when it cannot be read or
    /// holds no PEM certificate.
    pub fn read_ca(&self) -> Result<Option<Vec<u8>>> {
        self.ca_file
            .as_deref()
            .map(|path| read_pem(path, "CA file (sslrootcert)", "CERTIFICATE"))
            .transpose()
    }

    /// The client identity, if a certificate and key are given.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the file that cannot be read or holds
    /// no PEM of the right kind (never what the key file holds).
    pub fn read_identity(&self) -> Result<Option<Identity>> {
        let Some((cert, key)) = self.client_cert_files() else {
            return Ok(None);
        };
        Ok(Some(Identity {
            cert: read_pem(cert, "client certificate (sslcert)", "CERTIFICATE")?,
            key: Secret::new(read_pem(key, "client key (sslkey)", "PRIVATE KEY")?),
        }))
    }

    /// [`transport_check`](Self::transport_check) of an SDK's endpoint
    /// URL: the SDKs check the certificate and host name of every
    /// `https://` endpoint, and send anything else in plaintext.
    pub fn endpoint_check(endpoint: &str) -> SafetyCheck {
        let mode = if endpoint.starts_with("https://") {
            TlsMode::VerifyFull
        } else {
            TlsMode::Disable
        };
        Self::transport_check(mode, &[endpoint])
    }

    /// What `fence doctor` says of this connection to `hosts` in `mode`:
    /// plaintext past the loopback, or an unchecked certificate, is a
    /// warning.
    pub fn transport_check(mode: TlsMode, hosts: &[&str]) -> SafetyCheck {
        const NAME: &str = "transport";
        match mode {
            TlsMode::VerifyFull => {
                SafetyCheck::pass(NAME, "TLS, certificate and host name checked")
            }
            TlsMode::VerifyCa => SafetyCheck::pass(
                NAME,
                "TLS, certificate chain checked (not the host name: sslmode=verify-full checks it too)",
            ),
            TlsMode::Require => SafetyCheck::warn(
                NAME,
                "TLS without a certificate check (sslmode=require): anyone on the path can pose as the server; use sslmode=verify-full",
            ),
            TlsMode::Prefer => match hosts.iter().find(|h| !is_loopback(h)) {
                Some(host) => SafetyCheck::warn(
                    NAME,
                    format!(
                        "TLS to {host} only if the server offers it, its certificate unchecked (sslmode=prefer, the driver's default): anyone on the path can force plaintext or pose as the server; use sslmode=verify-full"
                    ),
                ),
                None => {
                    SafetyCheck::pass(NAME, "sslmode=prefer (the driver's default), loopback only")
                }
            },
            TlsMode::Disable => match hosts.iter().find(|h| !is_loopback(h)) {
                Some(host) => SafetyCheck::warn(
                    NAME,
                    format!(
                        "plaintext to {host}: passwords and data cross the network unencrypted; use TLS (sslmode=verify-full)"
                    ),
                ),
                None => SafetyCheck::pass(NAME, "plaintext, loopback only"),
            },
        }
    }

    fn check(&self) -> Result<()> {
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) => {
                return Err(Error::invalid_input(
                    "sslcert is given without sslkey: a client certificate needs its key",
                ));
            }
            (None, Some(_)) => {
                return Err(Error::invalid_input(
                    "sslkey is given without sslcert: a client key needs its certificate",
                ));
            }
            _ => {}
        }
        if self.mode == Some(TlsMode::Disable)
            && (self.ca_file.is_some() || self.cert_file.is_some())
        {
            return Err(Error::invalid_input(
                "sslmode=disable with sslrootcert or sslcert: certificates need TLS; drop one or the other",
            ));
        }
        Ok(())
    }
}

/// Whether `host` (`h`, `h:port`, `[::1]:port`, `http://h:port`) is this
/// machine.
fn is_loopback(host: &str) -> bool {
    let host = host.split_once("://").map_or(host, |(_, rest)| rest);
    let host = host.split(['/', '?']).next().unwrap_or(host);
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        })
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn read_pem(path: &Path, what: &str, label: &str) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| {
        Error::invalid_input(format!("cannot read the {what} {}: {e}", path.display()))
    })?;
    // "PRIVATE KEY" also matches "RSA PRIVATE KEY" and "EC PRIVATE KEY".
    let marker = format!("{label}-----");
    if !bytes.windows(marker.len()).any(|w| w == marker.as_bytes())
        || !bytes.windows(11).any(|w| w == b"-----BEGIN ")
    {
        return Err(Error::invalid_input(format!(
            "the {what} {} holds no PEM {label}",
            path.display()
        )));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::invalid_input_message;
    use crate::safety::Verdict;

    #[test]
    fn files_are_read_at_connect_and_named_when_wrong() {
        let dir = std::env::temp_dir().join(format!("fencing-tls-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(
            &ca,
            "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let key = dir.join("key.pem");
        std::fs::write(&key, "not a key: hunter2").unwrap();
        let tls = TlsOptions::new().with_ca_file(&ca);
        assert!(tls.read_ca().unwrap().is_some());
        let missing = TlsOptions::new().with_ca_file(dir.join("nope.pem"));
        assert!(invalid_input_message("missing", missing.read_ca()).contains("nope.pem"));
        let bad = TlsOptions::new().with_client_cert(&ca, &key);
        let message = invalid_input_message("bad key", bad.read_identity());
        assert!(
            message.contains("key.pem") && message.contains("PRIVATE KEY"),
            "{message}"
        );
        assert!(!message.contains("hunter2"), "{message}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn doctor_warns_of_plaintext_past_the_loopback_and_of_unchecked_certificates() {
        let verdict = |mode, hosts: &[&str]| TlsOptions::transport_check(mode, hosts).verdict;
        assert_eq!(
            verdict(
                TlsMode::Disable,
                &["127.0.0.1:2379", "localhost", "[::1]:1"]
            ),
            Verdict::Pass
        );
        assert_eq!(
            verdict(TlsMode::Disable, &["127.0.0.1:1", "10.0.0.2:2379"]),
            Verdict::Warn
        );
        assert_eq!(
            verdict(TlsMode::Disable, &["http://db.internal:5432"]),
            Verdict::Warn
        );
        assert_eq!(verdict(TlsMode::Require, &["127.0.0.1"]), Verdict::Warn);
        assert_eq!(verdict(TlsMode::Prefer, &["127.0.0.1"]), Verdict::Pass);
        assert_eq!(verdict(TlsMode::Prefer, &["db.internal"]), Verdict::Warn);
        assert_eq!(verdict(TlsMode::VerifyCa, &["db"]), Verdict::Pass);
        assert_eq!(verdict(TlsMode::VerifyFull, &["db"]), Verdict::Pass);
    }
}
