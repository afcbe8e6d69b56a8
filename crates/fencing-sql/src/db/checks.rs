//! What the issuer and `fence doctor` check on a live session: commits a
//! crash can lose, the transport, and MySQL's autocommit.

#[cfg(feature = "mysql")]
use fencing_core::Error;
use fencing_core::Result;
use fencing_core::adapter::Call;
use fencing_core::safety::SafetyCheck;
use fencing_core::tls::{TlsMode, TlsOptions};

use super::{Db, Pool};
#[cfg(feature = "mysql")]
use crate::Dialect;
use crate::error::map_error;

impl Db {
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
}
