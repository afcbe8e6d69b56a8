//! The conformance suites of `fencing_testkit` (each with the zombie
//! scenario and the history checker against the in-memory other half), the
//! same two with issuer and store on one database, a 16-writer race and the
//! transaction guard, on real PostgreSQL, real MariaDB and a SQLite file.
//!
//! Servers come from `FENCING_PG_URL` and `FENCING_MYSQL_URL` (defaults:
//! `integration/services.sh`). All tables of one run share a random prefix.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing_core::safety::Verdict;
use fencing_core::{Error, FencedStore, FencingToken, LeaseRequest, TokenIssuer};
use fencing_harness::env::{MYSQL, MYSQL_TLS, POSTGRES, POSTGRES_TLS, with_option, with_test_tls};
use fencing_sql::{Db, SqlIssuer, SqlStore, Tables, fence_transaction};
use fencing_testkit::issuer::IssuerProfile;
use fencing_testkit::safety::{check, refusal};

mod common;
use common::{connect, open, sqlite_url, tables};

/// `url` for sqlx itself, reading a table behind fencing's back: the MySQL
/// driver spells TLS otherwise, so our options go and it negotiates TLS
/// unchecked (its default); PostgreSQL's are libpq's, as ours.
fn driver_url(url: &str) -> String {
    if !url.starts_with("mysql:") {
        return url.to_owned();
    }
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let rest: Vec<&str> = query
        .split('&')
        .filter(|p| {
            !p.is_empty()
                && !fencing_core::tls::TlsOptions::URL_OPTIONS
                    .contains(&p.split('=').next().unwrap_or(p))
        })
        .collect();
    if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    }
}

fn profile() -> IssuerProfile {
    // The database's clock decides expiry; allow for a slow shared machine.
    IssuerProfile {
        expiry_slack: Duration::from_secs(2),
        ..IssuerProfile::with_ttl(Duration::from_millis(400))
    }
}

/// Tables under the run's prefix plus `what`, for tests that break their
/// tables on purpose.
fn tables_for(what: &str) -> Tables {
    Tables::from_prefix(&format!(
        "{}{what}_",
        tables().records.trim_end_matches("records")
    ))
    .expect("valid prefix")
}

/// Tables of one test's own: a store floor refuses on every key, so a test
/// that raises one may share its tables with no other.
fn tables_of_its_own() -> Tables {
    let prefix = fencing_testkit::unique_prefix().replace('-', "_") + "_";
    Tables::from_prefix(&prefix).expect("valid prefix")
}

macro_rules! database_suite {
    ($module:ident, $server:expr, $url:expr, $db:ty, $clock:literal) => {
        mod $module {
            use super::*;

            pub(super) async fn db() -> Option<Db> {
                connect($server, &$url).await
            }

            /// The stored counter of `resource`, read raw: it must still be
            /// an integer (SQLite turns an overflowing `token + 1` into a REAL).
            async fn stored_token(resource: &str) -> i64 {
                let pool = sqlx::Pool::<$db>::connect(&driver_url(&$url)).await.expect("pool");
                let token = sqlx::query_scalar::<_, i64>(&format!(
                    "SELECT token FROM {} WHERE resource = '{resource}'",
                    tables().leases
                ))
                .fetch_one(&pool)
                .await
                .unwrap_or_else(|e| panic!("the counter of {resource:?} is not an integer: {e}"));
                pool.close().await;
                token
            }

            /// A row whose mark is negative was not written by fencing
            /// (which never stores one): every call on it is refused as
            /// foreign data, and the row stays as it was.
            #[tokio::test]
            async fn a_row_with_a_negative_mark_is_foreign_data_and_left_alone() {
                let Some(db) = db().await else { return };
                let store = SqlStore::new(db).await.expect("store");
                let key = fencing_testkit::unique_name("negative-mark");
                let pool = sqlx::Pool::<$db>::connect(&driver_url(&$url)).await.expect("pool");
                let records = &tables().records;
                sqlx::query(&format!(
                    "INSERT INTO {records} (k, v, lock_token) VALUES ('{key}', 'legacy', -1)"
                ))
                .execute(&pool)
                .await
                .expect("a foreign row");
                let foreign = |what: &str, result: fencing_core::Result<()>| match result {
                    Err(Error::Backend { retryable: false, source, .. }) => {
                        let message = source.to_string();
                        assert!(message.contains("-1") && message.contains("not written by fencing"), "{what}: {message}");
                    }
                    other => panic!("{what} on a negative mark must be refused as foreign data, got {other:?}"),
                };
                foreign("put", store.put(&key, "mine".into(), FencingToken::new(1)).await);
                foreign("fence", store.fence(&key, FencingToken::new(1)).await.map(drop));
                foreign("delete", store.delete(&key, FencingToken::new(1)).await);
                foreign("get", store.get(&key).await.map(drop));
                foreign("mark", store.mark(&key).await.map(drop));
                let row: (Vec<u8>, i64) = sqlx::query_as(&format!(
                    "SELECT v, lock_token FROM {records} WHERE k = '{key}'"
                ))
                .fetch_one(&pool)
                .await
                .expect("the row");
                assert_eq!(row, (b"legacy".to_vec(), -1), "the foreign row changed");
                pool.close().await;
            }

            // A TTL of 2.999 ms: a server that drops the 0.999 ms (or
            // a clock that counts whole milliseconds) frees the lease before
            // the holder's local deadline, and a contender polling
            // back-to-back walks in while the holder still believes it holds.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_held_lease_is_not_taken_before_a_sub_millisecond_ttl_ends() {
                let Some(db) = db().await else { return };
                let issuer = SqlIssuer::new(db).await.expect("issuer");
                let ttl = Duration::from_micros(2_999);
                for round in 0..40 {
                    let resource = fencing_testkit::unique_name("sub-ms");
                    let holder = issuer
                        .try_acquire(&LeaseRequest::new(&resource, ttl))
                        .await
                        .unwrap()
                        .expect("a fresh resource is free");
                    let contender = LeaseRequest::new(&resource, ttl);
                    let started = Instant::now();
                    loop {
                        if issuer.try_acquire(&contender).await.unwrap().is_some() {
                            let early = holder.deadline().checked_duration_since(Instant::now());
                            assert!(
                                early.is_none(),
                                "round {round}: a contender took the lease {early:?} before the holder's deadline (ttl {ttl:?})"
                            );
                            break;
                        }
                        assert!(started.elapsed() < Duration::from_secs(10), "the lease never expired");
                    }
                }
            }

            #[tokio::test]
            async fn no_token_above_bigint_is_granted_and_the_counter_stays_an_integer() {
                let Some(db) = db().await else { return };
                let issuer = SqlIssuer::new(db).await.expect("issuer");
                let resource = fencing_testkit::unique_name("top");
                let ttl = Duration::from_secs(30);
                let top = FencingToken::MAX_I64;

                // A floor at i64::MAX leaves no room for the next grant.
                match issuer.raise_floor(&resource, top).await {
                    Err(Error::TokenOutOfRange { token, .. }) => assert_eq!(token, top),
                    other => panic!("a floor at i64::MAX must be TokenOutOfRange, got {other:?}"),
                }
                issuer
                    .raise_floor(&resource, FencingToken::new(top.get() - 1))
                    .await
                    .expect("a floor one below the top leaves room for one grant");
                let request = LeaseRequest::new(&resource, ttl);
                let lease = issuer.try_acquire(&request).await.unwrap().expect("free");
                assert_eq!(lease.token(), top);
                // The same live holder keeps its token, at the top too.
                let again = issuer.try_acquire(&request).await.unwrap().expect("re-entrant");
                assert_eq!(again.token(), top);
                issuer.release(&lease).await.unwrap();

                // The next grant would be i64::MAX + 1.
                match issuer.try_acquire(&LeaseRequest::new(&resource, ttl)).await {
                    Err(Error::TokenOutOfRange { token, max }) => {
                        assert_eq!((token.get(), max), (top.get() + 1, top));
                    }
                    other => panic!("a grant above i64::MAX must be TokenOutOfRange, got {other:?}"),
                }
                assert_eq!(stored_token(&resource).await, i64::MAX);
                assert_eq!(issuer.holder(&resource).await.unwrap(), None);
            }

            #[tokio::test]
            async fn verify_reports_the_zone_free_lease_clock_and_rising_tokens() {
                let Some(db) = db().await else { return };
                let issuer = SqlIssuer::new(db).await.expect("issuer");
                let checks = issuer.verify().await.expect("verify runs");
                assert!(fencing_core::safety::all_safe(&checks), "{checks:#?}");
                let clock = check(&checks, "lease clock");
                assert_eq!(clock.verdict, Verdict::Pass, "{clock:?}");
                assert!(clock.detail.contains($clock), "{clock:?} does not name {}", $clock);
                let seed = check(&checks, "deleted counter");
                assert!(seed.verdict == Verdict::Pass && seed.detail.contains($clock), "{seed:?}");
                assert!(
                    checks.iter().any(|c| c.name == "tokens rise" && c.verdict == Verdict::Pass),
                    "{checks:#?}"
                );
            }

            /// An operator's purge of lease rows takes the counter with it:
            /// the row made again must still grant above every token the
            /// old one gave, and a low floor on the absent row must not
            /// bring it back down.
            #[tokio::test]
            async fn a_lease_row_deleted_by_hand_grants_above_every_earlier_token() {
                let Some(db) = db().await else { return };
                let issuer = SqlIssuer::new(db).await.expect("issuer");
                let resource = fencing_testkit::unique_name("purged");
                let request = LeaseRequest::new(&resource, Duration::from_secs(30));
                let mut highest = FencingToken::new(0);
                for _ in 0..3 {
                    let lease = issuer.try_acquire(&request).await.unwrap().expect("free");
                    assert!(lease.token() > highest, "{} after {highest}", lease.token());
                    highest = lease.token();
                    issuer.release(&lease).await.unwrap();
                }
                let pool = sqlx::Pool::<$db>::connect(&driver_url(&$url)).await.expect("pool");
                let purge = format!("DELETE FROM {} WHERE resource = '{resource}'", tables().leases);
                sqlx::query(&purge).execute(&pool).await.expect("the operator's purge");
                let lease = issuer.try_acquire(&request).await.unwrap().expect("free");
                assert!(
                    lease.token() > highest,
                    "after the row was deleted the next token was {}, below the {highest} granted before",
                    lease.token()
                );
                highest = lease.token();
                issuer.release(&lease).await.unwrap();

                sqlx::query(&purge).execute(&pool).await.expect("the operator's purge");
                issuer
                    .raise_floor(&resource, FencingToken::new(2))
                    .await
                    .expect("a floor on an absent row");
                let lease = issuer.try_acquire(&request).await.unwrap().expect("free");
                assert!(
                    lease.token() > highest,
                    "a floor of 2 on a deleted row brought the next token down to {} (granted before: {highest})",
                    lease.token()
                );
                pool.close().await;
            }
            async fn store() -> Option<Arc<dyn FencedStore>> {
                Some(Arc::new(SqlStore::new(db().await?).await.expect("store")))
            }
            async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
                Some(Arc::new(SqlIssuer::new(db().await?).await.expect("issuer")))
            }

            /// A store on tables of its own: a floor refuses on every key,
            /// so no other test may share its tables.
            async fn store_of_its_own() -> Option<SqlStore> {
                let db = db().await?.with_tables(tables_of_its_own());
                Some(SqlStore::new(db).await.expect("store"))
            }

            #[tokio::test]
            async fn floor_refuses_on_every_key() {
                let Some(store) = store_of_its_own().await else { return };
                fencing_testkit::store::floor_refuses_on_every_key(&store).await;
                store.db().drop_tables().await.unwrap();
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn floor_raised_and_marks_removed_under_zombie_writes() {
                let Some(store) = store_of_its_own().await else { return };
                fencing_testkit::store::floor_raised_and_marks_removed_under_zombie_writes(
                    Arc::new(store.clone()),
                )
                .await;
                store.db().drop_tables().await.unwrap();
            }

            mod store_suite {
                use super::*;
                // The in-memory issuer runs at the SQL profile's TTL, which
                // allows for a slow shared machine.
                fencing_testkit::store_conformance!(store, profile().ttl);
            }
            mod issuer_suite {
                use super::*;
                fencing_testkit::issuer_conformance!(issuer, profile());
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn racing_16_connections_x_50_writes() {
                let Some(store) = store().await else { return };
                fencing_testkit::store::racing_writers_with(store, 16, 50).await;
            }

            // The suites pair each half with an in-memory other half; these
            // pair the SQL issuer with the SQL store, on the same database.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn zombie_is_refused_with_issuer_and_store_on_one_database() {
                let (Some(issuer), Some(store)) = (issuer().await, store().await) else {
                    return;
                };
                fencing_testkit::zombie::zombie_is_refused(&*issuer, &*store, profile().ttl).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn history_with_issuer_and_store_on_one_database_finds_no_stale_accept() {
                let (Some(issuer), Some(store)) = (issuer().await, store().await) else {
                    return;
                };
                fencing_testkit::history::quick_check(issuer, store, profile().ttl).await;
            }

            #[tokio::test]
            async fn tokens_above_i64_max_are_refused_before_any_statement() {
                let (Some(issuer), Some(store)) = (issuer().await, store().await) else {
                    return;
                };
                let above = FencingToken::new(i64::MAX as u64 + 1);
                let key = fencing_testkit::unique_name("range");
                assert!(matches!(
                    store.put(&key, "x".into(), above).await,
                    Err(Error::TokenOutOfRange { .. })
                ));
                assert!(matches!(
                    store.fence(&key, FencingToken::new(u64::MAX)).await,
                    Err(Error::TokenOutOfRange { .. })
                ));
                assert_eq!(store.mark(&key).await.unwrap(), None);
                store
                    .put(&key, "max".into(), FencingToken::MAX_I64)
                    .await
                    .expect("i64::MAX itself fits");
                assert_eq!(store.mark(&key).await.unwrap(), Some(FencingToken::MAX_I64));
                let _ = issuer;
            }
        }
    };
}

database_suite!(
    postgres,
    Some(&POSTGRES),
    POSTGRES.endpoint(),
    sqlx::Postgres,
    "now()"
);
database_suite!(
    mariadb,
    Some(&MYSQL),
    MYSQL.endpoint(),
    sqlx::MySql,
    "UTC_TIMESTAMP(6)"
);
database_suite!(sqlite, None, sqlite_url(), sqlx::Sqlite, "julianday('now')");
// The same suites on the TLS-only, password-required servers
// (`integration/services.sh up tls`), certificate and host name checked.
database_suite!(
    postgres_tls,
    Some(&POSTGRES_TLS),
    with_option(
        &with_test_tls(&POSTGRES_TLS.endpoint()),
        "sslmode=verify-full"
    ),
    sqlx::Postgres,
    "now()"
);
database_suite!(
    mariadb_tls,
    Some(&MYSQL_TLS),
    with_option(&with_test_tls(&MYSQL_TLS.endpoint()), "sslmode=verify-full"),
    sqlx::MySql,
    "UTC_TIMESTAMP(6)"
);

/// Lease time on servers with a session time zone: two pools set to zones
/// 20 hours apart share one lease table; a legacy table whose expiry
/// depends on the zone is refused.
macro_rules! zone_suite {
    ($module:ident, $server:expr, $url:expr, $db:ty, $wrap:path,
     west: $west:literal, east: $east:literal, legacy: $legacy:literal, migration: $migration:expr) => {
        mod $module {
            use super::*;

            async fn pool_in(zone: &'static str) -> sqlx::Pool<$db> {
                sqlx::pool::PoolOptions::<$db>::new()
                    .max_connections(2)
                    .after_connect(move |conn, _| {
                        Box::pin(async move { sqlx::query(zone).execute(conn).await.map(|_| ()) })
                    })
                    .connect(&$url)
                    .await
                    .expect("pool")
            }

            async fn issuer_in(zone: &'static str) -> SqlIssuer {
                SqlIssuer::new($wrap(pool_in(zone).await).with_tables(tables()))
                    .await
                    .expect("issuer")
            }

            #[tokio::test]
            async fn pools_in_different_time_zones_never_hold_a_lease_together() {
                if connect($server, &$url).await.is_none() {
                    return;
                }
                let (west, east) = (issuer_in($west).await, issuer_in($east).await);
                let resource = fencing_testkit::unique_name("zones");
                let ttl = Duration::from_secs(30);
                let held = west
                    .try_acquire(&LeaseRequest::new(&resource, ttl))
                    .await
                    .unwrap()
                    .expect("free");
                let taken = east.try_acquire(&LeaseRequest::new(&resource, ttl)).await.unwrap();
                assert!(
                    taken.is_none(),
                    "a pool at {:?} took {resource:?} (token {:?}) while a pool at {:?} holds it live (token {})",
                    $east,
                    taken.map(|l| l.token()),
                    $west,
                    held.token()
                );
                assert_eq!(east.holder(&resource).await.unwrap().map(|h| h.token), Some(held.token()));

                // And the other way round.
                west.release(&held).await.expect("the west pool still holds it");
                let held = east
                    .try_acquire(&LeaseRequest::new(&resource, ttl))
                    .await
                    .unwrap()
                    .expect("released");
                let taken = west.try_acquire(&LeaseRequest::new(&resource, ttl)).await.unwrap();
                assert!(taken.is_none(), "the west pool took a live lease of the east pool: {taken:?}");
                east.renew(&held).await.expect("the east pool still holds it");
                east.release(&held).await.unwrap();
            }

            /// The lease table as the previous release created it.
            async fn legacy_table(db: &Db, tables: &Tables) {
                let pool = sqlx::Pool::<$db>::connect(&driver_url(&$url)).await.expect("pool");
                sqlx::query(&format!("DROP TABLE IF EXISTS {}", tables.leases))
                    .execute(&pool)
                    .await
                    .unwrap();
                sqlx::query(&format!("CREATE TABLE {} {}", tables.leases, $legacy))
                    .execute(&pool)
                    .await
                    .unwrap();
                pool.close().await;
                let _ = db;
            }

            #[tokio::test]
            async fn a_zone_dependent_lease_table_is_refused_with_how_to_migrate() {
                let Some(db) = connect($server, &$url).await else { return };
                let tables = tables_for("legacy");
                let db = db.with_tables(tables.clone());
                legacy_table(&db, &tables).await;
                let pool = sqlx::Pool::<$db>::connect(&driver_url(&$url)).await.expect("pool");
                // A live lease of an old process, at token 41.
                sqlx::query(&format!(
                    "INSERT INTO {} (resource, holder, token, expires_at) VALUES ('r', 'old', 41, '2999-01-01 00:00:00')",
                    tables.leases
                ))
                .execute(&pool)
                .await
                .unwrap();
                let reason = refusal(
                    SqlIssuer::new(db.clone()).await,
                    db.dialect().name(),
                    "a zone-dependent lease table",
                );
                // The statements the refusal names migrate the table, and
                // the counter goes on from where it was.
                let migration: fn(&str) -> Vec<String> = $migration;
                let migration = migration(&tables.leases);
                for sql in &migration {
                    assert!(reason.contains(sql.as_str()), "the refusal must name `{sql}`: {reason}");
                    sqlx::query(sql).execute(&pool).await.unwrap();
                }
                let issuer = SqlIssuer::new(db.clone()).await.expect("migrated");
                let lease = issuer
                    .try_acquire(&LeaseRequest::new("r", Duration::from_secs(30)))
                    .await
                    .unwrap()
                    .expect("the old lease was ended");
                assert_eq!(lease.token(), FencingToken::new(42));
                pool.close().await;
                db.drop_tables().await.unwrap();
            }

            #[tokio::test]
            async fn verify_finds_a_zone_dependent_lease_table_unsafe() {
                let Some(db) = connect($server, &$url).await else { return };
                let tables = tables_for("legacyv");
                let db = db.with_tables(tables.clone());
                let issuer = SqlIssuer::new(db.clone()).await.expect("issuer");
                // An older release recreates the table under a running issuer.
                legacy_table(&db, &tables).await;
                let checks = issuer.verify().await.expect("verify runs");
                let clock = check(&checks, "lease clock");
                assert_eq!(clock.verdict, Verdict::Unsafe, "{checks:#?}");
                assert!(clock.detail.contains("ALTER TABLE"), "{clock:?}");
                assert!(!fencing_core::safety::all_safe(&checks));
                db.drop_tables().await.unwrap();
            }
        }
    };
}

zone_suite!(
    zones_postgres,
    Some(&POSTGRES),
    POSTGRES.endpoint(),
    sqlx::Postgres,
    Db::postgres,
    west: "SET TIME ZONE -10",
    east: "SET TIME ZONE 10",
    legacy: "(resource VARCHAR(512) NOT NULL PRIMARY KEY, holder BYTEA, token BIGINT NOT NULL, expires_at TIMESTAMP)",
    migration: |t: &str| vec![
        format!("UPDATE {t} SET holder = NULL, expires_at = NULL;"),
        format!("ALTER TABLE {t} ALTER COLUMN expires_at TYPE timestamptz USING NULL;"),
    ]
);
zone_suite!(
    zones_mariadb,
    Some(&MYSQL),
    MYSQL.endpoint(),
    sqlx::MySql,
    Db::mysql,
    west: "SET time_zone = '-10:00'",
    east: "SET time_zone = '+10:00'",
    legacy: "(resource VARBINARY(512) NOT NULL PRIMARY KEY, holder VARBINARY(256), token BIGINT NOT NULL, \
             expires_at DATETIME(6), granted BIGINT UNSIGNED NOT NULL DEFAULT 0)",
    migration: |t: &str| vec![
        format!("UPDATE {t} SET holder = NULL;"),
        format!("ALTER TABLE {t} DROP COLUMN expires_at, ADD COLUMN expires_at_utc DATETIME(6) NULL;"),
    ]
);

/// The transaction guard on one database: `$pool` connects, `$begin` is the
/// statement that opens a writing transaction.
macro_rules! guard_suite {
    ($module:ident, $server:expr, $url:expr, $pool:ty, $begin:literal) => {
        mod $module {
            use super::*;

            async fn pool() -> Option<(sqlx::Pool<$pool>, Tables)> {
                let db = connect($server, &$url).await?;
                db.create_tables().await.expect("tables");
                let pool = sqlx::pool::PoolOptions::<$pool>::new()
                    .max_connections(4)
                    .connect(&$url)
                    .await
                    .expect("pool");
                Some((pool, tables()))
            }

            async fn orders(pool: &sqlx::Pool<$pool>) -> String {
                let table = format!(
                    "{}orders_{}",
                    tables().records,
                    fencing_testkit::unique_prefix().replace('-', "_")
                );
                sqlx::query(&format!(
                    "CREATE TABLE {table} (id INTEGER PRIMARY KEY, status VARCHAR(32))"
                ))
                .execute(pool)
                .await
                .unwrap();
                sqlx::query(&format!(
                    "INSERT INTO {table} (id, status) VALUES (1, 'new'), (2, 'new'), (3, 'new')"
                ))
                .execute(pool)
                .await
                .unwrap();
                table
            }

            async fn statuses(pool: &sqlx::Pool<$pool>, table: &str) -> Vec<(i32, String)> {
                sqlx::query_as(&format!("SELECT id, status FROM {table} ORDER BY id"))
                    .fetch_all(pool)
                    .await
                    .unwrap()
            }

            #[tokio::test]
            async fn zombie_transaction_is_rolled_back_entirely() {
                let Some((pool, tables)) = pool().await else {
                    return;
                };
                let table = orders(&pool).await;
                let domain = fencing_testkit::unique_name("orders");

                // The current holder (token 2) fences and ships every order.
                let mut tx = pool.begin_with($begin).await.unwrap();
                fence_transaction(&mut tx, &tables, &domain, FencingToken::new(2))
                    .await
                    .expect("holder fences");
                sqlx::query(&format!("UPDATE {table} SET status = 'shipped by 2'"))
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();

                // The zombie (token 1) writes many rows, then checks its fence
                // before committing: refused, and it rolls back all of it.
                let mut tx = pool.begin_with($begin).await.unwrap();
                sqlx::query(&format!("UPDATE {table} SET status = 'zombie'"))
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                sqlx::query(&format!(
                    "INSERT INTO {table} (id, status) VALUES (4, 'zombie')"
                ))
                .execute(&mut *tx)
                .await
                .unwrap();
                match fence_transaction(&mut tx, &tables, &domain, FencingToken::new(1)).await {
                    Err(Error::StaleToken {
                        presented, current, ..
                    }) => {
                        assert_eq!((presented.get(), current.get()), (1, 2));
                    }
                    other => panic!("the zombie's fence must be stale, got {other:?}"),
                }
                tx.rollback().await.unwrap();

                // A zombie that fences first is refused before it writes.
                let mut tx = pool.begin_with($begin).await.unwrap();
                assert!(matches!(
                    fence_transaction(&mut tx, &tables, &domain, FencingToken::new(1)).await,
                    Err(Error::StaleToken { .. })
                ));
                tx.rollback().await.unwrap();

                let rows = statuses(&pool, &table).await;
                assert_eq!(
                    rows,
                    vec![
                        (1, "shipped by 2".to_owned()),
                        (2, "shipped by 2".to_owned()),
                        (3, "shipped by 2".to_owned())
                    ],
                    "the zombie's transaction left traces"
                );
                sqlx::query(&format!("DROP TABLE {table}"))
                    .execute(&pool)
                    .await
                    .unwrap();
            }

            /// A store on tables of its own, and a pool on the same database
            /// for the guarded transactions of the floor's tests.
            async fn floored(db: Db) -> (Tables, SqlStore, sqlx::Pool<$pool>) {
                let tables = tables_of_its_own();
                let store = SqlStore::new(db.with_tables(tables.clone())).await.unwrap();
                let pool = sqlx::pool::PoolOptions::<$pool>::new()
                    .max_connections(4)
                    .connect(&$url)
                    .await
                    .expect("pool");
                (tables, store, pool)
            }

            /// The store's floor refuses a guarded transaction at or below it,
            /// and raising it waits for a guarded transaction that read the
            /// old floor to end (its share lock), so none can commit a token
            /// judged by a floor already raised over it.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_floor_refuses_a_guarded_transaction_and_waits_for_one() {
                let Some(db) = connect($server, &$url).await else {
                    return;
                };
                let (tables, store, pool) = floored(db).await;
                let domain = fencing_testkit::unique_name("floored-domain");
                store.raise_floor(FencingToken::new(50)).await.unwrap();
                let mut tx = pool.begin_with($begin).await.unwrap();
                match fence_transaction(&mut tx, &tables, &domain, FencingToken::new(50)).await {
                    Err(Error::StaleToken {
                        presented, current, ..
                    }) => {
                        assert_eq!((presented.get(), current.get()), (50, 51));
                    }
                    other => panic!("a token at the floor was answered {other:?}"),
                }
                drop(tx);

                let mut tx = pool.begin_with($begin).await.unwrap();
                fence_transaction(&mut tx, &tables, &domain, FencingToken::new(60))
                    .await
                    .expect("above the floor");
                let raise = tokio::spawn({
                    let store = store.clone();
                    async move { store.raise_floor(FencingToken::new(70)).await }
                });
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                assert!(
                    !raise.is_finished(),
                    "the floor rose under an open guarded transaction"
                );
                tx.commit().await.unwrap();
                raise
                    .await
                    .unwrap()
                    .expect("raised once the transaction ended");
                let mut tx = pool.begin_with($begin).await.unwrap();
                assert!(matches!(
                    fence_transaction(&mut tx, &tables, &domain, FencingToken::new(60)).await,
                    Err(Error::StaleToken { .. })
                ));
                drop(tx);
                pool.close().await;
                store.db().drop_tables().await.unwrap();
            }

            /// A put holds the floor it read until its statement ends, so a
            /// raise waits for it: the put is held mid-statement by a row
            /// lock on its key, taken by hand. Without the put's share lock
            /// the raise would finish at once (and a removal after it could
            /// race the put).
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_raise_waits_for_a_put_that_read_the_old_floor() {
                let Some(db) = connect($server, &$url).await else {
                    return;
                };
                let dialect = db.dialect();
                if dialect == fencing_sql::Dialect::Sqlite {
                    // One writer at a time: no statement stops half-way;
                    // the guard's test shows a raise waiting for it.
                    return;
                }
                let (tables, store, pool) = floored(db).await;
                let key = fencing_testkit::unique_name("held-put");
                store.raise_floor(FencingToken::new(50)).await.unwrap();
                store.fence(&key, FencingToken::new(60)).await.unwrap();
                let mut tx = pool.begin_with($begin).await.unwrap();
                let lock_row = format!(
                    "SELECT lock_token FROM {} WHERE k = {} FOR UPDATE",
                    tables.records,
                    fencing_sql::ParamStyle::of(dialect).marker(1)
                );
                sqlx::query(&lock_row)
                    .bind(&key)
                    .fetch_one(&mut *tx)
                    .await
                    .unwrap();
                let put = tokio::spawn({
                    let (store, key) = (store.clone(), key.clone());
                    async move {
                        store
                            .put(&key, "zombie".into(), FencingToken::new(55))
                            .await
                    }
                });
                tokio::time::sleep(Duration::from_millis(200)).await;
                let raise = tokio::spawn({
                    let store = store.clone();
                    async move { store.raise_floor(FencingToken::new(70)).await }
                });
                tokio::time::sleep(Duration::from_millis(300)).await;
                assert!(!put.is_finished(), "the put was not held by the row lock");
                assert!(
                    !raise.is_finished(),
                    "the floor rose under a put that read the old one"
                );
                tx.commit().await.unwrap();
                match put.await.unwrap() {
                    Err(Error::StaleToken { current, .. }) => assert_eq!(current.get(), 60),
                    other => panic!("the held put was answered {other:?}"),
                }
                raise.await.unwrap().expect("raised once the put ended");
                pool.close().await;
                store.db().drop_tables().await.unwrap();
            }

            #[tokio::test]
            async fn domains_fence_independently() {
                let Some((pool, tables)) = pool().await else {
                    return;
                };
                let a = fencing_testkit::unique_name("domain-a");
                let b = fencing_testkit::unique_name("domain-b");
                let mut tx = pool.begin_with($begin).await.unwrap();
                fence_transaction(&mut tx, &tables, &a, FencingToken::new(5))
                    .await
                    .unwrap();
                fence_transaction(&mut tx, &tables, &b, FencingToken::new(1))
                    .await
                    .expect("b is not fenced by a");
                tx.commit().await.unwrap();
                let mut tx = pool.begin_with($begin).await.unwrap();
                assert!(matches!(
                    fence_transaction(&mut tx, &tables, &a, FencingToken::new(4)).await,
                    Err(Error::StaleToken { .. })
                ));
                fence_transaction(&mut tx, &tables, &a, FencingToken::new(5))
                    .await
                    .expect("equal is accepted");
                fence_transaction(&mut tx, &tables, &b, FencingToken::new(1))
                    .await
                    .expect("equal is accepted");
                assert!(matches!(
                    fence_transaction(&mut tx, &tables, "", FencingToken::new(1)).await,
                    Err(Error::InvalidInput { .. })
                ));
                assert!(matches!(
                    fence_transaction(&mut tx, &tables, &a, FencingToken::new(u64::MAX)).await,
                    Err(Error::TokenOutOfRange { .. })
                ));
                tx.commit().await.unwrap();
            }
        }
    };
}

guard_suite!(
    guard_postgres,
    Some(&POSTGRES),
    POSTGRES.endpoint(),
    sqlx::Postgres,
    "BEGIN"
);
guard_suite!(
    guard_mariadb,
    Some(&MYSQL),
    MYSQL.endpoint(),
    sqlx::MySql,
    "START TRANSACTION"
);
guard_suite!(
    guard_sqlite,
    None,
    sqlite_url(),
    sqlx::Sqlite,
    "BEGIN IMMEDIATE"
);

#[tokio::test]
async fn an_unreachable_server_is_a_clear_backend_error() {
    let e = open("postgres://fencing:fencing@127.0.0.1:1/fencing")
        .await
        .expect_err("nothing listens on port 1");
    assert!(
        matches!(
            e,
            Error::Backend {
                backend: "postgres",
                retryable: true,
                ..
            }
        ),
        "{e:?}"
    );
    let e = open("oracle://x").await.expect_err("unsupported");
    assert!(matches!(e, Error::InvalidInput { .. }), "{e:?}");
    assert!(Tables::from_prefix("x; DROP TABLE y").is_err());
}

/// A table whose writes are silently dropped (a `BEFORE` trigger that skips
/// the row; a rule or a policy can do the same): the fenced upsert writes
/// nothing and there is no mark to read. Neither the guard nor the store may
/// take that for "mark 0".
macro_rules! dropped_write_suite {
    ($module:ident, $server:expr, $url:expr, $db:ty, $drop_writes:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn a_fence_or_write_that_leaves_no_mark_is_never_accepted() {
                let Some(db) = connect($server, &$url).await else {
                    return;
                };
                let tables = tables_for("dropped");
                let db = db.with_tables(tables.clone());
                db.drop_tables().await.unwrap();
                db.create_tables().await.unwrap();
                let pool = sqlx::Pool::<$db>::connect(&driver_url(&$url))
                    .await
                    .expect("pool");
                let store = SqlStore::new(db.clone()).await.expect("store");
                // "existing" has a mark of 3 before writes start being dropped.
                let mut tx = pool.begin().await.unwrap();
                fence_transaction(&mut tx, &tables, "existing", FencingToken::new(3))
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                store
                    .put("existing", "3".into(), FencingToken::new(3))
                    .await
                    .unwrap();
                let drop_writes: fn(&str) -> Vec<String> = $drop_writes;
                for table in [&tables.domains, &tables.records] {
                    for sql in drop_writes(table) {
                        sqlx::query(&sql).execute(&pool).await.unwrap();
                    }
                }

                for key in ["fresh", "existing"] {
                    let mut tx = pool.begin().await.unwrap();
                    let fenced =
                        fence_transaction(&mut tx, &tables, key, FencingToken::new(5)).await;
                    assert!(
                        matches!(fenced, Err(Error::UnsafeConfiguration { .. })),
                        "{key}: a fence that wrote no mark was reported as {fenced:?}"
                    );
                    tx.rollback().await.unwrap();

                    let put = store.put(key, "5".into(), FencingToken::new(5)).await;
                    assert!(
                        matches!(put, Err(Error::UnsafeConfiguration { .. })),
                        "{key}: a write that left no mark was reported as {put:?}"
                    );
                }
                // A real refusal is still a refusal.
                let mut tx = pool.begin().await.unwrap();
                assert!(matches!(
                    fence_transaction(&mut tx, &tables, "existing", FencingToken::new(2)).await,
                    Err(Error::StaleToken { .. })
                ));
                tx.rollback().await.unwrap();
                assert!(matches!(
                    store
                        .put("existing", "2".into(), FencingToken::new(2))
                        .await,
                    Err(Error::StaleToken { .. })
                ));
                pool.close().await;
                db.drop_tables().await.unwrap();
            }
        }
    };
}

dropped_write_suite!(
    dropped_postgres,
    Some(&POSTGRES),
    POSTGRES.endpoint(),
    sqlx::Postgres,
    |table| {
        vec![
            format!(
                "CREATE OR REPLACE FUNCTION {table}_drop() RETURNS trigger LANGUAGE plpgsql \
                 AS $$ BEGIN RETURN NULL; END $$"
            ),
            format!(
                "CREATE TRIGGER {table}_drop BEFORE INSERT OR UPDATE ON {table} \
                 FOR EACH ROW EXECUTE FUNCTION {table}_drop()"
            ),
        ]
    }
);
dropped_write_suite!(dropped_sqlite, None, sqlite_url(), sqlx::Sqlite, |table| {
    vec![
        format!(
            "CREATE TRIGGER {table}_drop_insert BEFORE INSERT ON {table} \
                 BEGIN SELECT RAISE(IGNORE); END"
        ),
        format!(
            "CREATE TRIGGER {table}_drop_update BEFORE UPDATE ON {table} \
                 BEGIN SELECT RAISE(IGNORE); END"
        ),
    ]
});

/// A MySQL/MariaDB pool whose sessions start with `autocommit` off (a
/// server default or `init_connect`; here the pool's own `after_connect`)
/// would keep every accepted write in a transaction that is rolled back
/// when its connection closes: the store and the issuer refuse it rather
/// than report a fence or a grant that will vanish.
#[tokio::test]
async fn a_mysql_pool_with_autocommit_off_is_refused() {
    if MYSQL.skipped() {
        return;
    }
    let pool = sqlx::pool::PoolOptions::<sqlx::MySql>::new()
        .max_connections(2)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::query("SET autocommit = 0")
                    .execute(conn)
                    .await
                    .map(|_| ())
            })
        })
        .connect(&MYSQL.endpoint())
        .await
        .unwrap_or_else(|e| MYSQL.unavailable(&e));
    let db = Db::mysql(pool).with_tables(tables_for("autocommit"));
    let store = SqlStore::new(db.clone()).await.map(drop);
    let issuer = SqlIssuer::new(db).await.map(drop);
    for (what, opened) in [("store", store), ("issuer", issuer)] {
        let reason = refusal(opened, "mysql", what);
        assert!(reason.contains("autocommit is off"), "{what}: {reason}");
    }
}

/// A server whose commits a crash can lose would grant a lost grant's
/// token again: PostgreSQL with `synchronous_commit=off` (here a session
/// setting in the URL, as a role or database default would be) is refused
/// by the issuer unless accepted by name, and `verify` reports it either way.
#[tokio::test]
async fn an_issuer_refuses_postgres_commits_a_crash_can_lose() {
    if POSTGRES.skipped() {
        return;
    }
    let url = with_option(
        &POSTGRES.endpoint(),
        "options=-c%20synchronous_commit%3Doff",
    );
    let prefix = tables_for("volatile").records.replace("records", "");
    let url = with_option(&url, &format!("fencing_table_prefix={prefix}"));
    let config = fencing_sql::SqlConfig::from_url(&url).expect("a URL");
    let reason = refusal(
        config.connect_issuer().await,
        "postgres",
        "synchronous_commit=off",
    );
    assert!(
        reason.contains("synchronous_commit is off")
            && reason.contains("fencing_accept_volatile_commits"),
        "{reason}"
    );
    let accepted = fencing_sql::SqlConfig::from_url(&with_option(
        &url,
        "fencing_accept_volatile_commits=true",
    ))
    .expect("a URL")
    .connect_issuer()
    .await
    .expect("accepted by name");
    let checks = accepted.verify().await.expect("verify");
    let check = fencing_testkit::safety::check(&checks, "commit durability");
    assert_eq!(check.verdict, Verdict::Unsafe, "{check:?}");
    assert!(check.detail.contains("accepted"), "{check:?}");
}

/// SQLite below `synchronous=FULL`, or in memory, loses commits in a crash
/// (or with the process): refused the same way.
#[tokio::test]
async fn an_issuer_refuses_sqlite_commits_a_crash_can_lose() {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
    let path = std::env::temp_dir().join(format!("fencing-normal-{}.sqlite", tables().records));
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal);
    let pool = sqlx::SqlitePool::connect_with(options).await.expect("pool");
    let reason = refusal(
        SqlIssuer::new(Db::sqlite(pool)).await,
        "sqlite",
        "synchronous=NORMAL",
    );
    assert!(reason.contains("synchronous is 1"), "{reason}");
    let memory = open("sqlite::memory:").await.expect("in memory");
    let reason = refusal(
        SqlIssuer::new(memory.clone()).await,
        "sqlite",
        "sqlite::memory:",
    );
    assert!(reason.contains("in-memory"), "{reason}");
    SqlIssuer::new(memory.accept_volatile_commits())
        .await
        .expect("accepted by name");
    let _ = std::fs::remove_file(&path);
}
