//! The program every user writes first, from the README: hold a lease from
//! etcd, fence and write a report to S3, give the lease back. Then what the
//! guard promises, checked: a paused former holder is refused, a lost lease
//! stops the work, a dropped guard frees the lease at once.
//!
//! ```sh
//! cargo run -p fencing-tokens --features etcd,s3 --example three_lines [ETCD_URL S3_URL]
//! ```
//!
//! Without arguments: etcd at `FENCING_ETCD_ENDPOINTS` and a fresh bucket
//! on the S3 emulator at `FENCING_S3_ENDPOINT` (what
//! `integration/services.sh env` exports; CI runs it so).

use std::time::Duration;

use fencing_tokens::{Error, IssuerExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (issuer_url, store_url) = urls().await?;
    let issuer = fencing_tokens::open_issuer(&issuer_url).await?;
    let store = fencing_tokens::open_store(&store_url).await?;
    let report = format!("report of {}", std::process::id());

    // The three lines.
    let held = issuer
        .lock("nightly-report")
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(10))
        .fence(&store, ["reports/nightly"])
        .await?;
    held.run(store.put("reports/nightly", report.clone().into(), held.token()))
        .await?;
    let zombie = held.token();
    held.release().await?;
    println!("wrote the report with token {zombie} and gave the lease back");

    // The next holder's lock fences the key before it is handed out: the
    // former holder, waking up, is refused though nothing new was written.
    let next = issuer
        .lock("nightly-report")
        .ttl(Duration::from_secs(3)) // renewed every second: the loss below shows soon
        .wait(Duration::from_secs(10))
        .fence(&store, ["reports/nightly"])
        .await?;
    match store.put("reports/nightly", "late".into(), zombie).await {
        Err(e) if e.is_stale() => println!("the former holder's late write was refused: {e}"),
        other => {
            return Err(format!(
                "a write with token {zombie} after {} took over: {other:?}",
                next.token()
            )
            .into());
        }
    }
    let kept = store.get("reports/nightly").await?.map(|v| v.value);
    if kept.as_deref() != Some(report.as_bytes()) {
        return Err(format!("the report changed under a refused write: {kept:?}").into());
    }

    // A lease taken away (here: released behind the guard's back, as an
    // operator or an expiry would) ends the work under `run` with LeaseLost.
    issuer.release(&next.lease()).await?;
    let work = next.run(async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, Error>(())
    });
    match tokio::time::timeout(Duration::from_secs(30), work).await {
        Ok(Err(Error::LeaseLost { .. })) => println!("the lost lease stopped the work"),
        other => {
            return Err(format!("the work went on after the lease was lost: {other:?}").into());
        }
    }

    // Dropping a guard releases in the background: the next lock gets in
    // well before the 30 s TTL.
    let dropped = issuer
        .lock("nightly-report")
        .wait(Duration::from_secs(10))
        .await?;
    drop(dropped);
    let again = issuer
        .lock("nightly-report")
        .wait(Duration::from_secs(10))
        .await?;
    println!(
        "a dropped guard freed the lease at once (next token {})",
        again.token()
    );
    again.release().await?;
    Ok(())
}

/// The URLs from the command line, or etcd and a fresh emulator bucket
/// from the environment `integration/services.sh env` exports.
async fn urls() -> Result<(String, String), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [issuer, store] = args.as_slice() {
        return Ok((issuer.clone(), store.clone()));
    }
    let etcd = std::env::var("FENCING_ETCD_ENDPOINTS")
        .map_err(|_| "FENCING_ETCD_ENDPOINTS is not set: run `eval \"$(integration/services.sh env)\"` or pass ETCD_URL S3_URL")?;
    let s3 = std::env::var("FENCING_S3_ENDPOINT")
        .map_err(|_| "FENCING_S3_ENDPOINT is not set: run `eval \"$(integration/services.sh env)\"` or pass ETCD_URL S3_URL")?;
    let host = etcd.split(',').next().unwrap_or_default();
    let host = host.trim_start_matches("http://");
    let bucket = format!("three-lines-{}", std::process::id());
    fencing_tokens::s3::emulator::store(&s3, &bucket).await?;
    Ok((
        format!("etcd://{host}"),
        format!("s3://{bucket}?endpoint={s3}&emulator=true"),
    ))
}
