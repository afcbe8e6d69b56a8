//! The pair you picked, checked before you trust it: opens an issuer and a
//! store from the URLs on the command line, runs `verify()` on both and
//! prints every finding, then holds a lock and makes one fenced write.
//! Exits non-zero if either is unsafe or a step does not do what it says.
//! The guide: `docs/choosing.md`.
//!
//! ```sh
//! cargo run -p fencing-tokens --features full --example choose -- \
//!     etcd://127.0.0.1:2379 'postgres://fencing:fencing@127.0.0.1:5432/fencing'
//! ```

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencing_tokens::IssuerExt;
use fencing_tokens::safety::{SafetyCheck, Verdict};
use fencing_tokens::{Error, FencingToken, redact};

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [issuer_url, store_url] = args.as_slice() else {
        eprintln!("usage: choose ISSUER_URL STORE_URL");
        return ExitCode::from(2);
    };
    match run(issuer_url, store_url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("choose: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(issuer_url: &str, store_url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let issuer = fencing_tokens::open_issuer(issuer_url).await?;
    let store = fencing_tokens::open_store(store_url).await?;
    println!("issuer {} ({})", issuer.name(), redact(issuer_url));
    println!("store  {} ({})", store.name(), redact(store_url));

    // What `fence doctor` prints: the server must enforce what the backend
    // relies on (an fsynced Redis, conditional writes on a bucket, ...).
    let unsafe_issuer = print_findings("issuer", &issuer.verify().await?);
    let unsafe_store = print_findings("store", &store.verify().await?);
    if unsafe_issuer + unsafe_store > 0 {
        return Err(format!(
            "{} unsafe finding(s): fix them before relying on this pair",
            unsafe_issuer + unsafe_store
        )
        .into());
    }

    // A run of its own: a key that no earlier run has marked higher.
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros();
    let key = format!("guides/choose/{stamp}/nightly");
    let report = format!("nightly report of run {stamp}");

    let held = issuer
        .lock(format!("guides-choose-{stamp}"))
        .ttl(Duration::from_secs(30).max(issuer.min_ttl()))
        .wait(Duration::from_secs(10))
        .fence(&store, [key.as_str()])
        .await?;
    println!(
        "held the lock with token {}; {key:?} fenced at it",
        held.token()
    );
    held.run(store.put(&key, report.clone().into(), held.token()))
        .await?;
    let token = held.token();
    held.release().await?;

    let read = store.get(&key).await?.ok_or("the write is not there")?;
    if read.value != report.as_bytes() || read.token != token {
        return Err(format!(
            "read back {:?} at mark {}, wrote {report:?} at {token}",
            read.value, read.token
        )
        .into());
    }
    println!(
        "wrote {report:?} with token {token}; read back at mark {}",
        read.token
    );

    // The point of the pair: a write below the mark is refused, unapplied.
    match store
        .put(&key, "late".into(), FencingToken::new(token.get() - 1))
        .await
    {
        Err(Error::StaleToken {
            presented, current, ..
        }) => {
            println!("a write with token {presented} is refused (mark {current})");
        }
        other => {
            return Err(format!("a write below the mark gave {other:?}, not StaleToken").into());
        }
    }
    println!("ok: {} + {} is safe to use", issuer.name(), store.name());
    Ok(())
}

/// Prints one line per check, as `fence doctor` does; the count of unsafe ones.
fn print_findings(what: &str, checks: &[SafetyCheck]) -> usize {
    for check in checks {
        let verdict = check.verdict.to_string();
        println!("  {what:<6} {verdict:<6} {}: {}", check.name, check.detail);
    }
    checks
        .iter()
        .filter(|c| c.verdict == Verdict::Unsafe)
        .count()
}
