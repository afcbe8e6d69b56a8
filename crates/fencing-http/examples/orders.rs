//! An axum service guarded by `FencingLayer` on a durable store, and
//! Figure 9-6 played against it over HTTP: client 1 takes a lease, writes,
//! pauses past its lease; client 2 takes over and writes; client 1 wakes
//! and is refused with 409. The service then restarts on the same store and
//! still refuses client 1.
//!
//! ```sh
//! cargo run -p fencing-http --example orders                    # a SQLite file in a temp dir
//! cargo run -p fencing-http --example orders -- "$FENCING_PG_URL"
//! ```
//!
//! The URL opens both the issuer (SQL leases) and the store (the marks).
//! The handler writes through the same store with the admitted token
//! (`Admission`), so its own write is fenced too.

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Extension, Router};
use fencing_core::{FencedStore, IssuerExt, Lease, LeaseRequest};
use fencing_http::{Admission, FencingLayer};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

type BoxError = Box<dyn Error + Send + Sync>;

/// `PUT /orders/{id}`: fenced by the layer; stores the body under the
/// fenced key with the admitted token. `GET /orders/{id}`: not fenced.
fn app(store: Arc<dyn FencedStore>) -> Router {
    let reads = store.clone();
    let writes = store.clone();
    Router::new()
        .route(
            "/orders/{id}",
            get(move |Path(id): Path<String>| async move {
                match reads.get(&format!("orders/{id}")).await {
                    Ok(Some(v)) => (
                        StatusCode::OK,
                        String::from_utf8_lossy(&v.value).into_owned(),
                    ),
                    Ok(None) => (StatusCode::NOT_FOUND, String::new()),
                    Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
                }
            })
            .put(
                move |Extension(admission): Extension<Admission>, body: String| async move {
                    // The write itself carries the token: a request admitted
                    // with 7 that is still running when 8 is admitted cannot
                    // land its write afterwards.
                    match writes
                        .put(&admission.key, body.into(), admission.token)
                        .await
                    {
                        Ok(()) => (
                            StatusCode::OK,
                            format!("stored with token {}", admission.token),
                        ),
                        Err(e) => (StatusCode::CONFLICT, e.to_string()),
                    }
                },
            ),
        )
        .layer(FencingLayer::new(store).with_gate(Duration::from_secs(10)))
}

/// A running instance of the service.
struct Service {
    base: String,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(url: &str) -> Result<Service, BoxError> {
    let store = fencing_tokens::open_store(url).await?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        axum::serve(listener, app(store))
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    println!("service listening on {base}");
    Ok(Service { base, stop, task })
}

/// `PUT /orders/{id}` with the lease's resource and token; the status and body.
async fn put(
    http: &reqwest::Client,
    service: &Service,
    lease: &Lease,
    body: &str,
) -> Result<(u16, String), BoxError> {
    let mut headers = reqwest::header::HeaderMap::new();
    fencing_http::insert_lease_headers(&mut headers, lease)?;
    let id = lease.resource().trim_start_matches("orders/");
    let response = http
        .put(format!("{}/orders/{id}", service.base))
        .headers(headers)
        .body(body.to_owned())
        .send()
        .await?;
    Ok((response.status().as_u16(), response.text().await?))
}

fn expect(what: &str, got: (u16, String), status: u16) -> Result<(), BoxError> {
    println!("{what}: {} {}", got.0, got.1);
    if got.0 != status {
        return Err(format!("{what}: expected {status}, got {} {}", got.0, got.1).into());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let scratch = std::env::temp_dir().join(format!("fencing-http-orders-{}", std::process::id()));
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => {
            std::fs::create_dir_all(&scratch)?;
            format!("sqlite://{}", scratch.join("orders.sqlite").display())
        }
    };
    println!("store and issuer: {}", fencing_tokens::redact(&url));
    let issuer = fencing_tokens::open_issuer(&url).await?;
    let http = reqwest::Client::new();
    let resource = format!("orders/example-{}", std::process::id());
    let ttl = Duration::from_secs(1);

    let service = start(&url).await?;
    // Client 1 takes the lease and writes.
    let lease1 = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), Duration::ZERO)
        .await?;
    println!("client 1 holds {resource} with token {}", lease1.token());
    expect(
        "client 1 writes",
        put(&http, &service, &lease1, "paid by client 1").await?,
        200,
    )?;
    // ... and pauses past its lease (taken without a keep-alive, as a
    // paused process's would lapse). Client 2 takes over, holding its
    // lease with the guard, and writes.
    tokio::time::sleep(ttl + Duration::from_millis(500)).await;
    let held2 = issuer
        .lock(&resource)
        .ttl(ttl * 10)
        .wait(Duration::from_secs(5))
        .await?;
    let lease2 = held2.lease();
    println!("client 2 holds {resource} with token {}", lease2.token());
    expect(
        "client 2 writes",
        put(&http, &service, &lease2, "refunded by client 2").await?,
        200,
    )?;
    // Client 1 wakes up and writes with its old token: 409, problem+json.
    expect(
        "client 1 wakes and writes",
        put(&http, &service, &lease1, "shipped by client 1").await?,
        409,
    )?;

    // Restart the service on the same store: the mark is still there.
    let _ = service.stop.send(());
    service.task.await??;
    let service = start(&url).await?;
    expect(
        "client 1 after the restart",
        put(&http, &service, &lease1, "shipped by client 1").await?,
        409,
    )?;
    let value = http
        .get(format!("{}/{resource}", service.base))
        .send()
        .await?
        .text()
        .await?;
    println!("{resource} = {value:?}");
    if value != "refunded by client 2" {
        return Err(format!("the zombie's write landed: {value:?}").into());
    }
    held2.release().await?;
    let _ = service.stop.send(());
    service.task.await??;
    let _ = std::fs::remove_dir_all(&scratch);
    println!("the stale writes were refused; the store holds client 2's write");
    Ok(())
}
