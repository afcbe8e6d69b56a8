//! The counter issuer on SQL.

use std::time::Instant;

use async_trait::async_trait;
use fencing::{Error, FencingToken, HolderId, Holding, Lease, LeaseRequest, Result, TokenIssuer};
use sqlx::Row;

use crate::db::{Db, Pool, on_pool};
use crate::error::map_error;
use crate::sql;

/// A [`TokenIssuer`] on a SQL table of leases: a Hazelcast-style counter per
/// resource.
///
/// Acquire is **one statement**: it takes the lease row if it is free,
/// expired or already ours, adds one to the resource's token (a live holder
/// acquiring again keeps its token) and returns it. Expiry is decided by the
/// **database's clock** alone (`now()`, `NOW(6)`, SQLite's `julianday`),
/// never the client's. The counter lives in the row, so tokens keep rising
/// across restarts of any client, and release keeps the row.
#[derive(Debug, Clone)]
pub struct SqlIssuer {
    db: Db,
    acquire: String,
    renew: String,
    release: String,
    holder: String,
    raise_floor: String,
}

impl SqlIssuer {
    /// An issuer on `db`, creating its table if needed.
    ///
    /// # Errors
    /// [`Error::Backend`] if the table cannot be created.
    pub async fn new(db: Db) -> Result<Self> {
        db.create_tables().await?;
        let (d, t) = (db.dialect(), db.tables.leases.clone());
        Ok(Self {
            acquire: sql::acquire(d, &t),
            renew: sql::renew(d, &t),
            release: sql::release(d, &t),
            holder: sql::holder(d, &t),
            raise_floor: sql::raise_floor(d, &t),
            db,
        })
    }

    /// Connects by URL and creates the table: see [`Db::connect`].
    ///
    /// # Errors
    /// As [`Db::connect`] and [`SqlIssuer::new`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::new(Db::connect(url).await?).await
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    fn map(&self, op: &str, write: bool) -> impl FnOnce(sqlx::Error) -> Error + '_ {
        let op = op.to_owned();
        move |e| map_error(self.db.dialect(), &op, write, e)
    }
}

fn lost(lease: &Lease) -> Error {
    Error::LeaseLost {
        resource: lease.resource().to_owned(),
        token: lease.token(),
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
        let token: Option<i64> = match &self.db.pool {
            #[cfg(feature = "postgres")]
            Pool::Postgres(p) => {
                sqlx::query_scalar(&self.acquire)
                    .bind(resource)
                    .bind(holder)
                    .bind(ttl)
                    .fetch_optional(p)
                    .await
            }
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(p) => {
                sqlx::query_scalar(&self.acquire)
                    .bind(resource)
                    .bind(holder)
                    .bind(ttl)
                    .fetch_optional(p)
                    .await
            }
            #[cfg(feature = "mysql")]
            Pool::MySql(p) => sqlx::query(&self.acquire)
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
        }
        .map_err(self.map(&format!("acquire {resource:?}"), true))?;
        token
            .map(|t| Ok(Lease::new(request, FencingToken::from_i64(t)?, sent_at)))
            .transpose()
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let ttl = sql::ttl_units(self.db.dialect(), lease.ttl());
        let token = lease.token().to_i64()?;
        let (resource, holder) = (lease.resource(), lease.holder().as_str().as_bytes());
        let sent_at = Instant::now();
        let changed = on_pool!(&self.db.pool, p => sqlx::query(&self.renew).bind(ttl).bind(resource).bind(holder).bind(token).execute(p).await.map(|r| r.rows_affected()))
            .map_err(self.map(&format!("renew {resource:?}"), true))?;
        if changed == 1 {
            Ok(lease.renewed(sent_at))
        } else {
            Err(lost(lease))
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let token = lease.token().to_i64()?;
        let (resource, holder) = (lease.resource(), lease.holder().as_str().as_bytes());
        let changed = on_pool!(&self.db.pool, p => sqlx::query(&self.release).bind(resource).bind(holder).bind(token).execute(p).await.map(|r| r.rows_affected()))
            .map_err(self.map(&format!("release {resource:?}"), true))?;
        if changed == 1 {
            Ok(())
        } else {
            Err(lost(lease))
        }
    }

    /// Raises the counter of a **free** resource (a live holder's token is
    /// its lease, so a held resource is refused: raise the floor before the
    /// first grant, as `fence migrate` does).
    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        let raw = floor.to_i64()?;
        let raised = match &self.db.pool {
            #[cfg(feature = "postgres")]
            Pool::Postgres(p) => sqlx::query(&self.raise_floor)
                .bind(resource)
                .bind(raw)
                .fetch_optional(p)
                .await
                .map(|r| r.is_some()),
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(p) => sqlx::query(&self.raise_floor)
                .bind(resource)
                .bind(raw)
                .fetch_optional(p)
                .await
                .map(|r| r.is_some()),
            #[cfg(feature = "mysql")]
            Pool::MySql(p) => sqlx::query(&self.raise_floor)
                .bind(resource)
                .bind(raw)
                .execute(p)
                .await
                .map(|r| r.last_insert_id() & sql::MYSQL_HELD_BIT == 0),
        }
        .map_err(self.map(&format!("raise floor of {resource:?}"), true))?;
        if raised {
            Ok(())
        } else {
            Err(Error::invalid_input(format!(
                "{resource:?} is held; raise its floor while it is free"
            )))
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
        .map_err(self.map(&format!("read holder of {resource:?}"), false))?;
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
}
