//! The counter issuer on SQL.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use fencing_core::adapter::Call;
use fencing_core::safety::SafetyCheck;
use fencing_core::{
    Error, FencingToken, HolderId, Holding, Lease, LeaseRequest, Removal, Result, TokenIssuer,
};
use sqlx::Row;

use crate::Dialect;
use crate::db::{Db, on_pool, on_returning_pool};
use crate::error::map_error;
use crate::sql;
use crate::wake;

/// A [`TokenIssuer`] on a SQL table of leases: a Hazelcast-style counter per
/// resource.
///
/// Acquire is **one statement**: it takes the lease row if it is free,
/// expired or already ours, adds one to the resource's token (a live holder
/// acquiring again keeps its token) and returns it. Expiry is decided by the
/// **database's clock** alone, never the client's, and on a **zone-free**
/// clock: `now()` into a `timestamptz` on PostgreSQL, `UTC_TIMESTAMP(6)` on
/// MySQL/MariaDB, SQLite's `julianday('now')` (UTC), so pools with different
/// session time zones (or a DST change) agree on who holds a lease. TTLs
/// are sent in milliseconds rounded up. The counter lives in the row, so
/// tokens keep rising across restarts of any client, and release keeps the
/// row. A row that does not exist (the first grant, or one an operator
/// deleted) starts at the database's clock in microseconds, never at 1, so
/// a purge of lease rows does not send tokens back.
///
/// **Waiting** ([`acquire`](TokenIssuer::acquire)): on PostgreSQL a release
/// also sends `NOTIFY` in its statement, so it reaches waiters only if it
/// commits; a waiter `LISTEN`s (one pool connection per issuer, see the
/// crate docs), tries, and tries again when a release of its resource
/// arrives, or after a quarter of its TTL (50 ms to 5 s) without one: what
/// notices a crashed holder's expiry, which notifies nothing. The grant is
/// always the acquire statement's, so a lost or spurious notification costs
/// only time. MySQL/MariaDB and SQLite poll: 5 ms, doubling up to 100 ms.
/// MySQL has no notifications (a `GET_LOCK` queue would hold a pooled
/// session per waiter for the whole wait, and a session lock ends with its
/// connection, not with the lease, so it could only be a hint in front of
/// the same poll); SQLite is one process's file.
#[derive(Debug, Clone)]
pub struct SqlIssuer {
    db: Db,
    acquire: String,
    renew: String,
    release: String,
    holder: String,
    raise_floor: String,
    remove_idle: String,
    why_kept: String,
    /// Where releases notify, and the waiters' listener (PostgreSQL).
    #[cfg(feature = "postgres")]
    channel: String,
    #[cfg(feature = "postgres")]
    listener: std::sync::Arc<wake::Listener>,
}

impl SqlIssuer {
    /// The highest floor: the next grant, one above it, must fit `BIGINT`.
    pub const MAX_FLOOR: FencingToken = FencingToken::new(i64::MAX as u64 - 1);

    /// An issuer on `db`, creating its table if needed.
    ///
    /// # Errors
    /// [`Error::Backend`] if the table cannot be created;
    /// [`Error::UnsafeConfiguration`] if an existing lease table keeps
    /// expiry on a zone-dependent clock (the MySQL table earlier releases
    /// created, a PostgreSQL `timestamp without time zone`): the message
    /// names the statements that migrate it; for a MySQL pool whose
    /// sessions run with `autocommit` off (a grant would be rolled back when
    /// the connection closes, and its token granted again); for a server
    /// whose commits a crash can lose, unless the `db` accepts it
    /// ([`Db::accept_volatile_commits`]).
    pub async fn new(db: Db) -> Result<Self> {
        db.check_session().await?;
        db.create_tables().await?;
        let (d, t) = (db.dialect(), db.tables.leases.clone());
        let issuer = Self {
            acquire: sql::acquire(d, &t),
            renew: sql::renew(d, &t),
            release: sql::release(d, &t),
            holder: sql::holder(d, &t),
            raise_floor: sql::raise_floor(d, &t),
            remove_idle: sql::remove_idle(d, &t),
            why_kept: sql::why_kept(d, &t),
            #[cfg(feature = "postgres")]
            channel: sql::release_channel(&t),
            #[cfg(feature = "postgres")]
            listener: std::sync::Arc::default(),
            db,
        };
        if let LeaseClock::ZoneDependent(reason) = issuer.lease_clock().await? {
            return Err(Error::UnsafeConfiguration {
                backend: d.name(),
                reason,
            });
        }
        if let Some(reason) = issuer.db.volatile_commits().await?
            && !issuer.db.volatile_commits_accepted
        {
            return Err(Error::UnsafeConfiguration {
                backend: d.name(),
                reason: format!(
                    "{reason}; or accept it with Db::accept_volatile_commits (URL option \
                     fencing_accept_volatile_commits=true): tokens can then go backwards after a crash"
                ),
            });
        }
        Ok(issuer)
    }

    /// Whether a committed grant survives a crash, as `verify` reports it.
    async fn commit_check(&self) -> Result<SafetyCheck> {
        const NAME: &str = "commit durability";
        Ok(match self.db.volatile_commits().await? {
            None => SafetyCheck::pass(
                NAME,
                "commits are flushed to disk before they are acknowledged",
            ),
            Some(reason) if self.db.volatile_commits_accepted => SafetyCheck::unsafe_(
                NAME,
                format!(
                    "{reason} (accepted: this issuer's Db was opened with accept_volatile_commits)"
                ),
            ),
            Some(reason) => SafetyCheck::unsafe_(NAME, reason),
        })
    }

    /// Reads the lease table's columns and says whether its expiry is
    /// zone-free. Read live, not remembered: `verify` must see a table an
    /// older release recreated under a running issuer.
    async fn lease_clock(&self) -> Result<LeaseClock> {
        let d = self.db.dialect();
        let table = &self.db.tables.leases;
        let columns: Vec<(String, String)> = on_pool!(&self.db.pool, p => {
            sqlx::query_as(sql::lease_columns(d)).bind(table).fetch_all(p).await
        })
        .map_err(self.map(Call::read(&format!("read the columns of {table}"))))?;
        Ok(LeaseClock::of(d, table, &columns))
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    fn map<'a>(&'a self, call: Call<'a>) -> impl FnOnce(sqlx::Error) -> Error + 'a {
        move |e| map_error(self.db.dialect(), e, call)
    }
}

/// What the lease table's expiry column says about its clock.
#[derive(Debug, PartialEq, Eq)]
enum LeaseClock {
    /// Zone-free; what is in use.
    ZoneFree(String),
    /// Zone-dependent, or not the table this crate makes: why, and how to
    /// migrate.
    ZoneDependent(String),
}

impl LeaseClock {
    fn of(d: Dialect, table: &str, columns: &[(String, String)]) -> Self {
        let kind = |name: &str| {
            columns
                .iter()
                .find(|(c, _)| c.eq_ignore_ascii_case(name))
                .map(|(_, t)| t.to_ascii_lowercase())
        };
        let clock = sql::clock_name(d);
        // Old leases are ended and every token is kept: the counter goes on
        // rising. Old processes must be stopped first: they would write the
        // zone-dependent clock again.
        let stop = "stop every process that uses this table with an older fencing-sql, then run";
        match (d, kind("expires_at"), kind("expires_at_utc")) {
            (Dialect::Postgres, Some(t), _) if t == "timestamp with time zone" => {
                Self::ZoneFree(format!(
                    "{clock} into {table}.expires_at timestamptz: an instant, whatever the session's TimeZone"
                ))
            }
            (Dialect::Postgres, Some(t), _) if t == "timestamp without time zone" => {
                Self::ZoneDependent(format!(
                    "{table}.expires_at is `timestamp without time zone`: compared with {clock} in the \
                     session's TimeZone, pools in different zones (or across a DST change) see each \
                     other's leases as expired. To migrate, {stop}: \
                     UPDATE {table} SET holder = NULL, expires_at = NULL; \
                     ALTER TABLE {table} ALTER COLUMN expires_at TYPE timestamptz USING NULL;"
                ))
            }
            (Dialect::MySql, _, Some(t)) if t == "datetime" => Self::ZoneFree(format!(
                "{clock} into {table}.expires_at_utc DATETIME(6): UTC, whatever the session's time_zone"
            )),
            (Dialect::MySql, Some(_), None) => Self::ZoneDependent(format!(
                "{table}.expires_at holds NOW(6), the session's local time (as earlier fencing-sql releases created it): \
                 pools in different time zones (or across a DST change) see each other's leases as \
                 expired. To migrate, {stop}: \
                 UPDATE {table} SET holder = NULL; \
                 ALTER TABLE {table} DROP COLUMN expires_at, ADD COLUMN expires_at_utc DATETIME(6) NULL;"
            )),
            (Dialect::Sqlite, Some(_), _) => Self::ZoneFree(format!(
                "{clock} (UTC) as integer milliseconds in {table}.expires_at"
            )),
            _ => Self::ZoneDependent(format!(
                "{table} is not a lease table of this fencing-sql (columns {columns:?}): \
                 its expiry clock is unknown. Use another table prefix, or drop it \
                 (DROP TABLE {table}) and let the issuer create it; dropping resets its tokens, \
                 so raise each resource's floor above every token granted from it"
            )),
        }
    }
}

#[async_trait]
impl TokenIssuer for SqlIssuer {
    fn name(&self) -> &'static str {
        self.db.dialect().name()
    }

    fn reentrant(&self) -> bool {
        true
    }

    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
        request.validate(self.min_ttl())?;
        let ttl = sql::ttl_units(self.db.dialect(), request.ttl);
        let (resource, holder) = (
            request.resource.as_str(),
            request.holder.as_str().as_bytes(),
        );
        let sent_at = Instant::now();
        let token: Option<i64> = on_returning_pool!(&self.db.pool, p =>
            returning: sqlx::query_scalar(&self.acquire)
                .bind(resource)
                .bind(holder)
                .bind(ttl)
                .fetch_optional(p)
                .await,
            mysql: sqlx::query(&self.acquire)
                .bind(resource)
                .bind(holder)
                .bind(ttl)
                .execute(p)
                .await
                .map(|r| {
                    i64::try_from(r.last_insert_id() & !sql::MYSQL_HELD_BIT)
                        .ok()
                        .filter(|_| r.last_insert_id() & sql::MYSQL_HELD_BIT == 0)
                }),
        )
        .map_err(self.map(Call::write(&format!("acquire {resource:?}"))))?;
        token
            .map(|t| Ok(Lease::new(request, FencingToken::from_i64(t)?, sent_at)))
            .transpose()
    }

    /// Waits for a release notification on PostgreSQL, polls elsewhere
    /// (see [`SqlIssuer`]). The listener is only asked for once the
    /// resource was found held: an uncontended acquire is one statement.
    async fn acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Lease> {
        let started = Instant::now();
        if let Some(lease) = self.try_acquire(request).await? {
            return Ok(lease);
        }
        #[cfg(feature = "postgres")]
        let wakeups = match &self.db.pool {
            crate::db::Pool::Postgres(pool) => {
                let budget = wait.saturating_sub(started.elapsed());
                self.listener.subscribe(pool, &self.channel, budget).await
            }
            #[allow(unreachable_patterns)]
            _ => None,
        };
        #[cfg(not(feature = "postgres"))]
        let wakeups = None;
        wake::acquire_woken(self, request, &request.resource, started, wait, wakeups).await
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        fencing_core::adapter::check_ttl(lease.ttl())?;
        let ttl = sql::ttl_units(self.db.dialect(), lease.ttl());
        let token = lease.token().to_i64()?;
        let (resource, holder) = (lease.resource(), lease.holder().as_str().as_bytes());
        let sent_at = Instant::now();
        let changed = on_pool!(&self.db.pool, p => sqlx::query(&self.renew).bind(ttl).bind(resource).bind(holder).bind(token).execute(p).await.map(|r| r.rows_affected()))
            .map_err(self.map(Call::write(&format!("renew {resource:?}"))))?;
        if changed == 1 {
            Ok(lease.renewed(sent_at))
        } else {
            Err(Error::lease_lost(lease))
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let token = lease.token().to_i64()?;
        let (resource, holder) = (lease.resource(), lease.holder().as_str().as_bytes());
        let changed = on_pool!(&self.db.pool, p => sqlx::query(&self.release).bind(resource).bind(holder).bind(token).execute(p).await.map(|r| r.rows_affected()))
            .map_err(self.map(Call::write(&format!("release {resource:?}"))))?;
        if changed == 1 {
            Ok(())
        } else {
            Err(Error::lease_lost(lease))
        }
    }

    /// One `DELETE` of the lease row if no lease is live, the last one
    /// ended (expired or released) at least `idle_for` ago by the
    /// database's clock, and its counter is at least `idle_for` below
    /// that clock in microseconds, where the row a later grant makes
    /// starts (one more `SELECT` says why a row was kept).
    async fn remove_idle(&self, resource: &str, idle_for: Duration) -> Result<Removal> {
        fencing_core::adapter::check_idle(idle_for)?;
        let idle = sql::ttl_units(self.db.dialect(), idle_for);
        let idle_micros = i64::try_from(idle_for.as_micros()).unwrap_or(i64::MAX);
        let deleted = on_pool!(&self.db.pool, p => sqlx::query(&self.remove_idle).bind(resource).bind(idle).bind(idle_micros).execute(p).await.map(|r| r.rows_affected()))
            .map_err(self.map(Call::write(&format!("remove idle {resource:?}"))))?;
        if deleted == 1 {
            return Ok(Removal::Removed);
        }
        let row: Option<(i64, i64, i64)> = on_pool!(&self.db.pool, p => sqlx::query_as(&self.why_kept).bind(idle).bind(resource).fetch_optional(p).await)
            .map_err(self.map(Call::read(&format!("read the lease of {resource:?}"))))?;
        Ok(match row {
            None => Removal::Absent,
            Some((_, _, 0)) => Removal::InUse,
            Some((token, clock, _)) if token >= clock.saturating_sub(idle_micros) => {
                Removal::Floored
            }
            // Idle and below the clock now: it changed in between.
            Some(_) => Removal::InUse,
        })
    }

    /// Raises the counter of a **free** resource (a live holder's token is
    /// its lease, so a held resource is refused with [`Error::Busy`]: raise
    /// the floor before the first grant, as `fence migrate` does, or when
    /// the holder has released it). The next grant is one above
    /// the floor, so a floor above [`SqlIssuer::MAX_FLOOR`] is refused with
    /// [`Error::TokenOutOfRange`]. A floor never lowers the counter, and on
    /// a resource without a row it is raised to the database's clock in
    /// microseconds at least, where a grant would start it.
    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        if floor > Self::MAX_FLOOR {
            return Err(Error::TokenOutOfRange {
                token: floor,
                max: Self::MAX_FLOOR,
            });
        }
        let raw = floor.to_i64()?;
        let raised = on_returning_pool!(&self.db.pool, p =>
            returning: sqlx::query(&self.raise_floor)
                .bind(resource)
                .bind(raw)
                .bind(raw)
                .fetch_optional(p)
                .await
                .map(|r| r.is_some()),
            mysql: sqlx::query(&self.raise_floor)
                .bind(resource)
                .bind(raw)
                .bind(raw)
                .execute(p)
                .await
                .map(|r| r.last_insert_id() & sql::MYSQL_HELD_BIT == 0),
        )
        .map_err(self.map(Call::write(&format!("raise floor of {resource:?}"))))?;
        if raised {
            Ok(())
        } else {
            Err(Error::busy(resource, "raise_floor"))
        }
    }

    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        let row: Option<(Vec<u8>, i64)> = on_pool!(&self.db.pool, p => {
            sqlx::query(&self.holder)
                .bind(resource)
                .fetch_optional(p)
                .await
                .and_then(|row| row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose())
        })
        .map_err(self.map(Call::read(&format!("read holder of {resource:?}"))))?;
        row.map(|(holder, token)| {
            let holder = String::from_utf8(holder)
                .map_err(|_| Error::invalid_input("stored holder id is not UTF-8"))?;
            Ok(Holding {
                holder: HolderId::new(holder)?,
                token: FencingToken::from_i64(token)?,
            })
        })
        .transpose()
    }

    /// The lease clock (zone-free, or a legacy table and how to migrate it),
    /// then the generic probe ([`fencing_core::safety::probe_issuer`]). A lease
    /// table that needs migrating is not probed: its statements would fail
    /// or decide expiry by the session's zone.
    async fn verify(&self) -> Result<Vec<SafetyCheck>> {
        const NAME: &str = "lease clock";
        match self.lease_clock().await? {
            LeaseClock::ZoneFree(detail) => {
                let mut checks = vec![
                    SafetyCheck::pass(NAME, detail),
                    SafetyCheck::pass(
                        "deleted counter",
                        format!(
                            "a lease row deleted by hand is made again at {} in microseconds, \
                             above every token it gave{}",
                            sql::clock_name(self.db.dialect()),
                            if self.db.dialect() == Dialect::Sqlite {
                                " (the host's clock: a clock set back undoes this)"
                            } else {
                                ""
                            }
                        ),
                    ),
                    self.commit_check().await?,
                    self.db.transport_check().await?,
                ];
                checks.extend(fencing_core::safety::probe_issuer(self).await?);
                Ok(checks)
            }
            LeaseClock::ZoneDependent(detail) => Ok(vec![
                SafetyCheck::unsafe_(NAME, detail),
                SafetyCheck::warn("tokens rise", "not probed: migrate the lease table first"),
            ]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_floor_while_held_is_busy_and_disturbs_nothing() {
        let path = std::env::temp_dir().join(format!(
            "fencing-busy-{}-{:x}.sqlite",
            std::process::id(),
            rand_suffix()
        ));
        let issuer = crate::SqlConfig::from_url(&format!("sqlite://{}", path.display()))
            .unwrap()
            .connect_issuer()
            .await
            .expect("sqlite");
        let request = LeaseRequest::new("r", std::time::Duration::from_secs(30));
        let held = issuer.try_acquire(&request).await.unwrap().expect("free");
        let e = issuer
            .raise_floor("r", FencingToken::new(held.token().get() + 100))
            .await
            .expect_err("held");
        assert!(
            matches!(&e, Error::Busy { resource, operation: "raise_floor" } if resource == "r"),
            "{e:?}"
        );
        assert!(e.is_retryable());
        // Free again: the floor goes in, and the next grant is above it.
        let held = issuer
            .renew(&held)
            .await
            .expect("the holder is undisturbed");
        issuer.release(&held).await.expect("release");
        let floor = FencingToken::new(held.token().get() + 100);
        issuer.raise_floor("r", floor).await.expect("free now");
        let next = issuer.try_acquire(&request).await.unwrap().expect("free");
        assert!(next.token() > floor);
        issuer.db().close().await;
        let _ = std::fs::remove_file(&path);
    }

    fn rand_suffix() -> u128 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    }

    fn columns(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(c, t)| ((*c).to_owned(), (*t).to_owned()))
            .collect()
    }

    #[test]
    fn a_lease_table_of_unknown_shape_is_not_trusted() {
        for d in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
            let clock = LeaseClock::of(d, "l", &columns(&[("resource", "text")]));
            assert!(
                matches!(clock, LeaseClock::ZoneDependent(ref why) if why.contains("DROP TABLE l")),
                "{d:?}: {clock:?}"
            );
            // No table at all reads as no columns.
            assert!(matches!(
                LeaseClock::of(d, "l", &[]),
                LeaseClock::ZoneDependent(_)
            ));
        }
        // MySQL: a zone-free column of another type.
        let clock = LeaseClock::of(
            Dialect::MySql,
            "l",
            &columns(&[("expires_at_utc", "bigint")]),
        );
        assert!(matches!(clock, LeaseClock::ZoneDependent(_)), "{clock:?}");
        let clock = LeaseClock::of(
            Dialect::Postgres,
            "l",
            &columns(&[("expires_at", "bigint")]),
        );
        assert!(matches!(clock, LeaseClock::ZoneDependent(_)), "{clock:?}");
    }
}
