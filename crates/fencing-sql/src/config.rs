//! [`SqlConfig`]: a SQL store or issuer from a URL, the environment or
//! setters.

use fencing_core::adapter::descriptor::{self, Descriptor, OptionKind, UrlOption};
use fencing_core::adapter::url::{Query, env_any};
use fencing_core::redact;
use fencing_core::tls::{TlsMode, TlsOptions};
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

/// Not `verify-ca`: sqlx checks the chain against the public (webpki)
/// roots as well as `sslrootcert`, and skips the host name there, so any
/// publicly trusted certificate for any name would pass.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) const TLS_MODES: &[TlsMode] = &[
    TlsMode::Disable,
    TlsMode::Prefer,
    TlsMode::Require,
    TlsMode::VerifyFull,
];
/// SQLite is a local file: no TLS.
#[cfg(not(any(feature = "postgres", feature = "mysql")))]
pub(crate) const TLS_MODES: &[TlsMode] = &[];

const DRIVER: &str = "passed to the driver";

/// The option list: those given whole, then each driver's plain ones, by
/// kind, present with the driver's feature.
macro_rules! options {
    (
        [$($whole:tt)*]
        $($feature:literal, $schemes:ident => $($kind:ident: $($name:literal),+);+)|*
    ) => {
        &[
            $($whole)*
            $($($(
                #[cfg(feature = $feature)]
                UrlOption::new($name, OptionKind::$kind, DRIVER).only($schemes),
            )+)+)*
        ]
    };
}

/// The SQL backend, as the registry, `fence --help` and the README see it.
/// Its options are ours (`fencing_…`) and the ones each driver reads (sqlx
/// 0.8), which go to the driver as written: the drivers drop any other
/// with at most a log line, so a `channel_binding=require` or a typo would
/// be believed and not enforced, and is refused instead.
pub const BACKEND: Descriptor = Descriptor {
    name: "sql",
    title: "SQL",
    crate_name: "fencing-sql",
    features: &["sqlite", "postgres", "mysql"],
    schemes: &[
        #[cfg(feature = "sqlite")]
        "sqlite",
        #[cfg(feature = "postgres")]
        "postgres",
        #[cfg(feature = "postgres")]
        "postgresql",
        #[cfg(feature = "mysql")]
        "mysql",
        #[cfg(feature = "mysql")]
        "mariadb",
    ],
    shape: "postgres://USER:PASS@HOST[:PORT]/DB, mysql://… (mariadb://…), sqlite://PATH, sqlite::memory:",
    options: options!([
        UrlOption::new(TABLE_PREFIX, OptionKind::Text, "the tables' name prefix")
            .default(Tables::DEFAULT_PREFIX),
        UrlOption::new(
            ACCEPT_VOLATILE,
            OptionKind::Bool,
            "accept a server whose commits a crash can lose: tests and demos only",
        )
        .default("false"),
        #[cfg(feature = "postgres")]
        UrlOption::new("password", OptionKind::Text, DRIVER)
            .secret()
            .only(POSTGRES),
        #[cfg(feature = "sqlite")]
        UrlOption::new("mode", OptionKind::Choice(&["ro", "rw", "rwc", "memory"]), DRIVER)
            .only(SQLITE),
        #[cfg(feature = "sqlite")]
        UrlOption::new("cache", OptionKind::Choice(&["shared", "private"]), DRIVER).only(SQLITE),
    ]
    "postgres", POSTGRES => Text: "host", "hostaddr", "dbname", "user", "application_name", "options"; Count: "port", "statement-cache-capacity"
    | "mysql", MYSQL => Text: "charset", "collation", "timezone", "time-zone"; Path: "socket"; Count: "statement-cache-capacity"
    | "sqlite", SQLITE => Bool: "immutable"; Text: "vfs"
    ),
    tls_modes: TLS_MODES,
    check: |url| SqlConfig::from_url(url).map(drop),
    open_issuer: Some(|url| {
        Box::pin(
            async move { descriptor::issuer(SqlConfig::from_url(&url)?.connect_issuer().await?) },
        )
    }),
    open_store: Some(|url| {
        Box::pin(
            async move { descriptor::store(SqlConfig::from_url(&url)?.connect_store().await?) },
        )
    }),
};

#[cfg(feature = "postgres")]
const POSTGRES: &[&str] = &["postgres", "postgresql"];
#[cfg(feature = "mysql")]
const MYSQL: &[&str] = &["mysql", "mariadb"];
#[cfg(feature = "sqlite")]
const SQLITE: &[&str] = &["sqlite"];

/// A SQL database by URL: `postgres://…`, `mysql://…` (`mariadb://…`),
/// `sqlite://PATH` (created if missing, WAL journal) or `sqlite::memory:`;
/// the one builder of a [`Db`], [`SqlStore`] or [`SqlIssuer`] by URL. The URL is the driver's (sqlx's),
/// with the options of its driver that [`BACKEND`] lists; this crate adds
/// two,
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
    /// Parses a database URL, taking our options and the TLS ones out of
    /// it; the driver's options stay in the URL as written (a boolean
    /// spelt `true`, as the driver reads it).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a scheme this build does not support
    /// (naming the features), an option that is not one of [`BACKEND`]'s
    /// for the scheme (naming the known ones) or not of its kind, a
    /// driver's own TLS spelling (`ssl-mode`, `ssl-ca`…), a TLS option on
    /// `sqlite://`, TLS options that do not fit together, or a bad table
    /// prefix.
    pub fn from_url(url: &str) -> Result<Self> {
        let scheme = url.split_once(':').map_or("", |(s, _)| s);
        if !BACKEND.takes(scheme) {
            return Err(unsupported(url));
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        // Before `check_query`, whose "unknown option" would not say where
        // TLS went.
        let raw_pairs: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
        for pair in &raw_pairs {
            let name = pair.split_once('=').map_or(*pair, |(name, _)| name);
            if DRIVER_TLS_OPTIONS.contains(&name) {
                return Err(Error::invalid_input(format!(
                    "option {name:?}: TLS takes the options every fencing backend takes: {}",
                    TlsOptions::URL_OPTIONS.join(", ")
                )));
            }
            if scheme == "sqlite" && TlsOptions::URL_OPTIONS.contains(&name) {
                return Err(Error::invalid_input(
                    "a sqlite:// URL takes no TLS option: SQLite is a local file",
                ));
            }
        }
        let mut options = Query::parse(query)?;
        BACKEND.check_query(scheme, &options)?;
        let volatile_commits_accepted = options.take_bool(ACCEPT_VOLATILE)?.unwrap_or(false);
        let tables = match options.take(TABLE_PREFIX) {
            Some(prefix) => Tables::from_prefix(&prefix)?,
            None => Tables::default(),
        };
        let tls = TlsOptions::take_from(&mut options)?;
        // What is left goes to the driver; one of ours left over was
        // declared and never read (`Descriptor::finish`).
        if let Some((name, _)) = options
            .pairs()
            .find(|(name, _)| name.starts_with("fencing_"))
        {
            return Err(Error::invalid_input(format!(
                "option {name:?} is declared by fencing-sql but was not read: a bug in fencing-sql"
            )));
        }
        let mut driver = Vec::new();
        for pair in raw_pairs {
            let (name, value) = Query::parse(pair)?
                .pairs()
                .next()
                .map(|(n, v)| (n.to_owned(), v.to_owned()))
                .unwrap_or_default();
            if !options.pairs().any(|(left, _)| left == name) {
                continue; // ours or TLS, taken above
            }
            let kind = BACKEND
                .options_of(scheme)
                .into_iter()
                .find(|o| o.name == name);
            driver.push(match kind.map(|o| o.kind) {
                // One boolean rule for every backend; the driver's own is
                // narrower.
                Some(OptionKind::Bool) => {
                    let on = matches!(value.as_str(), "true" | "1" | "yes");
                    format!("{name}={on}")
                }
                _ => (*pair).to_owned(),
            });
        }
        let url = if driver.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", driver.join("&"))
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

    /// Opens the pool: a [`Db`] on the tables, for
    /// [`SqlStore::new`] and [`SqlIssuer::new`] to share, or for
    /// [`fence_transaction`](crate::fence_transaction).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a URL the driver cannot parse or a TLS
    /// mode it cannot do (the message shows the URL without its
    /// password); [`Error::Tls`] or [`Error::Unauthenticated`] for a
    /// refused handshake or login; [`Error::Backend`] if the server does
    /// not answer.
    pub async fn connect_db(&self) -> Result<Db> {
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
    /// As [`connect_db`](Self::connect_db) and [`SqlStore::new`].
    pub async fn connect_store(&self) -> Result<SqlStore> {
        SqlStore::new(self.connect_db().await?).await
    }

    /// Connects and opens the issuer (creating its tables).
    ///
    /// # Errors
    /// As [`connect_db`](Self::connect_db) and [`SqlIssuer::new`].
    pub async fn connect_issuer(&self) -> Result<SqlIssuer> {
        SqlIssuer::new(self.connect_db().await?).await
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

    /// A pool on `url`, as a caller opens one.
    async fn open(url: &str) -> Result<Db> {
        SqlConfig::from_url(url)?.connect_db().await
    }

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
    fn booleans_follow_the_one_rule_and_reach_the_driver_as_it_reads_them() {
        let c = SqlConfig::from_url("mysql://h/db?fencing_accept_volatile_commits=yes").unwrap();
        assert!(c.volatile_commits_accepted);
        let c = SqlConfig::from_url("postgres://h/db?fencing_accept_volatile_commits=0").unwrap();
        assert!(!c.volatile_commits_accepted);
        let c = SqlConfig::from_url("sqlite:///tmp/x.db?immutable=yes&mode=ro").unwrap();
        assert_eq!(c.url, "sqlite:///tmp/x.db?immutable=true&mode=ro");
        let c = SqlConfig::from_url("sqlite:///tmp/x.db?immutable=no").unwrap();
        assert_eq!(c.url, "sqlite:///tmp/x.db?immutable=false");
    }

    #[test]
    fn sqlite_memory_has_no_authority_and_still_parses() {
        let c = SqlConfig::from_url("sqlite::memory:").unwrap();
        assert_eq!(c.url, "sqlite::memory:");
        let c =
            SqlConfig::from_url("sqlite::memory:?fencing_table_prefix=m_&cache=shared").unwrap();
        assert_eq!(
            (c.url.as_str(), c.tables().records.as_str()),
            ("sqlite::memory:?cache=shared", "m_records")
        );
    }

    /// Every option of [`BACKEND`] is read: ours and TLS taken out of the
    /// URL, the driver's passed on to it, none left over (nor refused as
    /// unknown: the descriptor is the one list).
    #[test]
    fn every_option_of_the_descriptor_is_read() {
        for option in BACKEND.options() {
            let schemes = if option.schemes.is_empty() {
                BACKEND.schemes
            } else {
                option.schemes
            };
            for scheme in schemes {
                let tls = TlsOptions::URL_OPTIONS.contains(&option.name);
                if tls && *scheme == "sqlite" {
                    continue; // refused on purpose: a local file
                }
                let pair = format!(
                    "{}={}",
                    option.name,
                    fencing_testkit::refusal::sample(option.kind)
                );
                let url = format!("{scheme}://u:pw@h/db?{pair}");
                match SqlConfig::from_url(&url) {
                    Ok(c) => {
                        let ours = tls || option.name.starts_with("fencing_");
                        assert_eq!(c.url.contains(&pair), !ours, "{url} -> {}", c.url);
                    }
                    Err(e) => {
                        let e = e.to_string();
                        assert!(
                            !e.contains("was not read") && !e.contains("unknown option"),
                            "{url}: {e}"
                        );
                    }
                }
            }
        }
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
        // One boolean rule for every backend: `yes` is true, `on` a typo.
        assert!(
            invalid("mysql://h/db?fencing_accept_volatile_commits=on").contains("true or false")
        );
        assert!(invalid("sqlite:///tmp/x.db?immutable=si").contains("true or false"));
        assert!(invalid("postgres://h/db?port=x").contains("whole number"));
        assert!(invalid("sqlite:///tmp/x.db?mode=rwx").contains("ro, rw, rwc, memory"));
        // The known options are the scheme's own, named in one list.
        let unknown = invalid("sqlite:///tmp/x.db?charset=utf8");
        assert!(
            unknown.contains("known options: fencing_table_prefix, fencing_accept_volatile_commits, mode, cache, immutable, vfs"),
            "{unknown}"
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
            let message = invalid_input_message(url, open(url).await);
            assert!(
                message.contains("verify-full") && !message.contains("secret"),
                "{message}"
            );
        }
    }

    /// `connect_db` reads the URL as `from_url` does: our option is taken
    /// out, and no message shows the password (a URL the driver cannot
    /// parse is refused before anything is sent).
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn connect_db_refuses_a_malformed_url_without_showing_its_password() {
        for url in [
            "postgres://u:secret@[::1:5432/x",
            "postgres://u:secret@[::1:5432/x?fencing_table_prefix=t_",
            "oracle://u:secret@h/db",
        ] {
            let message = invalid_input_message(url, open(url).await);
            assert!(!message.contains("secret"), "{message}");
            assert!(message.contains("u:***@"), "{message}");
        }
    }
}
