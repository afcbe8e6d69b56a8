//! [`SqlConfig`]: a SQL store or issuer from a URL, the environment or
//! setters.

use fencing_core::adapter::url::{Query, env_any};
use fencing_core::redact;
use fencing_core::tls::TlsOptions;
use fencing_core::{Error, Result};

use crate::{Db, SqlIssuer, SqlStore, Tables};

/// Our options in a SQL URL; every other option is the driver's, but TLS
/// ([`TlsOptions::URL_OPTIONS`]).
const TABLE_PREFIX: &str = "fencing_table_prefix";
const ACCEPT_VOLATILE: &str = "fencing_accept_volatile_commits";
/// The drivers' own TLS spellings: one set of names for every backend.
const DRIVER_TLS_OPTIONS: &[&str] = &[
    "ssl-mode",
    "ssl-ca",
    "sslca",
    "ssl-root-cert",
    "ssl-cert",
    "ssl-key",
];

/// The options each driver reads (sqlx 0.8). It drops any other one with
/// at most a log line, so a `channel_binding=require` or a typo would be
/// believed and not enforced: refused here instead.
fn driver_options(scheme: &str) -> &'static [&'static str] {
    match scheme {
        "postgres" | "postgresql" => &[
            "statement-cache-capacity",
            "host",
            "hostaddr",
            "port",
            "dbname",
            "user",
            "password",
            "application_name",
            "options",
        ],
        "mysql" | "mariadb" => &[
            "charset",
            "collation",
            "statement-cache-capacity",
            "socket",
            "timezone",
            "time-zone",
        ],
        _ => &["mode", "cache", "immutable", "vfs"],
    }
}

/// A SQL database by URL: `postgres://…`, `mysql://…` (`mariadb://…`),
/// `sqlite://PATH` or `sqlite::memory:`. The URL is the driver's (sqlx's),
/// with its own options; this crate adds two,
/// `fencing_table_prefix=P` (the [`Tables`] prefix, default `fencing_`)
/// and `fencing_accept_volatile_commits=true` (an issuer on a server whose
/// commits a crash can lose, [`Db::accept_volatile_commits`]).
///
/// TLS takes the options every fencing backend takes
/// ([`fencing_core::tls`]): `sslmode=disable|prefer|require|verify-full`
/// (default `prefer`, the drivers' own), `sslrootcert=CA.pem`,
/// `sslcert=…&sslkey=…`, on PostgreSQL and MySQL/MariaDB alike (the MySQL
/// driver's own spellings, `ssl-mode` and `ssl-ca`, are refused, naming
/// these). The password is the URL's `user:password@`. `verify-ca` is
/// refused: sqlx checks a chain against the public roots as well as
/// `sslrootcert` and skips the host name there, so any publicly trusted
/// certificate would pass. `verify-full` checks the host name, against
/// those roots and `sslrootcert` together.
///
/// ```
/// let config = fencing_sql::SqlConfig::from_url("postgres://u:p@127.0.0.1/db?sslmode=disable&fencing_table_prefix=app_")?;
/// assert_eq!(config.tables().records, "app_records");
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone)]
pub struct SqlConfig {
    url: String,
    tables: Tables,
    volatile_commits_accepted: bool,
    tls: TlsOptions,
}

impl std::fmt::Debug for SqlConfig {
    /// Hides the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlConfig")
            .field("url", &redact(&self.url))
            .field("tables", &self.tables)
            .field("volatile_commits_accepted", &self.volatile_commits_accepted)
            .field("tls", &self.tls)
            .finish()
    }
}

impl SqlConfig {
    /// Parses a database URL, taking `fencing_table_prefix=` out of it.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a scheme this build does not support
    /// (naming the features), or a bad table prefix.
    pub fn from_url(url: &str) -> Result<Self> {
        let scheme = url.split_once(':').map_or("", |(s, _)| s);
        let supported = (cfg!(feature = "postgres") && matches!(scheme, "postgres" | "postgresql"))
            || (cfg!(feature = "mysql") && matches!(scheme, "mysql" | "mariadb"))
            || (cfg!(feature = "sqlite") && scheme == "sqlite");
        if !supported {
            return Err(unsupported(url));
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let (mut prefix, mut accept_volatile) = (None, None);
        let (mut rest, mut tls) = (Vec::new(), Vec::new());
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            if TlsOptions::URL_OPTIONS.contains(&name) {
                tls.push(pair);
                continue;
            }
            if DRIVER_TLS_OPTIONS.contains(&name) {
                return Err(Error::invalid_input(format!(
                    "option {name:?}: TLS takes the options every fencing backend takes: {}",
                    TlsOptions::URL_OPTIONS.join(", ")
                )));
            }
            let slot = match (name, pair.contains('=')) {
                (TABLE_PREFIX, true) => &mut prefix,
                (ACCEPT_VOLATILE, true) => &mut accept_volatile,
                // The driver takes the rest, and ignores what it does not
                // know: a typo in one of ours would silently mean other
                // tables (another issuer, tokens from 1 again).
                _ if name.starts_with("fencing_") => {
                    return Err(Error::invalid_input(format!(
                        "unknown option {name:?} in the database URL; this crate's options are \
                         {TABLE_PREFIX} and {ACCEPT_VOLATILE}"
                    )));
                }
                _ if driver_options(scheme).contains(&name) => {
                    rest.push(pair);
                    continue;
                }
                _ => {
                    return Err(Error::invalid_input(format!(
                        "unknown option {name:?} in the database URL: the driver would ignore it;                          known options: {}, {}, {TABLE_PREFIX}, {ACCEPT_VOLATILE}",
                        driver_options(scheme).join(", "),
                        TlsOptions::URL_OPTIONS.join(", "),
                    )));
                }
            };
            if slot.replace(value).is_some() {
                return Err(Error::invalid_input(format!(
                    "option {name:?} is given twice in the URL"
                )));
            }
        }
        let volatile_commits_accepted = match accept_volatile {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(Error::invalid_input(format!(
                    "option {ACCEPT_VOLATILE}={other:?}: expected true or false"
                )));
            }
        };
        let tables = match prefix {
            Some(prefix) => Tables::with_prefix(prefix)?,
            None => Tables::default(),
        };
        let tls = TlsOptions::take_from(&mut Query::parse(&tls.join("&"))?)?;
        if scheme == "sqlite" && !tls.is_default() {
            return Err(Error::invalid_input(
                "a sqlite:// URL takes no TLS option: SQLite is a local file",
            ));
        }
        let url = if rest.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        Ok(Self {
            url,
            tables,
            volatile_commits_accepted,
            tls,
        })
    }

    /// From the environment: `FENCING_SQL_URL`, else the conventional
    /// `DATABASE_URL`, parsed as [`from_url`](Self::from_url).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if neither is set, or as
    /// [`from_url`](Self::from_url).
    pub fn from_env() -> Result<Self> {
        Self::from_url(&env_any(&["FENCING_SQL_URL", "DATABASE_URL"])?)
    }

    /// Other table names.
    #[must_use]
    pub fn with_tables(mut self, tables: Tables) -> Self {
        self.tables = tables;
        self
    }

    /// The tables.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// Accepts a server whose commits a crash can lose (URL option
    /// `fencing_accept_volatile_commits=true`): see
    /// [`Db::accept_volatile_commits`].
    #[must_use]
    pub fn with_volatile_commits_accepted(mut self, accepted: bool) -> Self {
        self.volatile_commits_accepted = accepted;
        self
    }

    /// TLS options (replacing the URL's `sslmode`, `sslrootcert`,
    /// `sslcert`, `sslkey`).
    #[must_use]
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = tls;
        self
    }

    /// The TLS options.
    pub fn tls(&self) -> &TlsOptions {
        &self.tls
    }

    /// Connects: a [`Db`] on the tables.
    ///
    /// # Errors
    /// As [`Db::connect`].
    pub async fn connect(&self) -> Result<Db> {
        let db = Db::open(&self.url, self.tables.clone(), &self.tls).await?;
        Ok(if self.volatile_commits_accepted {
            db.accept_volatile_commits()
        } else {
            db
        })
    }

    /// Connects and opens the store (creating its tables).
    ///
    /// # Errors
    /// As [`Db::connect`] and [`SqlStore::new`].
    pub async fn connect_store(&self) -> Result<SqlStore> {
        SqlStore::new(self.connect().await?).await
    }

    /// Connects and opens the issuer (creating its tables).
    ///
    /// # Errors
    /// As [`Db::connect`] and [`SqlIssuer::new`].
    pub async fn connect_issuer(&self) -> Result<SqlIssuer> {
        SqlIssuer::new(self.connect().await?).await
    }
}

/// A URL whose scheme this build does not open.
pub(crate) fn unsupported(url: &str) -> Error {
    Error::invalid_input(format!(
        "unsupported database URL {:?}: expected postgres://, mysql://, mariadb:// or sqlite:// \
         (with the matching fencing-sql feature enabled)",
        redact(url)
    ))
}

#[cfg(test)]
mod tests {
    use fencing_testkit::refusal::invalid_input_message;

    use super::*;

    #[test]
    fn good_urls() {
        let c = SqlConfig::from_url("sqlite:///tmp/x.db").unwrap();
        assert_eq!(c.tables().records, "fencing_records");
        let c = SqlConfig::from_url(
            "postgres://u:pw@h/db?sslmode=disable&fencing_table_prefix=t_&application_name=a",
        )
        .unwrap();
        assert_eq!(c.url, "postgres://u:pw@h/db?application_name=a");
        assert_eq!(
            c.tls().mode(fencing_core::tls::TlsMode::Prefer),
            fencing_core::tls::TlsMode::Disable
        );
        assert_eq!(c.tables().leases, "t_leases");
        assert!(!format!("{c:?}").contains("pw"));
        let c = SqlConfig::from_url(
            "mysql://u:pw@h/db?sslmode=verify-full&sslrootcert=/ca.pem&sslcert=/c.pem&sslkey=/k.pem&charset=utf8mb4",
        )
        .unwrap();
        assert_eq!(c.url, "mysql://u:pw@h/db?charset=utf8mb4");
        assert_eq!(c.tls().ca_file(), Some(std::path::Path::new("/ca.pem")));
        assert!(c.tls().client_cert_files().is_some());
    }

    #[test]
    fn bad_urls_are_invalid_input_naming_the_problem() {
        let invalid = |url| invalid_input_message(url, SqlConfig::from_url(url));
        assert!(invalid("oracle://h/db").contains("unsupported database URL"));
        assert!(
            invalid("postgres://u:secret@h/db?fencing_table_prefix=a;drop")
                .contains("table prefix")
        );
        assert!(!invalid("oracle://u:secret@h").contains("secret"));
        assert!(
            invalid("sqlite://x?fencing_table_prefix=a&fencing_table_prefix=b").contains("twice")
        );
        // The driver would ignore a misspelt option of ours: other tables.
        let typo = invalid("postgres://u:secret@h/db?fencing_table_prefx=app_");
        assert!(
            typo.contains("\"fencing_table_prefx\"") && typo.contains("fencing_table_prefix"),
            "{typo}"
        );
        assert!(
            invalid("mysql://h/db?fencing_accept_volatile_commits=yes").contains("true or false")
        );
        assert!(invalid("mysql://h/db?ssl-mode=required").contains("sslmode, sslrootcert"));
        assert!(invalid("postgres://h/db?ssl-root-cert=/ca.pem").contains("sslmode, sslrootcert"));
        // Not enforced by the driver: refused rather than believed.
        let binding = invalid("postgres://u:secret@h/db?sslmode=require&channel_binding=require");
        assert!(
            binding.contains("\"channel_binding\"") && binding.contains("application_name"),
            "{binding}"
        );
        assert!(invalid("mysql://h/db?chrset=utf8mb4").contains("charset"));
        assert!(invalid("sqlite:///tmp/x.db?mdoe=ro").contains("mode"));
        assert!(invalid("postgres://h/db?sslcert=/c.pem").contains("without sslkey"));
        assert!(invalid("postgres://h/db?sslmode=allow").contains("allow"));
        assert!(invalid("sqlite:///tmp/x.db?sslmode=require").contains("no TLS option"));
    }

    /// sqlx checks a `verify-ca` chain against the public roots too, and
    /// not the host name: refused before anything is sent.
    #[cfg(all(feature = "postgres", feature = "mysql"))]
    #[tokio::test]
    async fn verify_ca_is_refused_before_connecting() {
        for url in [
            "postgres://u:secret@127.0.0.1:1/db?sslmode=verify-ca",
            "mysql://u:secret@127.0.0.1:1/db?sslmode=verify-ca&sslrootcert=/ca.pem",
        ] {
            let message = invalid_input_message(url, Db::connect(url).await);
            assert!(
                message.contains("verify-full") && !message.contains("secret"),
                "{message}"
            );
        }
    }

    /// `Db::connect` reads the URL as `SqlConfig` does: our option is taken
    /// out, and no message shows the password (a URL the driver cannot
    /// parse is refused before anything is sent).
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn db_connect_refuses_a_malformed_url_without_showing_its_password() {
        for url in [
            "postgres://u:secret@[::1:5432/x",
            "postgres://u:secret@[::1:5432/x?fencing_table_prefix=t_",
            "oracle://u:secret@h/db",
        ] {
            let message = invalid_input_message(url, Db::connect(url).await);
            assert!(!message.contains("secret"), "{message}");
            assert!(message.contains("u:***@"), "{message}");
        }
    }
}
