//! The connection pool, the dialect, table names and table creation.

use std::fmt;

use fencing_core::adapter::Call;
use fencing_core::redact;
use fencing_core::safety::SafetyCheck;
use fencing_core::tls::{TlsMode, TlsOptions};
use fencing_core::{Error, Result};

use crate::error::map_error;

/// Which SQL database a [`Db`] talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dialect {
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
    /// SQLite.
    Sqlite,
}

impl Dialect {
    /// The backend name used in errors.
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::MySql => "mysql",
            Self::Sqlite => "sqlite",
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Pool {
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlPool),
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
}

/// Like [`on_pool!`], with one body for the dialects whose statements
/// answer with `RETURNING` (PostgreSQL, SQLite) and one for MySQL, which
/// answers through `LAST_INSERT_ID`.
macro_rules! on_returning_pool {
    ($pool:expr, $p:ident => returning: $returning:expr, mysql: $mysql:expr $(,)?) => {
        match $pool {
            #[cfg(feature = "postgres")]
            $crate::db::Pool::Postgres($p) => $returning,
            #[cfg(feature = "sqlite")]
            $crate::db::Pool::Sqlite($p) => $returning,
            #[cfg(feature = "mysql")]
            $crate::db::Pool::MySql($p) => $mysql,
        }
    };
}
pub(crate) use on_returning_pool;

/// Runs the same code on whichever pool is inside: the statements differ by
/// dialect, the calls that run them do not.
macro_rules! on_pool {
    ($pool:expr, $p:ident => $body:expr) => {
        $crate::db::on_returning_pool!($pool, $p => returning: $body, mysql: $body)
    };
}
pub(crate) use on_pool;

/// The names of the tables this crate uses, all sharing one prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tables {
    /// Fenced key-value records: `key`, `value`, `lock_token`. Also the
    /// marks of [`crate::fence_transaction`]'s domains: one row, one mark
    /// per name, whichever API fences it.
    pub records: String,
    /// Legacy: where earlier releases kept [`crate::fence_transaction`]'s
    /// marks (`domain`, `lock_token`). Still created, carried into
    /// `records` when the tables are opened, and read by the guard so that
    /// no mark kept here is lost; nothing writes it any more.
    pub domains: String,
    /// Leases of [`crate::SqlIssuer`].
    pub leases: String,
}

impl Tables {
    /// The default prefix.
    pub const DEFAULT_PREFIX: &'static str = "fencing_";

    /// Tables named `{prefix}records`, `{prefix}domains`, `{prefix}leases`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless the prefix is 1..=40 ASCII letters,
    /// digits or underscores (it is spliced into SQL).
    pub fn with_prefix(prefix: &str) -> Result<Self> {
        let ok = !prefix.is_empty()
            && prefix.len() <= 40
            && prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(Error::invalid_input(format!(
                "table prefix {prefix:?} must be 1..=40 ASCII letters, digits or underscores"
            )));
        }
        Ok(Self {
            records: format!("{prefix}records"),
            domains: format!("{prefix}domains"),
            leases: format!("{prefix}leases"),
        })
    }
}

impl Default for Tables {
    fn default() -> Self {
        Self::with_prefix(Self::DEFAULT_PREFIX).expect("valid default prefix")
    }
}

/// A connection pool to PostgreSQL, MySQL/MariaDB or SQLite, and the tables
/// to use there. Cheap to clone.
#[derive(Clone)]
pub struct Db {
    pub(crate) pool: Pool,
    pub(crate) tables: Tables,
    /// [`Db::accept_volatile_commits`].
    pub(crate) volatile_commits_accepted: bool,
    /// The host and the TLS mode asked for, when known (not for a MySQL
    /// pool passed in).
    transport: Option<(String, TlsMode)>,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db")
            .field("dialect", &self.dialect())
            .field("tables", &self.tables)
            .field("volatile_commits_accepted", &self.volatile_commits_accepted)
            .finish()
    }
}

impl Db {
    /// Opens a pool on `url` (a scheme [`SqlConfig`](crate::SqlConfig)
    /// accepted, without our option) for `tables`. (SQLite takes no TLS:
    /// its config refuses the options.)
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql")),
        allow(unused_variables)
    )]
    pub(crate) async fn open(url: &str, tables: Tables, tls: &TlsOptions) -> Result<Self> {
        let scheme = url.split_once(':').map(|(s, _)| s).unwrap_or_default();
        let pool = match scheme {
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => {
                let options: sqlx::postgres::PgConnectOptions =
                    url.parse().map_err(|e| bad_url(url, e))?;
                let options = postgres_tls(options, tls)?;
                Pool::Postgres(probe_and_open(Dialect::Postgres, options, pool_options()).await?)
            }
            #[cfg(feature = "mysql")]
            "mysql" | "mariadb" => {
                let url = url.replacen("mariadb:", "mysql:", 1);
                let options: sqlx::mysql::MySqlConnectOptions =
                    url.parse().map_err(|e| bad_url(&url, e))?;
                let asked = (mysql_host(&url), tls.mode(TlsMode::Prefer));
                let options = mysql_tls(options, tls)?;
                // A server default of `autocommit=0` (or an `init_connect`
                // setting it) would leave every write in an open transaction,
                // rolled back when the connection closes.
                let pool = pool_options().after_connect(|conn, _| {
                    Box::pin(async move {
                        sqlx::Executor::execute(conn, "SET autocommit = 1").await?;
                        Ok(())
                    })
                });
                let pool = Pool::MySql(probe_and_open(Dialect::MySql, options, pool).await?);
                return Ok(Self {
                    transport: Some(asked),
                    ..Self::on(pool, tables)
                });
            }
            #[cfg(feature = "sqlite")]
            "sqlite" => {
                let options: sqlx::sqlite::SqliteConnectOptions =
                    url.parse().map_err(|e| bad_url(url, e))?;
                let options = options
                    .create_if_missing(true)
                    .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                    .busy_timeout(std::time::Duration::from_secs(30));
                // Every connection to `:memory:` is a database of its own.
                let in_memory = url.contains(":memory:") || url.contains("mode=memory");
                let pool = pool_options().max_connections(if in_memory { 1 } else { 16 });
                Pool::Sqlite(
                    pool.connect_with(options)
                        .await
                        .map_err(|e| map_error(Dialect::Sqlite, e, Call::read("connect")))?,
                )
            }
            _ => return Err(crate::config::unsupported(url)),
        };
        Ok(Self::on(pool, tables))
    }

    fn on(pool: Pool, tables: Tables) -> Self {
        #[allow(unreachable_patterns)]
        let transport = match &pool {
            #[cfg(feature = "postgres")]
            Pool::Postgres(p) => {
                let options = p.connect_options();
                Some((
                    options.get_host().to_owned(),
                    pg_mode(options.get_ssl_mode()),
                ))
            }
            _ => None,
        };
        Self {
            pool,
            tables,
            volatile_commits_accepted: false,
            transport,
        }
    }

    /// Uses an existing PostgreSQL pool (its own TLS settings).
    #[cfg(feature = "postgres")]
    pub fn postgres(pool: sqlx::PgPool) -> Self {
        Self::on(Pool::Postgres(pool), Tables::default())
    }

    /// Uses an existing MySQL/MariaDB pool (its own TLS settings).
    #[cfg(feature = "mysql")]
    pub fn mysql(pool: sqlx::MySqlPool) -> Self {
        Self::on(Pool::MySql(pool), Tables::default())
    }

    /// Uses an existing SQLite pool. Give it a `busy_timeout` (and WAL) so
    /// concurrent writers wait instead of failing with `SQLITE_BUSY`.
    #[cfg(feature = "sqlite")]
    pub fn sqlite(pool: sqlx::SqlitePool) -> Self {
        Self::on(Pool::Sqlite(pool), Tables::default())
    }

    /// Accepts a server whose commits can be lost in a crash (PostgreSQL
    /// `synchronous_commit=off` or `fsync=off`, MySQL/MariaDB
    /// `innodb_flush_log_at_trx_commit` 0 or 2, SQLite `synchronous` below
    /// `FULL` or an in-memory database): [`SqlIssuer::new`](crate::SqlIssuer::new)
    /// refuses such a server otherwise, since a lost commit re-issues its
    /// tokens. Tokens can then go backwards after a crash; `verify` still
    /// reports it as unsafe, and says it was accepted.
    #[must_use]
    pub fn accept_volatile_commits(mut self) -> Self {
        self.volatile_commits_accepted = true;
        self
    }

    /// Why a commit on this pool's sessions may not survive a crash
    /// (`None`: it does, as far as the server's settings tell).
    pub(crate) async fn volatile_commits(&self) -> Result<Option<String>> {
        let d = self.dialect();
        let read = |e| map_error(d, e, Call::read("read the commit settings"));
        let reason = match &self.pool {
            #[cfg(feature = "postgres")]
            Pool::Postgres(p) => {
                let (fsync, synchronous_commit): (String, String) = sqlx::query_as(
                    "SELECT current_setting('fsync'), current_setting('synchronous_commit')",
                )
                .fetch_one(p)
                .await
                .map_err(read)?;
                if fsync == "off" {
                    Some("fsync is off: a crash can lose committed grants (and corrupt the database)".to_owned())
                } else if synchronous_commit == "off" {
                    Some(
                        "synchronous_commit is off: a server crash can lose the last committed grants, \
                         and their tokens are granted again"
                            .to_owned(),
                    )
                } else {
                    None
                }
            }
            #[cfg(feature = "mysql")]
            Pool::MySql(p) => {
                let flush: i64 =
                    sqlx::query_scalar("SELECT CAST(@@innodb_flush_log_at_trx_commit AS SIGNED)")
                        .fetch_one(p)
                        .await
                        .map_err(read)?;
                matches!(flush, 0 | 2).then(|| {
                    format!(
                        "innodb_flush_log_at_trx_commit is {flush}: a crash can lose the last committed \
                         grants, and their tokens are granted again; set it to 1"
                    )
                })
            }
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(p) => {
                let file: String =
                    sqlx::query_scalar("SELECT file FROM pragma_database_list WHERE name = 'main'")
                        .fetch_one(p)
                        .await
                        .map_err(read)?;
                let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
                    .fetch_one(p)
                    .await
                    .map_err(read)?;
                if file.is_empty() {
                    Some("an in-memory database: its counters go when the process does, and its tokens start again at 1".to_owned())
                } else if synchronous < 2 {
                    Some(format!(
                        "synchronous is {synchronous} (below FULL, 2): a crash or power loss can lose the last \
                         committed grants, and their tokens are granted again"
                    ))
                } else {
                    None
                }
            }
        };
        Ok(reason)
    }

    /// What `fence doctor` says of this pool's transport, read off a live
    /// session (what the server agreed to, not only what the URL asked
    /// for): plaintext to a server past the loopback, or TLS without a
    /// certificate check, is a warning.
    // A SQLite-only build returns at the match: nothing after it is used.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql")),
        allow(unused_variables, unreachable_code)
    )]
    pub(crate) async fn transport_check(&self) -> Result<SafetyCheck> {
        let d = self.dialect();
        let read = |e| map_error(d, e, Call::read("read the session's TLS state"));
        let encrypted = match &self.pool {
            #[cfg(feature = "postgres")]
            Pool::Postgres(p) => {
                let ssl: Option<bool> =
                    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                        .fetch_optional(p)
                        .await
                        .map_err(read)?;
                ssl == Some(true)
            }
            #[cfg(feature = "mysql")]
            Pool::MySql(p) => {
                let cipher: Option<(String, String)> =
                    sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
                        .fetch_optional(p)
                        .await
                        .map_err(read)?;
                cipher.is_some_and(|(_, c)| !c.is_empty())
            }
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(_) => {
                return Ok(SafetyCheck::pass("transport", "a local file: no network"));
            }
        };
        let (host, asked) = match &self.transport {
            Some((host, mode)) => (host.as_str(), Some(*mode)),
            None => ("the server", None),
        };
        let mode = match (encrypted, asked) {
            (false, _) => TlsMode::Disable,
            (true, Some(mode)) => mode,
            (true, None) => {
                return Ok(SafetyCheck::pass(
                    "transport",
                    "TLS; the certificate check is the pool's own setting",
                ));
            }
        };
        Ok(TlsOptions::transport_check(mode, &[host]))
    }

    /// Uses other table names.
    #[must_use]
    pub fn with_tables(mut self, tables: Tables) -> Self {
        self.tables = tables;
        self
    }

    /// The tables in use.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// Which database this is.
    pub fn dialect(&self) -> Dialect {
        match &self.pool {
            #[cfg(feature = "postgres")]
            Pool::Postgres(_) => Dialect::Postgres,
            #[cfg(feature = "mysql")]
            Pool::MySql(_) => Dialect::MySql,
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(_) => Dialect::Sqlite,
        }
    }

    /// Creates the three tables if they do not exist, and carries the marks
    /// that earlier releases' [`fence_transaction`](crate::fence_transaction)
    /// kept in the domains table into the records table (the higher mark
    /// wins; once carried, opening again writes nothing).
    ///
    /// # Errors
    /// [`Error::Backend`] if the database refuses (e.g. no `CREATE` right).
    pub async fn create_tables(&self) -> Result<()> {
        for sql in crate::sql::create_tables(self.dialect(), &self.tables) {
            // Two processes creating the same table at once can collide in
            // PostgreSQL's catalog; the second attempt sees the table.
            let mut attempt = 0;
            loop {
                let result =
                    on_pool!(&self.pool, p => sqlx::query(&sql).execute(p).await.map(|_| ()));
                match result {
                    Ok(()) => break,
                    Err(_) if attempt == 0 => {
                        attempt += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                    Err(e) => {
                        return Err(map_error(self.dialect(), e, Call::read("create tables")));
                    }
                }
            }
        }
        self.carry_legacy_marks().await
    }

    /// One row at a time, each its own statement: a single `INSERT …
    /// SELECT` would lock many records at once, in an order that can
    /// deadlock with guarded transactions holding several of them.
    async fn carry_legacy_marks(&self) -> Result<()> {
        let d = self.dialect();
        let select = crate::sql::legacy_marks(d, &self.tables);
        let legacy: Vec<(String, i64)> =
            on_pool!(&self.pool, p => sqlx::query_as(&select).fetch_all(p).await)
                .map_err(|e| map_error(d, e, Call::read("read legacy fence-domain marks")))?;
        let carry = crate::sql::carry_legacy_mark(d, &self.tables);
        for (name, mark) in legacy {
            on_pool!(&self.pool, p => sqlx::query(&carry).bind(&name).bind(mark).execute(p).await.map(|_| ()))
                .map_err(|e| map_error(d, e, Call::write(&format!("carry the legacy mark of {name:?}"))))?;
        }
        Ok(())
    }

    /// Refuses a pool whose sessions would not keep what they accept: on
    /// MySQL/MariaDB, `autocommit` off (a server default, `init_connect`,
    /// or the pool's own `after_connect`) leaves every statement in an open
    /// transaction, invisible to other sessions and rolled back when the
    /// connection closes: a fence that vanishes, a token granted twice.
    /// The pools this crate opens turn it on; a pool passed to
    /// [`Db::mysql`] is checked here, by [`SqlStore::new`](crate::SqlStore::new)
    /// and [`SqlIssuer::new`](crate::SqlIssuer::new).
    pub(crate) async fn check_session(&self) -> Result<()> {
        #[cfg(feature = "mysql")]
        #[allow(irrefutable_let_patterns)]
        if let Pool::MySql(p) = &self.pool {
            let autocommit: i64 = sqlx::query_scalar("SELECT CAST(@@autocommit AS SIGNED)")
                .fetch_one(p)
                .await
                .map_err(|e| map_error(Dialect::MySql, e, Call::read("read autocommit")))?;
            if autocommit != 1 {
                return Err(Error::UnsafeConfiguration {
                    backend: Dialect::MySql.name(),
                    reason: "autocommit is off in this pool's sessions: every write would stay in an open \
                             transaction, rolled back when the connection closes; run `SET autocommit = 1` \
                             in the pool's after_connect (the pools SqlConfig::connect_db opens do)"
                        .into(),
                });
            }
        }
        Ok(())
    }

    /// Drops the three tables (for tests and clean-up).
    ///
    /// # Errors
    /// [`Error::Backend`] if the database refuses.
    pub async fn drop_tables(&self) -> Result<()> {
        for table in [
            &self.tables.records,
            &self.tables.domains,
            &self.tables.leases,
        ] {
            let sql = format!("DROP TABLE IF EXISTS {table}");
            on_pool!(&self.pool, p => sqlx::query(&sql).execute(p).await.map(|_| ()))
                .map_err(|e| map_error(self.dialect(), e, Call::read("drop tables")))?;
        }
        Ok(())
    }

    /// Closes the pool.
    pub async fn close(&self) {
        on_pool!(&self.pool, p => p.close().await);
    }
}

/// Opens and closes one connection first, so a server that is down or
/// refuses the credentials is reported as such (a pool only says it timed
/// out), then opens the pool.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn probe_and_open<DB: sqlx::Database>(
    dialect: Dialect,
    options: <DB::Connection as sqlx::Connection>::Options,
    pool: sqlx::pool::PoolOptions<DB>,
) -> Result<sqlx::Pool<DB>> {
    use sqlx::{ConnectOptions, Connection};
    let failed = |e| map_error(dialect, e, Call::read("connect"));
    let conn = options.connect().await.map_err(failed)?;
    let _ = conn.close().await;
    pool.connect_with(options).await.map_err(failed)
}

fn pool_options<DB: sqlx::Database>() -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .max_connections(16)
        .acquire_timeout(std::time::Duration::from_secs(10))
}

/// The TLS options on PostgreSQL's own (libpq's) modes.
#[cfg(feature = "postgres")]
fn postgres_tls(
    options: sqlx::postgres::PgConnectOptions,
    tls: &TlsOptions,
) -> Result<sqlx::postgres::PgConnectOptions> {
    use sqlx::postgres::PgSslMode;
    if tls.is_default() {
        return Ok(options); // the URL had none: the driver's default, prefer
    }
    let mode = match tls.mode_for("postgres", TlsMode::Prefer, crate::config::TLS_MODES)? {
        TlsMode::Disable => PgSslMode::Disable,
        TlsMode::Prefer => PgSslMode::Prefer,
        TlsMode::Require => PgSslMode::Require,
        TlsMode::VerifyCa => PgSslMode::VerifyCa,
        TlsMode::VerifyFull => PgSslMode::VerifyFull,
    };
    let mut options = options.ssl_mode(mode);
    if let Some(ca) = tls.read_ca()? {
        options = options.ssl_root_cert_from_pem(ca);
    }
    if let Some(identity) = tls.read_identity()? {
        options = options
            .ssl_client_cert_from_pem(identity.cert)
            .ssl_client_key_from_pem(identity.key.expose());
    }
    Ok(options)
}

#[cfg(feature = "postgres")]
fn pg_mode(mode: sqlx::postgres::PgSslMode) -> TlsMode {
    use sqlx::postgres::PgSslMode;
    match mode {
        PgSslMode::Disable => TlsMode::Disable,
        PgSslMode::Allow | PgSslMode::Prefer => TlsMode::Prefer,
        PgSslMode::Require => TlsMode::Require,
        PgSslMode::VerifyCa => TlsMode::VerifyCa,
        PgSslMode::VerifyFull => TlsMode::VerifyFull,
    }
}

/// The TLS options on MySQL's modes (`verify-full` is its `VERIFY_IDENTITY`).
#[cfg(feature = "mysql")]
fn mysql_tls(
    options: sqlx::mysql::MySqlConnectOptions,
    tls: &TlsOptions,
) -> Result<sqlx::mysql::MySqlConnectOptions> {
    use sqlx::mysql::MySqlSslMode;
    if tls.is_default() {
        return Ok(options);
    }
    let mode = match tls.mode_for("mysql", TlsMode::Prefer, crate::config::TLS_MODES)? {
        TlsMode::Disable => MySqlSslMode::Disabled,
        TlsMode::Prefer => MySqlSslMode::Preferred,
        TlsMode::Require => MySqlSslMode::Required,
        TlsMode::VerifyCa => MySqlSslMode::VerifyCa,
        TlsMode::VerifyFull => MySqlSslMode::VerifyIdentity,
    };
    let mut options = options.ssl_mode(mode);
    if let Some(ca) = tls.read_ca()? {
        options = options.ssl_ca_from_pem(ca);
    }
    if let Some(identity) = tls.read_identity()? {
        options = options
            .ssl_client_cert_from_pem(identity.cert)
            .ssl_client_key_from_pem(identity.key.expose());
    }
    Ok(options)
}

/// `mysql://u:p@HOST:port/db` → `HOST`, for the transport check.
#[cfg(feature = "mysql")]
fn mysql_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, h)| h)
        .to_owned()
}

fn bad_url(url: &str, e: sqlx::Error) -> Error {
    Error::invalid_input(format!("malformed database URL {:?}: {e}", redact(url)))
}
