//! A leader in a process of its own, for the election tests: campaigns on
//! `RESOURCE` of `ISSUER` as `CANDIDATE`, fencing each `STORE=KEY` on
//! takeover, prints `leader TOKEN`, pauses a moment as if about to write
//! (the test stops the process here), then writes every key with its
//! token and prints one verdict line per store (see
//! `fencing_integration::candidate::in_flight_writes`); exit 3 if a store
//! refused.

use std::io::Write;
use std::time::Duration;

use fencing_integration::candidate;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [issuer_name, resource, name, targets @ ..] = args.as_slice() else {
        eprintln!("usage: election-candidate ISSUER RESOURCE CANDIDATE STORE=KEY...");
        return std::process::ExitCode::from(2);
    };
    let targets: Vec<(String, String)> = targets
        .iter()
        .map(|t| {
            let (store, key) = t.split_once('=').expect("STORE=KEY");
            (store.to_owned(), key.to_owned())
        })
        .collect();
    let (issuer, ttl) = fencing_integration::issuer(issuer_name)
        .await
        .expect("issuer not skipped");
    let targets = candidate::open_targets(&targets)
        .await
        .expect("stores not skipped");
    let term = candidate::election(issuer, resource, name, ttl, &targets)
        .campaign()
        .await
        .expect("campaign");
    println!("leader {}", term.token());
    std::io::stdout().flush().expect("stdout");

    // About to write: this is where the test stops the process.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let verdicts = candidate::in_flight_writes(&targets, term.token(), name).await;
    for verdict in &verdicts {
        println!("{verdict}");
    }
    std::io::stdout().flush().expect("stdout");
    if verdicts.iter().any(|v| v.starts_with("refused")) {
        std::process::ExitCode::from(3)
    } else {
        std::process::ExitCode::SUCCESS
    }
}
