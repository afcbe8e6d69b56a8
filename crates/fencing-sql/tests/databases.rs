//! The conformance suites of `fencing_testkit` (each with the zombie
//! scenario and the history checker against the in-memory other half), the
//! same two with issuer and store on one database, a 16-writer race and the
//! transaction guard, on real PostgreSQL, real MariaDB and a SQLite file.
//!
//! Servers come from `FENCING_PG_URL` and `FENCING_MYSQL_URL` (defaults:
//! `integration/services.sh`). All tables of one run share a random prefix.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fencing::{Error, FencedStore, FencingToken, TokenIssuer};
use fencing_sql::{Db, SqlIssuer, SqlStore, Tables, fence_transaction};
use fencing_testkit::env::{MYSQL, POSTGRES, Server};
use fencing_testkit::issuer::IssuerProfile;

/// One table prefix per test run.
fn tables() -> Tables {
    static PREFIX: OnceLock<String> = OnceLock::new();
    let prefix = PREFIX.get_or_init(|| fencing_testkit::unique_prefix().replace('-', "_") + "_");
    Tables::with_prefix(prefix).expect("valid prefix")
}

fn sqlite_url() -> String {
    static PATH: OnceLock<std::path::PathBuf> = OnceLock::new();
    let path = PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("fencing-test-{}.sqlite", tables().records))
    });
    format!("sqlite://{}", path.display())
}

async fn connect(server: Option<&Server>, url: &str) -> Option<Db> {
    if server.is_some_and(Server::skipped) {
        return None;
    }
    match Db::connect(url).await {
        Ok(db) => Some(db.with_tables(tables())),
        Err(e) => match server {
            Some(server) => server.unavailable(&e),
            None => panic!("cannot open {url}: {e}"),
        },
    }
}

fn profile() -> IssuerProfile {
    // The database's clock decides expiry; allow for a slow shared machine.
    IssuerProfile {
        expiry_slack: Duration::from_secs(2),
        ..IssuerProfile::with_ttl(Duration::from_millis(400))
    }
}

macro_rules! database_suite {
    ($module:ident, $server:expr, $url:expr) => {
        mod $module {
            use super::*;

            pub(super) async fn db() -> Option<Db> {
                connect($server, &$url).await
            }
            async fn store() -> Option<Arc<dyn FencedStore>> {
                Some(Arc::new(SqlStore::new(db().await?).await.expect("store")))
            }
            async fn issuer() -> Option<Arc<dyn TokenIssuer>> {
                Some(Arc::new(SqlIssuer::new(db().await?).await.expect("issuer")))
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

database_suite!(postgres, Some(&POSTGRES), POSTGRES.endpoint());
database_suite!(mariadb, Some(&MYSQL), MYSQL.endpoint());
database_suite!(sqlite, None, sqlite_url());

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
                let mut conn = pool.acquire().await.unwrap();
                sqlx::query($begin).execute(&mut *conn).await.unwrap();
                fence_transaction(&mut *conn, &tables, &domain, FencingToken::new(2))
                    .await
                    .expect("holder fences");
                sqlx::query(&format!("UPDATE {table} SET status = 'shipped by 2'"))
                    .execute(&mut *conn)
                    .await
                    .unwrap();
                sqlx::query("COMMIT").execute(&mut *conn).await.unwrap();

                // The zombie (token 1) writes many rows, then checks its fence
                // before committing: refused, and it rolls back all of it.
                sqlx::query($begin).execute(&mut *conn).await.unwrap();
                sqlx::query(&format!("UPDATE {table} SET status = 'zombie'"))
                    .execute(&mut *conn)
                    .await
                    .unwrap();
                sqlx::query(&format!(
                    "INSERT INTO {table} (id, status) VALUES (4, 'zombie')"
                ))
                .execute(&mut *conn)
                .await
                .unwrap();
                match fence_transaction(&mut *conn, &tables, &domain, FencingToken::new(1)).await {
                    Err(Error::StaleToken {
                        presented, current, ..
                    }) => {
                        assert_eq!((presented.get(), current.get()), (1, 2));
                    }
                    other => panic!("the zombie's fence must be stale, got {other:?}"),
                }
                sqlx::query("ROLLBACK").execute(&mut *conn).await.unwrap();

                // A zombie that fences first is refused before it writes.
                sqlx::query($begin).execute(&mut *conn).await.unwrap();
                assert!(matches!(
                    fence_transaction(&mut *conn, &tables, &domain, FencingToken::new(1)).await,
                    Err(Error::StaleToken { .. })
                ));
                sqlx::query("ROLLBACK").execute(&mut *conn).await.unwrap();
                drop(conn);

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

            #[tokio::test]
            async fn domains_fence_independently() {
                let Some((pool, tables)) = pool().await else {
                    return;
                };
                let a = fencing_testkit::unique_name("domain-a");
                let b = fencing_testkit::unique_name("domain-b");
                let mut conn = pool.acquire().await.unwrap();
                fence_transaction(&mut *conn, &tables, &a, FencingToken::new(5))
                    .await
                    .unwrap();
                fence_transaction(&mut *conn, &tables, &b, FencingToken::new(1))
                    .await
                    .expect("b is not fenced by a");
                assert!(matches!(
                    fence_transaction(&mut *conn, &tables, &a, FencingToken::new(4)).await,
                    Err(Error::StaleToken { .. })
                ));
                fence_transaction(&mut *conn, &tables, &a, FencingToken::new(5))
                    .await
                    .expect("equal is accepted");
                fence_transaction(&mut *conn, &tables, &b, FencingToken::new(1))
                    .await
                    .expect("equal is accepted");
                assert!(matches!(
                    fence_transaction(&mut *conn, &tables, "", FencingToken::new(1)).await,
                    Err(Error::InvalidInput { .. })
                ));
                assert!(matches!(
                    fence_transaction(&mut *conn, &tables, &a, FencingToken::new(u64::MAX)).await,
                    Err(Error::TokenOutOfRange { .. })
                ));
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
    let e = Db::connect("postgres://fencing:fencing@127.0.0.1:1/fencing")
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
    let e = Db::connect("oracle://x").await.expect_err("unsupported");
    assert!(matches!(e, Error::InvalidInput { .. }), "{e:?}");
    assert!(Tables::with_prefix("x; DROP TABLE y").is_err());
}
