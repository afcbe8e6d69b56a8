//! One name, one mark: `SqlStore` (`put`, `fence`, and what fences through
//! it: an election's takeover, `fence lead --fence`, the HTTP layer) and
//! `fence_transaction` on the same database and table prefix share the mark
//! of a name, so whichever of them fences `orders` with 6, every other one
//! refuses 5 for `orders`. On real PostgreSQL, real MariaDB and a SQLite
//! file; the HTTP pairing is in `fencing-http`'s `tests/sql_guard.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fencing_core::election::Election;
use fencing_core::{Error, FencedStore, FencingToken, TokenIssuer};
use fencing_harness::env::{MYSQL, POSTGRES};
use fencing_sql::{Db, SqlIssuer, SqlStore, Tables, fence_transaction};
use fencing_testkit::history::{History, Op, OpKind, Outcome};

mod common;
use common::{connect, sqlite_url, tables};

fn t(n: u64) -> FencingToken {
    FencingToken::new(n)
}

fn assert_stale<T: std::fmt::Debug>(
    what: &str,
    result: fencing_core::Result<T>,
    presented: u64,
    current: u64,
) {
    match result {
        Err(Error::StaleToken {
            presented: p,
            current: c,
            ..
        }) if (p.get(), c.get()) == (presented, current) => {}
        other => {
            panic!("{what}: token {presented} must be refused below mark {current}, got {other:?}")
        }
    }
}

/// A small random stream (splitmix64) seeded from a fresh random name, so
/// the race differs per run without another dependency.
struct Rng(u64);

impl Rng {
    fn new() -> Self {
        let prefix = fencing_testkit::unique_prefix();
        let seed = u64::from_str_radix(prefix.trim_start_matches("ft-"), 16).expect("hex");
        Self(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

macro_rules! one_mark_suite {
    ($module:ident, $server:expr, $url:expr, $db:ty, $begin:literal) => {
        mod $module {
            use super::*;

            struct Setup {
                db: Db,
                store: Arc<SqlStore>,
                pool: sqlx::Pool<$db>,
                tables: Tables,
            }

            async fn setup() -> Option<Setup> {
                let db = connect($server, &$url).await?;
                let store = Arc::new(SqlStore::new(db.clone()).await.expect("store"));
                let pool = sqlx::pool::PoolOptions::<$db>::new()
                    .max_connections(12)
                    .connect(&$url)
                    .await
                    .expect("pool");
                Some(Setup {
                    db,
                    store,
                    pool,
                    tables: tables(),
                })
            }

            /// One guarded transaction: the fence, committed if it held.
            async fn guard(
                pool: &sqlx::Pool<$db>,
                tables: &Tables,
                name: &str,
                token: u64,
            ) -> fencing_core::Result<()> {
                let mut tx = pool.begin_with($begin).await.expect("begin");
                match fence_transaction(&mut tx, tables, name, t(token)).await {
                    Ok(()) => {
                        tx.commit().await.expect("commit");
                        Ok(())
                    }
                    Err(e) => {
                        tx.rollback().await.expect("rollback");
                        Err(e)
                    }
                }
            }

            #[tokio::test]
            async fn a_store_fence_refuses_a_lower_guard() {
                let Some(s) = setup().await else { return };
                let name = fencing_testkit::unique_name("orders");
                s.store.fence(&name, t(6)).await.expect("fence 6");
                assert_stale("guard after store.fence", guard(&s.pool, &s.tables, &name, 5).await, 5, 6);
                guard(&s.pool, &s.tables, &name, 6).await.expect("equal is accepted");
                assert_eq!(s.store.get(&name).await.unwrap(), None, "a fence is not a value");
                assert_eq!(s.store.mark(&name).await.unwrap(), Some(t(6)));
            }

            #[tokio::test]
            async fn a_guard_refuses_a_lower_store_put_and_fence() {
                let Some(s) = setup().await else { return };
                let name = fencing_testkit::unique_name("orders");
                guard(&s.pool, &s.tables, &name, 6).await.expect("guard 6");
                assert_stale("store.put after guard", s.store.put(&name, "5".into(), t(5)).await, 5, 6);
                assert_stale("store.fence after guard", s.store.fence(&name, t(5)).await, 5, 6);
                assert_stale("store.delete after guard", s.store.delete(&name, t(5)).await, 5, 6);
                // The guard's row is a mark, not a value.
                assert_eq!(s.store.get(&name).await.unwrap(), None);
                assert_eq!(s.store.mark(&name).await.unwrap(), Some(t(6)));
                s.store.put(&name, "6".into(), t(6)).await.expect("equal is accepted");
                assert_eq!(s.store.get(&name).await.unwrap().map(|v| v.value), Some(Bytes::from("6")));
            }

            #[tokio::test]
            async fn a_store_put_refuses_a_lower_guard_and_a_guard_keeps_the_value() {
                let Some(s) = setup().await else { return };
                let name = fencing_testkit::unique_name("orders");
                s.store.put(&name, "by 6".into(), t(6)).await.expect("put 6");
                assert_stale("guard after store.put", guard(&s.pool, &s.tables, &name, 5).await, 5, 6);
                guard(&s.pool, &s.tables, &name, 7).await.expect("guard 7");
                let held = s.store.get(&name).await.unwrap().expect("the value is still there");
                assert_eq!((held.value, held.token), (Bytes::from("by 6"), t(7)));
                assert_stale("store.put after guard 7", s.store.put(&name, "by 6 again".into(), t(6)).await, 6, 7);
            }

            /// The guard's mark is a row lock held until its transaction
            /// ends: a new term's fence returns only after the deposed
            /// leader's open transaction is over, so none of its writes can
            /// commit after the fence.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_store_fence_waits_for_an_open_guarded_transaction() {
                let Some(s) = setup().await else { return };
                let name = fencing_testkit::unique_name("orders");
                let mut tx = s.pool.begin_with($begin).await.unwrap();
                fence_transaction(&mut tx, &s.tables, &name, t(5)).await.expect("guard 5");
                let store = s.store.clone();
                let fence_name = name.clone();
                let fence = tokio::spawn(async move { store.fence(&fence_name, t(6)).await });
                // Long enough for an unblocked fence to return.
                tokio::time::sleep(Duration::from_millis(500)).await;
                assert!(
                    !fence.is_finished(),
                    "store.fence(6) returned while a transaction fenced with 5 is still open: {:?}",
                    fence.await
                );
                tx.commit().await.expect("the zombie's transaction commits before the fence");
                tokio::time::timeout(Duration::from_secs(30), fence)
                    .await
                    .expect("the fence goes through once the transaction ended")
                    .unwrap()
                    .expect("fence 6");
                assert_stale("guard after the fence", guard(&s.pool, &s.tables, &name, 5).await, 5, 6);
            }

            /// `Election::fence_on_takeover` with the SQL store: the new
            /// term's fence shuts the deposed leader's guarded transactions
            /// out (`fence lead --fence postgres://…#orders` does this).
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_election_takeover_refuses_the_deposed_leaders_guard() {
                let Some(s) = setup().await else { return };
                let issuer: Arc<dyn TokenIssuer> =
                    Arc::new(SqlIssuer::new(s.db.clone()).await.expect("issuer"));
                let resource = fencing_testkit::unique_name("leader");
                let name = fencing_testkit::unique_name("orders");
                let ttl = Duration::from_secs(5);
                let election = |candidate: &str| {
                    Election::new(issuer.clone(), resource.clone(), candidate, ttl)
                        .fence_on_takeover(s.store.clone(), name.clone())
                };
                let a = election("a").campaign().await.expect("a leads");
                let old = a.token().get();
                guard(&s.pool, &s.tables, &name, old).await.expect("a's term writes");
                let b = election("b");
                let b = tokio::spawn(async move { b.campaign().await });
                a.resign().await.expect("a hands over");
                let b = tokio::time::timeout(Duration::from_secs(30), b)
                    .await
                    .expect("b wins")
                    .unwrap()
                    .expect("b leads");
                let new = b.token().get();
                assert!(new > old);
                // b has not written through the guard: its takeover alone refuses a.
                assert_stale("the deposed leader's guard", guard(&s.pool, &s.tables, &name, old).await, old, new);
                guard(&s.pool, &s.tables, &name, new).await.expect("b's term writes");
                b.resign().await.unwrap();
            }

            /// A row another program wrote with a negative mark is foreign
            /// data for the guard too, and left as it was.
            #[tokio::test]
            async fn a_foreign_mark_refuses_the_guard() {
                let Some(s) = setup().await else { return };
                let name = fencing_testkit::unique_name("foreign");
                sqlx::query(&format!(
                    "INSERT INTO {} (k, v, lock_token) VALUES ('{name}', 'legacy', -1)",
                    s.tables.records
                ))
                .execute(&s.pool)
                .await
                .unwrap();
                match guard(&s.pool, &s.tables, &name, 1).await {
                    Err(Error::Backend { retryable: false, source, .. }) => {
                        let message = source.to_string();
                        assert!(message.contains("-1") && message.contains("not written by fencing"), "{message}");
                    }
                    other => panic!("the guard on a negative mark must be refused as foreign data, got {other:?}"),
                }
                let row: (Vec<u8>, i64) = sqlx::query_as(&format!(
                    "SELECT v, lock_token FROM {} WHERE k = '{name}'",
                    s.tables.records
                ))
                .fetch_one(&s.pool)
                .await
                .unwrap();
                assert_eq!(row, (b"legacy".to_vec(), -1), "the foreign row changed");
            }

            /// Marks an earlier release kept in the domains table are not
            /// lost: the guard refuses below them at once, and opening the
            /// tables carries them into the records table (the higher of
            /// the two wins, a foreign one stays foreign), where the store
            /// sees them.
            #[tokio::test]
            async fn marks_in_the_legacy_domains_table_are_kept() {
                let Some(s) = setup().await else { return };
                let (legacy, lower, foreign) = (
                    fencing_testkit::unique_name("legacy"),
                    fencing_testkit::unique_name("legacy-lower"),
                    fencing_testkit::unique_name("legacy-foreign"),
                );
                s.store.put(&lower, "at 9".into(), t(9)).await.unwrap();
                for (name, mark) in [(&legacy, 9), (&lower, 4), (&foreign, -1)] {
                    sqlx::query(&format!(
                        "INSERT INTO {} (domain, lock_token) VALUES ('{name}', {mark})",
                        s.tables.domains
                    ))
                    .execute(&s.pool)
                    .await
                    .unwrap();
                }
                // Before any migration ran.
                assert_stale("guard below a legacy mark", guard(&s.pool, &s.tables, &legacy, 8).await, 8, 9);

                // Opening the tables (any SqlStore::new, SqlIssuer::new, Db::create_tables) migrates.
                s.db.create_tables().await.expect("create and migrate");
                s.db.create_tables().await.expect("and again: idempotent");
                let store = SqlStore::new(s.db.clone()).await.unwrap();
                assert_eq!(store.mark(&legacy).await.unwrap(), Some(t(9)));
                assert_eq!(store.get(&legacy).await.unwrap(), None, "a legacy mark is not a value");
                assert_stale("store.put below a legacy mark", store.put(&legacy, "8".into(), t(8)).await, 8, 9);
                guard(&s.pool, &s.tables, &legacy, 9).await.expect("equal is accepted");
                guard(&s.pool, &s.tables, &legacy, 10).await.expect("higher is accepted");
                assert_eq!(store.mark(&legacy).await.unwrap(), Some(t(10)));

                // A lower legacy mark lowers nothing.
                let kept = store.get(&lower).await.unwrap().expect("value");
                assert_eq!((kept.value, kept.token), (Bytes::from("at 9"), t(9)));

                // A foreign legacy row stays refused.
                assert!(
                    matches!(store.mark(&foreign).await, Err(Error::Backend { retryable: false, .. })),
                    "a negative legacy mark must stay foreign data"
                );
                assert!(matches!(
                    guard(&s.pool, &s.tables, &foreign, 1).await,
                    Err(Error::Backend { retryable: false, .. })
                ));
            }

            /// Guarded transactions and store writers race on one name with
            /// random tokens: no lower token is accepted after a higher one
            /// was (across all three APIs), every refusal names a mark
            /// someone set, and the final mark is the highest accepted. The
            /// guarded transactions also keep a ledger of their own: the
            /// token each committed, and how often a commit carried a token
            /// below the one before it.
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn guards_and_store_writers_racing_on_one_name() {
                const WORKERS: u64 = 8;
                const OPS: u64 = 30;
                // Guarded transactions are recorded as fences of clients from here up.
                const GUARD: usize = 1000;
                let Some(s) = setup().await else { return };
                let name = fencing_testkit::unique_name("race");
                let ledger = format!("{}ledger_{}", s.tables.records, fencing_testkit::unique_prefix().replace('-', "_"));
                sqlx::query(&format!(
                    "CREATE TABLE {ledger} (id INTEGER PRIMARY KEY, last BIGINT NOT NULL, regressions BIGINT NOT NULL)"
                ))
                .execute(&s.pool)
                .await
                .unwrap();
                sqlx::query(&format!("INSERT INTO {ledger} (id, last, regressions) VALUES (1, 0, 0)"))
                    .execute(&s.pool)
                    .await
                    .unwrap();
                let history = History::new();
                let mut tasks = Vec::new();
                for worker in 0..WORKERS {
                    let (store, pool, tables) = (s.store.clone(), s.pool.clone(), s.tables.clone());
                    let (history, name, ledger) = (history.clone(), name.clone(), ledger.clone());
                    tasks.push(tokio::spawn(async move {
                        let mut rng = Rng::new();
                        let client = usize::try_from(worker).unwrap();
                        for i in 0..OPS {
                            // Tokens drift upward with interleaving, so every
                            // API races on both sides of the mark.
                            let token = i * WORKERS + rng.below(WORKERS * 3) + 1;
                            match rng.below(10) {
                                0 => {
                                    let _ = history.fence(&*store, client, &name, t(token)).await;
                                }
                                1..=4 => {
                                    let value = Bytes::from(format!("worker {worker} op {i} token {token}"));
                                    let _ = history.put(&*store, client, &name, value, t(token)).await;
                                }
                                _ => {
                                    let started = Instant::now();
                                    let outcome = guarded_write(&pool, &tables, &name, &ledger, token).await;
                                    history.push(Op {
                                        client: GUARD + client,
                                        kind: OpKind::Fence,
                                        token: t(token),
                                        value: Bytes::new(),
                                        started,
                                        finished: Instant::now(),
                                        outcome,
                                    });
                                }
                            }
                        }
                    }));
                }
                for task in tasks {
                    task.await.expect("worker panicked");
                }
                let tally = history.check_final(&*s.store, &name).await;
                assert!(tally.violations.is_empty(), "{}", tally.violations.join("\n"));
                let failed: Vec<_> = history
                    .ops()
                    .into_iter()
                    .filter_map(|o| match o.outcome {
                        Outcome::Failed(e) => Some(e),
                        _ => None,
                    })
                    .collect();
                assert!(failed.is_empty(), "operations failed: {failed:?}");
                assert!(tally.accepted > 0 && tally.refused > 0, "the race proved nothing: {tally:?}");

                let (last, regressions): (i64, i64) =
                    sqlx::query_as(&format!("SELECT last, regressions FROM {ledger} WHERE id = 1"))
                        .fetch_one(&s.pool)
                        .await
                        .unwrap();
                let top_guard = history
                    .ops()
                    .iter()
                    .filter(|o| o.client >= GUARD && o.outcome == Outcome::Accepted)
                    .map(|o| o.token.get())
                    .max();
                assert_eq!(regressions, 0, "a guarded transaction committed a token below the one before it");
                // Guarded commits are ordered by token: the last is the highest.
                assert_eq!(top_guard, u64::try_from(last).ok().filter(|&l| l > 0), "the ledger's last commit");
                sqlx::query(&format!("DROP TABLE {ledger}")).execute(&s.pool).await.unwrap();
            }

            /// The guard, then the ledger's write, in one transaction.
            async fn guarded_write(
                pool: &sqlx::Pool<$db>,
                tables: &Tables,
                name: &str,
                ledger: &str,
                token: u64,
            ) -> Outcome {
                let raw = i64::try_from(token).unwrap();
                let mut tx = match pool.begin_with($begin).await {
                    Ok(tx) => tx,
                    Err(e) => return Outcome::Failed(format!("begin: {e}")),
                };
                match fence_transaction(&mut tx, tables, name, t(token)).await {
                    Ok(()) => {}
                    Err(Error::StaleToken { current, .. }) => {
                        let _ = tx.rollback().await;
                        return Outcome::Refused { current };
                    }
                    Err(e) => return Outcome::Failed(e.to_string()),
                }
                let update = format!(
                    "UPDATE {ledger} SET regressions = regressions + CASE WHEN last > {raw} THEN 1 ELSE 0 END, \
                     last = {raw} WHERE id = 1"
                );
                if let Err(e) = sqlx::query(&update).execute(&mut *tx).await {
                    return Outcome::Failed(format!("ledger: {e}"));
                }
                match tx.commit().await {
                    Ok(()) => Outcome::Accepted,
                    Err(e) => Outcome::Failed(format!("commit: {e}")),
                }
            }
        }
    };
}

one_mark_suite!(
    postgres,
    Some(&POSTGRES),
    POSTGRES.endpoint(),
    sqlx::Postgres,
    "BEGIN"
);
one_mark_suite!(
    mariadb,
    Some(&MYSQL),
    MYSQL.endpoint(),
    sqlx::MySql,
    "START TRANSACTION"
);
one_mark_suite!(sqlite, None, sqlite_url(), sqlx::Sqlite, "BEGIN IMMEDIATE");
