//! Metrics to Prometheus: install `metrics-exporter-prometheus`'s recorder,
//! use backends opened by URL (they are instrumented), and print the scrape
//! text: a zombie's write counted in `fencing_stale_refusals_total`, a lost
//! lease, grants and renewals, and the compare-and-swap retries of a
//! 16-writer race on the blob loop.
//!
//! ```sh
//! cargo run -p fencing-tokens --features sqlite --example prometheus [ISSUER_URL STORE_URL]
//! ```
//!
//! Without arguments it uses two SQLite files in the temp directory. In a
//! service, serve `handle.render()` on `/metrics` instead of printing it.

use std::sync::Arc;
use std::time::Duration;

use fencing_core::adapter::blob::BlobStore;
use fencing_tokens::instrument::{Instrumented, lease_span};
use fencing_tokens::memory::MemoryBlobBackend;
use fencing_tokens::{Error, FencedStore, IssuerExt, LeaseRequest};
use metrics_exporter_prometheus::PrometheusBuilder;
use tracing::Instrument;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Warnings (the zombie's refusal, the lost lease) inside their spans,
    // with the key and token, on stderr; the scrape text on stdout.
    tracing_subscriber::fmt()
        .with_env_filter("warn,fencing_core=info")
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    let handle = PrometheusBuilder::new()
        .set_buckets(&[0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10.0])?
        .install_recorder()?;

    let scratch = std::env::temp_dir().join(format!("fencing-prometheus-{}", std::process::id()));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (issuer_url, store_url) = match args.as_slice() {
        [issuer, store] => (issuer.clone(), store.clone()),
        [] => (
            format!("sqlite://{}-issuer.sqlite", scratch.display()),
            format!("sqlite://{}-store.sqlite", scratch.display()),
        ),
        _ => return Err("usage: prometheus [ISSUER_URL STORE_URL]".into()),
    };
    let issuer = fencing_tokens::open_issuer(&issuer_url).await?;
    let store = fencing_tokens::open_store(&store_url).await?;
    let resource = format!("prometheus-example-{}", std::process::id());
    let ttl = Duration::from_secs(1);

    // Figure 9-6: client 1 pauses past its lease, client 2 takes over,
    // fences and writes; client 1 wakes and is refused.
    let client1 = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), Duration::from_secs(5))
        .await?;
    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    let keep_alive = issuer
        .lock(&resource)
        .ttl(ttl)
        .wait(Duration::from_secs(5))
        .fence(&store, [resource.as_str()])
        .await?;
    let client2 = keep_alive.lease();
    async {
        store
            .put(&resource, "from client 2".into(), client2.token())
            .await
    }
    .instrument(lease_span(&client2))
    .await?;
    let zombie = store
        .put(&resource, "from client 1".into(), client1.token())
        .await;
    assert!(
        matches!(zombie, Err(Error::StaleToken { .. })),
        "{zombie:?}"
    );

    // Client 2's lease is taken from under its keep-alive (here: released
    // behind its back); the next renewal is refused and the lease is lost.
    tokio::time::sleep(ttl / 2).await; // one renewal first
    issuer.release(&keep_alive.lease()).await?;
    let lost = tokio::time::timeout(ttl * 2, keep_alive.lost()).await?;
    eprintln!("lost: {lost}");

    // 16 writers racing on one object of the blob loop (the memory backend
    // here; S3, GCS and Azure run the same loop).
    let blobs: Arc<dyn FencedStore> =
        Arc::new(Instrumented::new(BlobStore::new(MemoryBlobBackend::new())));
    let writers: Vec<_> = (0..16u8)
        .map(|w| {
            let blobs = blobs.clone();
            let token = client2.token();
            tokio::spawn(async move {
                for i in 0..10u8 {
                    blobs.put("hot", vec![w, i].into(), token).await?;
                }
                Ok::<_, Error>(())
            })
        })
        .collect();
    for writer in writers {
        writer.await??;
    }

    let scrape = handle.render();
    println!("{scrape}");
    let store_label = format!("store=\"{}\"", store.name());
    assert!(
        scrape
            .lines()
            .any(|l| l.starts_with("fencing_stale_refusals_total{") && l.contains(&store_label)),
        "the zombie's refusal is in the scrape text"
    );
    assert!(scrape.contains("fencing_leases_lost_total{"));
    assert!(scrape.contains("fencing_cas_retries_total{"));
    for suffix in ["-issuer.sqlite", "-store.sqlite"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", scratch.display()));
    }
    Ok(())
}
