//! [`Target`]: where and how to reach Redis (address, database, login,
//! TLS), parsed from a URL and handed to redis-rs as a `ConnectionInfo`, so
//! no text of the URL (its password) reaches a redis-rs message.

use fencing_core::adapter::url::BackendUrl;
use fencing_core::auth::Credentials;
use fencing_core::tls::{TlsMode, TlsOptions};
use fencing_core::{Error, Result};
use redis::{
    ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, TlsCertificates,
};

/// What a Redis URL looks like, for the messages that refuse one.
pub(crate) const SHAPE: &str = "redis[s]://[USER:PASSWORD@]HOST[:PORT][/DB]";

const DEFAULT_PORT: u16 = 6379;

/// The modes redis-rs can do: no `prefer` (Redis has no STARTTLS), no
/// `verify-ca` (rustls checks the chain together with the host name).
pub(crate) const OFFERED: &[TlsMode] = &[TlsMode::Disable, TlsMode::Require, TlsMode::VerifyFull];

/// One Redis server, its database, the login and the TLS options.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    host: String,
    port: u16,
    db: i64,
    /// `rediss://`: TLS (`verify-full`) unless an option says otherwise.
    tls_scheme: bool,
    /// `AUTH [USER] PASSWORD` after connecting.
    pub(crate) credentials: Option<Credentials>,
    pub(crate) tls: TlsOptions,
}

impl Target {
    /// Parses `redis[s]://[USER:PASSWORD@]HOST[:PORT][/DB]` and takes the
    /// TLS options from its query; the caller refuses the rest
    /// ([`BackendUrl::finish`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for no host, several hosts, a bad port or
    /// database, a user name without a password, or TLS options that do not
    /// fit together or that redis-rs cannot do. No message shows the
    /// password.
    pub(crate) fn take_from(url: &mut BackendUrl) -> Result<Self> {
        let (credentials, hosts) = Credentials::split_authority(url.authority())?;
        let (host, port) = host_port(hosts)?;
        let target = Self {
            host,
            port,
            db: database(url.path())?,
            tls_scheme: url.scheme() == "rediss",
            credentials,
            tls: url.query().take_tls()?,
        };
        target.mode()?;
        target.check_credentials()?;
        Ok(target)
    }

    /// [`take_from`](Self::take_from) a whole URL, which may carry the TLS
    /// options and no other.
    ///
    /// # Errors
    /// As [`take_from`](Self::take_from), another scheme, or another option.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let mut parsed =
            BackendUrl::parse_as(url, &["redis", "rediss"], &format!("a Redis URL ({SHAPE})"))?;
        let target = Self::take_from(&mut parsed)?;
        parsed.finish(TlsOptions::URL_OPTIONS)?;
        Ok(target)
    }

    /// The TLS mode in force: the option's, else `verify-full` for
    /// `rediss://` or a CA / client certificate, else plaintext.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a mode redis-rs cannot do, `rediss://`
    /// with `sslmode=disable`, or `sslmode=require` with a CA file.
    pub(crate) fn mode(&self) -> Result<TlsMode> {
        let default = if self.tls_scheme {
            TlsMode::VerifyFull
        } else {
            TlsMode::Disable
        };
        let mode = self
            .tls
            .mode_for("Redis", default, OFFERED)
            .map_err(|e| match e {
                Error::InvalidInput { message } if message.contains("verify-ca") => {
                    Error::invalid_input(format!(
                        "{message} (redis-rs checks the certificate chain only together with the host name)"
                    ))
                }
                other => other,
            })?;
        match mode {
            TlsMode::Disable if self.tls_scheme => Err(Error::invalid_input(
                "rediss:// with sslmode=disable contradict each other: use redis:// for plaintext",
            )),
            TlsMode::Require if self.tls.ca_file().is_some() => Err(Error::invalid_input(
                "sslmode=require checks no certificate, so sslrootcert would be ignored: \
                 use sslmode=verify-full to check the server against that CA",
            )),
            mode => Ok(mode),
        }
    }

    /// `host:port` (`[v6]:port`), for messages and the transport check.
    pub(crate) fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// A user name alone would log in as nobody: redis-rs sends `AUTH`
    /// only with a password.
    fn check_credentials(&self) -> Result<()> {
        match &self.credentials {
            Some(c) if !c.user.is_empty() && c.password.is_none() => {
                // The name is not quoted: a token pasted as the user is a secret.
                Err(Error::invalid_input(
                    "a Redis user without a password: Redis logs in with AUTH USER PASSWORD, so give \
                 redis[s]://USER:PASSWORD@HOST (a user with `nopass` takes any password)",
                ))
            }
            _ => Ok(()),
        }
    }

    /// A redis-rs client for this target (nothing is connected yet), and
    /// the TLS mode it uses. The CA and client certificate files are read
    /// here.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] as [`mode`](Self::mode), for credentials
    /// set without a password, or TLS files that cannot be read or parsed
    /// (naming the file, never what a key file holds).
    pub(crate) fn client(&self) -> Result<(redis::Client, TlsMode)> {
        let mode = self.mode()?;
        self.check_credentials()?;
        let addr = match mode {
            TlsMode::Disable => ConnectionAddr::Tcp(self.host.clone(), self.port),
            _ => ConnectionAddr::TcpTls {
                host: self.host.clone(),
                port: self.port,
                insecure: mode == TlsMode::Require,
                tls_params: None,
            },
        };
        let mut login = RedisConnectionInfo::default().set_db(self.db);
        if let Some(credentials) = &self.credentials {
            if !credentials.user.is_empty() {
                login = login.set_username(&credentials.user);
            }
            if let Some(password) = &credentials.password {
                login = login.set_password(password.expose());
            }
        }
        let info = addr
            .into_connection_info()
            .map_err(|e| Error::invalid_input(format!("Redis address {}: {e}", self.address())))?
            .set_redis_settings(login);
        let root_cert = self.tls.read_ca()?;
        let client_tls = self.tls.read_identity()?.map(|identity| ClientTlsConfig {
            client_cert: identity.cert,
            client_key: identity.key.expose().clone(),
        });
        let client = if root_cert.is_none() && client_tls.is_none() {
            redis::Client::open(info)
        } else {
            redis::Client::build_with_tls(
                info,
                TlsCertificates {
                    client_tls,
                    root_cert,
                },
            )
        };
        let client = client.map_err(|e| self.unusable_files(&e))?;
        Ok((client, mode))
    }

    /// What redis-rs said of PEM files that [`TlsOptions`] read: names the
    /// file; of a key, never what redis-rs quotes from it.
    fn unusable_files(&self, e: &redis::RedisError) -> Error {
        let text = e.to_string();
        let (what, path) = if text.contains("private key") {
            let key = self.tls.client_cert_files().map(|(_, key)| key);
            return Error::invalid_input(format!(
                "the client key (sslkey) {} holds no private key redis-rs can use",
                key.map_or_else(String::new, |k| k.display().to_string())
            ));
        } else if text.contains("client certificate") {
            (
                "client certificate (sslcert)",
                self.tls.client_cert_files().map(|(cert, _)| cert),
            )
        } else {
            ("CA file (sslrootcert)", self.tls.ca_file())
        };
        Error::invalid_input(format!(
            "the {what} {} cannot be used: {text}",
            path.map_or_else(String::new, |p| p.display().to_string())
        ))
    }
}

/// `HOST[:PORT]` or `[V6][:PORT]`.
fn host_port(hosts: &str) -> Result<(String, u16)> {
    no_fragment(hosts)?;
    if hosts.is_empty() {
        return Err(Error::invalid_input(format!(
            "no Redis host: expected {SHAPE}"
        )));
    }
    if hosts.contains(',') {
        return Err(Error::invalid_input(format!(
            "several Redis hosts ({hosts}): the Redis issuer takes one server (no Cluster or Sentinel); expected {SHAPE}"
        )));
    }
    let (host, port) = match hosts.strip_prefix('[') {
        Some(v6) => {
            let (host, rest) = v6.split_once(']').ok_or_else(|| {
                Error::invalid_input(format!("Redis host {hosts:?}: no closing ']'"))
            })?;
            match rest {
                "" => (host, None),
                _ => match rest.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None => {
                        return Err(Error::invalid_input(format!(
                            "Redis host {hosts:?}: expected [IPV6]:PORT"
                        )));
                    }
                },
            }
        }
        None => match hosts.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => {
                return Err(Error::invalid_input(format!(
                    "Redis host {hosts:?}: an IPv6 address goes in brackets, [IPV6]:PORT"
                )));
            }
            Some((host, port)) => (host, Some(port)),
            None => (hosts, None),
        },
    };
    if host.is_empty() {
        return Err(Error::invalid_input(format!(
            "no Redis host: expected {SHAPE}"
        )));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => port.parse().map_err(|_| {
            Error::invalid_input(format!(
                "Redis port {port:?} is not a port number (1-65535)"
            ))
        })?,
    };
    Ok((host.to_owned(), port))
}

/// `/DB` (none: 0).
fn database(path: &str) -> Result<i64> {
    no_fragment(path)?;
    match path.trim_start_matches('/') {
        "" => Ok(0),
        db => db.parse::<u32>().map(i64::from).map_err(|_| {
            Error::invalid_input(format!(
                "Redis database {db:?} is not a number: expected {SHAPE}"
            ))
        }),
    }
}

/// redis-rs's `#insecure` is not taken: the option says it.
fn no_fragment(part: &str) -> Result<()> {
    if part.contains('#') {
        return Err(Error::invalid_input(
            "a URL fragment (#insecure) is not taken: sslmode=require is TLS without a certificate check",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use fencing_testkit::refusal::{assert_refused, invalid_input_message};

    use super::*;

    fn target(url: &str) -> Target {
        Target::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    #[test]
    fn address_database_and_login_come_from_the_url() {
        let t = target("rediss://fencing:p%40ss@h:6390/3");
        assert_eq!((t.host.as_str(), t.port, t.db), ("h", 6390, 3));
        let login = t.credentials.as_ref().unwrap();
        assert_eq!((login.user.as_str(), login.password()), ("fencing", "p@ss"));
        assert_eq!(t.mode().unwrap(), TlsMode::VerifyFull);
        assert!(!format!("{t:?}").contains("p@ss"));

        let t = target("redis://h");
        assert_eq!(
            (t.port, t.db, t.mode().unwrap()),
            (6379, 0, TlsMode::Disable)
        );
        assert!(t.credentials.is_none());
        assert_eq!(target("redis://[::1]:7000/").address(), "[::1]:7000");
        assert_eq!(target("redis://[::1]").port, 6379);
        let only_password = target("redis://:pw@h:1").credentials.unwrap();
        assert_eq!(
            (only_password.user.as_str(), only_password.password()),
            ("", "pw")
        );
    }

    #[test]
    fn tls_follows_the_scheme_and_the_options() {
        let mode = |url| target(url).mode().unwrap();
        assert_eq!(mode("redis://h?sslrootcert=/ca.pem"), TlsMode::VerifyFull);
        assert_eq!(
            mode("redis://h?sslcert=/c.pem&sslkey=/k.pem"),
            TlsMode::VerifyFull
        );
        assert_eq!(mode("redis://h?sslmode=verify-full"), TlsMode::VerifyFull);
        assert_eq!(mode("redis://h?sslmode=require"), TlsMode::Require);
        assert_eq!(mode("rediss://h?sslmode=require"), TlsMode::Require);
        assert_eq!(mode("redis://h?sslmode=disable"), TlsMode::Disable);
        assert_eq!(mode("REDISS://h"), TlsMode::VerifyFull);
    }

    #[test]
    fn the_client_gets_the_login_and_the_tls_asked_for() {
        let (client, mode) = target("redis://app:pw@h:1/2?sslmode=require")
            .client()
            .unwrap();
        assert_eq!(mode, TlsMode::Require);
        let info = client.get_connection_info();
        assert!(
            matches!(info.addr(), ConnectionAddr::TcpTls { host, port: 1, insecure: true, .. } if host == "h"),
            "{:?}",
            info.addr()
        );
        let login = info.redis_settings();
        assert_eq!(
            (login.username(), login.password(), login.db()),
            (Some("app"), Some("pw"), 2)
        );

        let (client, _) = target("rediss://h:1").client().unwrap();
        assert!(matches!(
            client.get_connection_info().addr(),
            ConnectionAddr::TcpTls {
                insecure: false,
                ..
            }
        ));
        let (client, mode) = target("redis://:pw@h:1").client().unwrap();
        assert_eq!(mode, TlsMode::Disable);
        assert!(matches!(
            client.get_connection_info().addr(),
            ConnectionAddr::Tcp(..)
        ));
        let login = client.get_connection_info().redis_settings();
        assert_eq!((login.username(), login.password()), (None, Some("pw")));
    }

    #[test]
    fn bad_urls_are_refused_by_name_without_the_password() {
        let cases: &[(&str, &[&str])] = &[
            ("redis://:PW@host/notadb", &["\"notadb\" is not a number"]),
            ("redis://:PW@host/-1", &["\"-1\" is not a number"]),
            ("redis://:PW@host:port", &["\"port\" is not a port number"]),
            ("redis://:PW@", &["no Redis host"]),
            ("redis://:PW@:6379", &["no Redis host"]),
            ("redis://u:PW@h1:1,h2:2", &["one server"]),
            ("redis://u:PW@[::1:1", &["no closing"]),
            ("redis://u:PW@::1:6379", &["in brackets"]),
            ("rediss://u:PW@h/#insecure", &["sslmode=require"]),
            ("rediss://u:PW@h#insecure", &["sslmode=require"]),
            (
                "rediss://u:PW@h?sslmode=verify-ca",
                &["verify-ca", "disable, require, verify-full", "host name"],
            ),
            (
                "rediss://u:PW@h?sslmode=prefer",
                &["prefer", "disable, require, verify-full"],
            ),
            (
                "rediss://u:PW@h?sslmode=disable",
                &["contradict", "redis://"],
            ),
            (
                "redis://u:PW@h?sslmode=require&sslrootcert=/ca.pem",
                &["would be ignored", "verify-full"],
            ),
            ("redis://u:PW@h?sslcert=/c.pem", &["without sslkey"]),
            ("redis://u:PW@h?protocol=3", &["\"protocol\"", "sslmode"]),
            ("redis://someone@h", &["user without a password"]),
            ("http://u:PW@h", &["not a Redis URL"]),
            ("redis:/u:PW@h", &["not a backend URL"]),
        ];
        assert_refused(Target::parse, cases);
        for (url, _) in cases {
            let message = invalid_input_message(url, Target::parse(url));
            assert!(!message.contains("PW"), "{url}: {message}");
        }
    }

    #[test]
    fn unusable_tls_files_are_named_never_quoted() {
        let dir = std::env::temp_dir().join(format!("fencing-redis-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = dir.join("cert.pem");
        std::fs::write(
            &cert,
            "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let key = dir.join("key.pem");
        std::fs::write(
            &key,
            "-----BEGIN PRIVATE KEY-----\nhunter2!\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let mut t = target("rediss://h:1");
        t.tls = TlsOptions::new().with_client_cert(&cert, &key);
        let message = invalid_input_message("bad key", t.client().map(|_| ()));
        assert!(
            message.contains("sslkey")
                && message.contains("key.pem")
                && message.contains("redis-rs"),
            "{message}"
        );
        assert!(!message.contains("hunter2"), "{message}");
        t.tls = TlsOptions::new().with_ca_file(dir.join("missing.pem"));
        let message = invalid_input_message("missing CA", t.client().map(|_| ()));
        assert!(message.contains("missing.pem"), "{message}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
