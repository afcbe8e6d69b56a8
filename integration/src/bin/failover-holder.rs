//! A lock holder in a process of its own, for the failover bench: acquires
//! `RESOURCE` from `ISSUER` for `TTL_MS`, prints `acquired TOKEN`, then
//! renews every third of the TTL until it is killed (or stopped).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use fencing_tokens::LeaseRequest;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [issuer_name, resource, ttl_ms] = args.as_slice() else {
        eprintln!("usage: failover-holder ISSUER RESOURCE TTL_MS");
        return ExitCode::from(2);
    };
    let Ok(ttl) = ttl_ms.parse().map(Duration::from_millis) else {
        eprintln!("TTL_MS must be a number of milliseconds, got {ttl_ms:?}");
        return ExitCode::from(2);
    };
    let Some((issuer, _)) = fencing_integration::issuer(issuer_name).await else {
        eprintln!("{issuer_name} is skipped (FENCING_SKIP)");
        return ExitCode::from(2);
    };
    let request = LeaseRequest::new(resource, ttl);
    let mut lease = match issuer
        .acquire(&request, ttl * 10 + Duration::from_secs(10))
        .await
    {
        Ok(lease) => lease,
        Err(e) => {
            eprintln!("acquire: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("acquired {}", lease.token());
    if std::io::stdout().flush().is_err() {
        return ExitCode::FAILURE;
    }
    loop {
        tokio::time::sleep(ttl / 3).await;
        lease = match issuer.renew(&lease).await {
            Ok(renewed) => renewed,
            Err(e) => {
                eprintln!("renew: {e}");
                return ExitCode::FAILURE;
            }
        };
    }
}
