//! A lock holder in a process of its own, for the process-pause tests:
//! acquires `RESOURCE` from `ISSUER`, prints `acquired TOKEN`, pauses a
//! moment as if about to write, then writes `KEY` to `STORE` with its token
//! and prints `accepted` or `refused PRESENTED CURRENT` (exit 3).

use std::io::Write;
use std::time::Duration;

use fencing_tokens::{Error, LeaseRequest};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [issuer_name, store_name, resource, key] = args.as_slice() else {
        eprintln!("usage: zombie-client ISSUER STORE RESOURCE KEY");
        return std::process::ExitCode::from(2);
    };
    let (issuer, ttl) = fencing_integration::issuer(issuer_name)
        .await
        .expect("issuer not skipped");
    let store = fencing_integration::store(store_name)
        .await
        .expect("store not skipped");
    let lease = issuer
        .acquire(
            &LeaseRequest::new(resource, ttl),
            ttl * 10 + Duration::from_secs(10),
        )
        .await
        .expect("acquire");
    println!("acquired {}", lease.token());
    std::io::stdout().flush().expect("stdout");

    // About to write: this is where the test stops the process.
    tokio::time::sleep(Duration::from_millis(500)).await;
    match store
        .put(key, "written by the zombie process".into(), lease.token())
        .await
    {
        Ok(()) => {
            println!("accepted");
            std::process::ExitCode::SUCCESS
        }
        Err(Error::StaleToken {
            presented, current, ..
        }) => {
            println!("refused {presented} {current}");
            std::process::ExitCode::from(3)
        }
        Err(e) => {
            println!("error {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
