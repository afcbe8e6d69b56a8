//! The layer on a SQL store and `fencing_sql::fence_transaction` in the
//! handler, as the README recommends: the layer's admission fence and the
//! handler's transaction guard share one mark per name, so a request
//! admitted with 6 refuses a transaction guarded with 5 for the same key,
//! even before 6's handler wrote anything. On real PostgreSQL, real MariaDB
//! and a SQLite file, over real HTTP.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::put;
use axum::{Extension, Router};
use fencing_core::{Error, FencedStore, FencingToken};
use fencing_harness::env::{MYSQL, POSTGRES, Server};
use fencing_http::{Admission, FencingLayer};
use fencing_tokens::sql::{SqlConfig, SqlStore, Tables, fence_transaction, sqlx};
use tokio::sync::{mpsc, oneshot};

fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}_{}_{nanos}", std::process::id())
}

fn headers(resource: &str, token: u64) -> reqwest::header::HeaderMap {
    let mut headers = reqwest::header::HeaderMap::new();
    fencing_http::insert_headers(&mut headers, resource, FencingToken::new(token)).unwrap();
    headers
}

async fn store_on(server: Option<&Server>, url: &str) -> Option<(Arc<SqlStore>, Tables)> {
    if server.is_some_and(Server::skipped) {
        return None;
    }
    let config = SqlConfig::from_url(url).expect("URL");
    let db = match config.connect_db().await {
        Ok(db) => db,
        Err(e) => match server {
            Some(server) => server.unavailable(&e),
            None => panic!("cannot open {url}: {e}"),
        },
    };
    let tables = db.tables().clone();
    Some((Arc::new(SqlStore::new(db).await.expect("store")), tables))
}

macro_rules! sql_guard_suite {
    ($module:ident, $server:expr, $url:expr, $db:ty, $begin:literal) => {
        mod $module {
            use super::*;

            /// The handler's state: its database, and per token a signal to
            /// wait for before writing (so a test can hold an admitted
            /// request between its admission and its write).
            struct App {
                pool: sqlx::Pool<$db>,
                tables: Tables,
                orders: String,
                entered: mpsc::UnboundedSender<u64>,
                hold: Mutex<HashMap<u64, oneshot::Receiver<()>>>,
            }

            /// `PUT /orders/{id}`: the admitted token fences the write's
            /// transaction, the README's remedy for a late admitted write.
            async fn write_order(
                State(app): State<Arc<App>>,
                Path(id): Path<i64>,
                Extension(admission): Extension<Admission>,
            ) -> (StatusCode, String) {
                let token = admission.token;
                let _ = app.entered.send(token.get());
                let held = app.hold.lock().unwrap().remove(&token.get());
                if let Some(release) = held {
                    release.await.expect("the test releases the request");
                }
                let mut tx = app.pool.begin_with($begin).await.expect("begin");
                match fence_transaction(&mut tx, &app.tables, &admission.key, token).await {
                    Ok(()) => {}
                    Err(e @ Error::StaleToken { .. }) => {
                        tx.rollback().await.unwrap();
                        return (StatusCode::CONFLICT, format!("refused in the transaction: {e}"));
                    }
                    Err(e) => panic!("fence_transaction: {e:?}"),
                }
                sqlx::query(&format!(
                    "UPDATE {} SET status = 'written by {}' WHERE id = {id}",
                    app.orders,
                    token.get()
                ))
                .execute(&mut *tx)
                .await
                .unwrap();
                tx.commit().await.unwrap();
                (StatusCode::OK, format!("written by {token}"))
            }

            struct Running {
                base: String,
                app: Arc<App>,
                entered: mpsc::UnboundedReceiver<u64>,
                store: Arc<SqlStore>,
            }

            async fn start() -> Option<Running> {
                let (store, tables) = store_on($server, &$url).await?;
                let pool = sqlx::pool::PoolOptions::<$db>::new()
                    .max_connections(4)
                    .connect(&$url)
                    .await
                    .expect("pool");
                let orders = unique("http_orders");
                sqlx::query(&format!(
                    "CREATE TABLE {orders} (id INTEGER PRIMARY KEY, status VARCHAR(64))"
                ))
                .execute(&pool)
                .await
                .unwrap();
                sqlx::query(&format!("INSERT INTO {orders} (id, status) VALUES (7, 'new')"))
                    .execute(&pool)
                    .await
                    .unwrap();
                let (entered_tx, entered) = mpsc::unbounded_channel();
                let app = Arc::new(App {
                    pool,
                    tables,
                    orders,
                    entered: entered_tx,
                    hold: Mutex::new(HashMap::new()),
                });
                let router = Router::new()
                    .route("/orders/{id}", put(write_order))
                    .with_state(app.clone())
                    .layer(FencingLayer::new(store.clone()));
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr: SocketAddr = listener.local_addr().unwrap();
                tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
                Some(Running {
                    base: format!("http://{addr}"),
                    app,
                    entered,
                    store,
                })
            }

            impl Running {
                fn send(&self, resource: &str, token: u64) -> tokio::task::JoinHandle<(u16, String)> {
                    let request = reqwest::Client::new()
                        .put(format!("{}/orders/7", self.base))
                        .headers(headers(resource, token));
                    tokio::spawn(async move {
                        let response = request.send().await.unwrap();
                        (response.status().as_u16(), response.text().await.unwrap())
                    })
                }

                fn hold(&self, token: u64) -> oneshot::Sender<()> {
                    let (release, held) = oneshot::channel();
                    self.app.hold.lock().unwrap().insert(token, held);
                    release
                }

                async fn admitted(&mut self) -> u64 {
                    tokio::time::timeout(Duration::from_secs(30), self.entered.recv())
                        .await
                        .expect("a request reaches the handler")
                        .expect("the service runs")
                }

                async fn status(&self) -> String {
                    sqlx::query_scalar(&format!("SELECT status FROM {} WHERE id = 7", self.app.orders))
                        .fetch_one(&self.app.pool)
                        .await
                        .unwrap()
                }

                async fn guard(&self, key: &str, token: u64) -> fencing_core::Result<()> {
                    let mut tx = self.app.pool.begin_with($begin).await.unwrap();
                    let fenced = fence_transaction(&mut tx, &self.app.tables, key, FencingToken::new(token)).await;
                    match fenced {
                        Ok(()) => tx.commit().await.unwrap(),
                        Err(_) => tx.rollback().await.unwrap(),
                    }
                    fenced
                }

                async fn finish(self) {
                    sqlx::query(&format!("DROP TABLE {}", self.app.orders))
                        .execute(&self.app.pool)
                        .await
                        .unwrap();
                }
            }

            /// Admission alone fences: a request admitted with 6 (whose
            /// handler has not written yet) refuses a transaction guarded
            /// with 5 for its key, and a guarded transaction with 8 refuses a
            /// request with 7 at the door.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_admission_refuses_a_lower_guarded_transaction() {
                let Some(mut service) = start().await else { return };
                let resource = unique("orders");
                let release = service.hold(6);
                let request = service.send(&resource, 6);
                assert_eq!(service.admitted().await, 6);
                match service.guard(&resource, 5).await {
                    Err(Error::StaleToken { presented, current, .. }) => {
                        assert_eq!((presented.get(), current.get()), (5, 6));
                    }
                    other => panic!("a transaction guarded with 5 after 6 was admitted must be stale, got {other:?}"),
                }
                release.send(()).unwrap();
                assert_eq!(request.await.unwrap().0, 200);

                service.guard(&resource, 8).await.expect("guard 8");
                let (status, body) = service.send(&resource, 7).await.unwrap();
                assert_eq!(status, 409, "a request with 7 after a guarded 8: {body}");
                assert_eq!(service.store.mark(&resource).await.unwrap(), Some(FencingToken::new(8)));
                assert_eq!(service.status().await, "written by 6");
                service.finish().await;
            }

            /// The race the layer cannot close alone (README): 5 is
            /// admitted and held before its write; 6 is admitted. 5's
            /// write, fenced with its admitted token, is refused inside the
            /// database, and 6's lands.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_late_admitted_write_is_refused_in_its_transaction() {
                let Some(mut service) = start().await else { return };
                let resource = unique("orders");
                let (release_5, release_6) = (service.hold(5), service.hold(6));
                let late = service.send(&resource, 5);
                assert_eq!(service.admitted().await, 5);
                let current = service.send(&resource, 6);
                assert_eq!(service.admitted().await, 6);
                release_5.send(()).unwrap();
                let (status, body) = late.await.unwrap();
                assert_eq!(status, 409, "5's write after 6 was admitted: {body}");
                assert!(body.starts_with("refused in the transaction"), "{body}");
                assert_eq!(service.status().await, "new", "5's write landed");
                release_6.send(()).unwrap();
                assert_eq!(current.await.unwrap().0, 200);
                assert_eq!(service.status().await, "written by 6");
                service.finish().await;
            }
        }
    };
}

sql_guard_suite!(
    postgres,
    Some(&POSTGRES),
    POSTGRES.endpoint(),
    sqlx::Postgres,
    "BEGIN"
);
sql_guard_suite!(
    mariadb,
    Some(&MYSQL),
    MYSQL.endpoint(),
    sqlx::MySql,
    "START TRANSACTION"
);
sql_guard_suite!(sqlite, None, sqlite_url(), sqlx::Sqlite, "BEGIN IMMEDIATE");

fn sqlite_url() -> String {
    static PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let path = PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("{}.sqlite", unique("fencing-http-sql-guard")))
    });
    format!("sqlite://{}", path.display())
}
