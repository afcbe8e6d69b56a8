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
        let tls = options.take_tls()?;
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
mod tests;
