//! A nemesis client: a process of its own (in its own network namespace,
//! maybe under `faketime`) that loops acquire → maybe fence → writes (now
//! and then a slow step past the TTL) → release until its stdin closes, and prints one line per event, stamped
//! with the machine's real monotonic clock so the parent can order events
//! of all clients even when this process's clocks are faked:
//!
//! ```text
//! NS grant LANE TOKEN | NS acquire-failed MESSAGE
//! NS put LANE TOKEN SEQ | NS fence LANE TOKEN   (before the call)
//! NS ok | NS stale CURRENT | NS err MESSAGE     (after it)
//! NS release LANE TOKEN
//! NS clock UNIX_SECONDS                  (its wall clock: at start, after each grant)
//! ```
//!
//! Usage: `nemesis-client ID ISSUER_URL STORE_URL RESOURCE KEY TTL_MS SEED
//! WRITES_MAX SLOW_STEP_CHANCE LANES` (up to WRITES_MAX writes a lease,
//! each followed by a slow step past the TTL with that chance; each cycle
//! on one of LANES locks, `RESOURCE/n` guarding `KEY/n`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fencing_integration::nemesis::UNFENCED_VAR;
use fencing_integration::nemesis::timeline::{real_monotonic_ns, value_of};
use fencing_tokens::{Error, FencingToken, LeaseRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::AsyncReadExt;

fn emit(event: &str) {
    // stdout is line-buffered: one write per event.
    println!("{} {event}", real_monotonic_ns());
}

/// This process's wall clock, as it reads it (faketime's, if preloaded).
fn emit_clock() {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    emit(&format!("clock {wall}"));
}

fn one_line(e: &Error) -> String {
    e.chain().replace('\n', " ")
}

/// Reports an operation's outcome; `false` when the holder lost the lock.
fn outcome<T>(result: &Result<T, Error>) -> bool {
    match result {
        Ok(_) => {
            emit("ok");
            true
        }
        Err(Error::StaleToken { current, .. }) => {
            emit(&format!("stale {}", current.get()));
            false
        }
        Err(e) => {
            emit(&format!("err {}", one_line(e)));
            false
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [
        id,
        issuer_url,
        store_url,
        resource,
        key,
        ttl_ms,
        seed,
        writes_max,
        slow,
        lanes,
    ] = args.as_slice()
    else {
        eprintln!(
            "usage: nemesis-client ID ISSUER_URL STORE_URL RESOURCE KEY TTL_MS SEED WRITES_MAX SLOW_STEP_CHANCE LANES"
        );
        return std::process::ExitCode::from(2);
    };
    let (Ok(id), Ok(ttl_ms), Ok(seed), Ok(writes_max), Ok(slow), Ok(lanes)) = (
        id.parse::<u64>(),
        ttl_ms.parse(),
        seed.parse::<u64>(),
        writes_max.parse::<u32>(),
        slow.parse::<f64>(),
        lanes.parse::<u32>(),
    ) else {
        eprintln!("nemesis-client: every argument after the URLs and names is a number");
        return std::process::ExitCode::from(2);
    };
    let ttl = Duration::from_millis(ttl_ms);
    let mut rng = StdRng::seed_from_u64(seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15));

    // The parent stops a client by closing its stdin; the client finishes
    // the operation under way first, so every call it starts is answered.
    let stop = Arc::new(AtomicBool::new(false));
    let stopper = stop.clone();
    tokio::spawn(async move {
        let mut sink = [0u8; 64];
        let mut stdin = tokio::io::stdin();
        while matches!(stdin.read(&mut sink).await, Ok(n) if n > 0) {}
        stopper.store(true, Ordering::SeqCst);
    });

    let issuer = match fencing_tokens::open_issuer(issuer_url).await {
        Ok(issuer) => issuer,
        Err(e) => {
            eprintln!(
                "nemesis-client {id}: cannot open {issuer_url}: {}",
                one_line(&e)
            );
            return std::process::ExitCode::FAILURE;
        }
    };
    let store = match fencing_tokens::open_store(store_url).await {
        Ok(store) => store,
        Err(e) => {
            eprintln!(
                "nemesis-client {id}: cannot open {store_url}: {}",
                one_line(&e)
            );
            return std::process::ExitCode::FAILURE;
        }
    };

    emit_clock();
    // The negative control: what code without fencing does, in effect.
    let unfenced = std::env::var_os(UNFENCED_VAR).is_some();
    // Many lanes are for volume: no breather between writes.
    let pause_ms = if lanes > 1 { 0 } else { 5 };
    let mut seq = 0u64;
    while !stop.load(Ordering::SeqCst) {
        // Lanes are independent locks, each guarding its own key.
        let lane = rng.random_range(0..lanes.max(1));
        let (resource, key) = (format!("{resource}/{lane}"), format!("{key}/{lane}"));
        let lease = match issuer
            .acquire(&LeaseRequest::new(resource.as_str(), ttl), ttl * 2)
            .await
        {
            Ok(lease) => lease,
            Err(e) => {
                emit(&format!("acquire-failed {}", one_line(&e)));
                tokio::time::sleep(Duration::from_millis(rng.random_range(10..100))).await;
                continue;
            }
        };
        let token = lease.token();
        emit(&format!("grant {lane} {token}"));
        emit_clock();
        let mut holding = true;
        if rng.random_bool(0.2) && !unfenced {
            emit(&format!("fence {lane} {token}"));
            holding = outcome(&store.fence(&key, token).await);
        }
        let writes = rng.random_range(writes_max.min(5)..=writes_max);
        for _ in 0..writes {
            if !holding || stop.load(Ordering::SeqCst) {
                break;
            }
            seq += 1;
            emit(&format!("put {lane} {token} {seq}"));
            let presented = if unfenced {
                FencingToken::new(1 << 40)
            } else {
                token
            };
            holding = outcome(
                &store
                    .put(&key, value_of(id, token.get(), seq), presented)
                    .await,
            );
            // Now and then a slow step (a long computation, a GC pause) that
            // outlives the lease without looking at it: the zombie the store
            // must stop. The nemesis's faults add their own.
            let step = if rng.random_bool(slow) {
                rng.random_range(ttl * 3 / 5..=ttl * 2)
            } else {
                Duration::from_millis(rng.random_range(0..=pause_ms))
            };
            tokio::time::sleep(step).await;
        }
        emit(&format!("release {lane} {token}"));
        // Losing the lease first (a pause, a partition) is expected here.
        let _ = tokio::time::timeout(ttl, issuer.release(&lease)).await;
    }
    std::process::ExitCode::SUCCESS
}
