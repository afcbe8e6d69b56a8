//! Moving a running resource from one issuer to another and its data from
//! one store to another, without a token going backwards. The guide:
//! `docs/migrating.md`.
//!
//! A holder on the old issuer writes to the old store and is still holding
//! (a process nobody stopped in time) while the resource moves: the floor
//! raised on the new issuer covers its token, the record is copied with its
//! mark, the first holder on the new issuer fences the key, and the old
//! holder's next write is refused on both stores. Exits non-zero if any of
//! that does not happen.
//!
//! ```sh
//! cargo run -p fencing-tokens --features full --example migrate -- \
//!     redis://127.0.0.1:6380 etcd://127.0.0.1:2379 \
//!     'postgres://fencing:fencing@127.0.0.1:5432/fencing' sqlite:///tmp/migrated.sqlite
//! ```

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencing_tokens::IssuerExt;
use fencing_tokens::{Error, FencingToken, LeaseRequest, TokenIssuer, redact};

type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [old_issuer, new_issuer, old_store, new_store] = args.as_slice() else {
        eprintln!("usage: migrate OLD_ISSUER_URL NEW_ISSUER_URL OLD_STORE_URL NEW_STORE_URL");
        return ExitCode::from(2);
    };
    match run(old_issuer, new_issuer, old_store, new_store).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("migrate: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(
    old_issuer: &str,
    new_issuer: &str,
    old_store: &str,
    new_store: &str,
) -> BoxResult<()> {
    let (a, b) = (
        fencing_tokens::open_issuer(old_issuer).await?,
        fencing_tokens::open_issuer(new_issuer).await?,
    );
    let (s1, s2) = (
        fencing_tokens::open_store(old_store).await?,
        fencing_tokens::open_store(new_store).await?,
    );
    println!(
        "issuer {} -> {}, store {} -> {}",
        redact(old_issuer),
        redact(new_issuer),
        redact(old_store),
        redact(new_store)
    );

    let stamp = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros();
    let resource = format!("guides-migrate-{stamp}");
    let key = format!("guides/migrate/{stamp}/nightly");
    let ttl = Duration::from_secs(30).max(a.min_ttl());

    // Before: the running system, on the old issuer and the old store.
    let old = a
        .lock(&resource)
        .ttl(ttl)
        .wait(Duration::from_secs(10))
        .fence(&s1, [key.as_str()])
        .await?;
    old.run(s1.put(&key, "written before the move".into(), old.token()))
        .await?;
    println!(
        "old holder: token {} from {}, wrote {key:?} to {}",
        old.token(),
        a.name(),
        s1.name()
    );

    // 1. The floor: above every token the old issuer granted (a probe grant
    //    when the resource is free, the live holder's token when not) and
    //    every mark the stores hold for the key.
    let found = [
        highest_token(&*a, &resource).await?,
        s1.mark(&key).await?,
        s2.mark(&key).await?,
    ];
    let show = |t: Option<FencingToken>| t.map_or_else(|| "none".to_owned(), |t| t.to_string());
    println!(
        "highest token on {}: {}; marks: {} {}, {} {}",
        a.name(),
        show(found[0]),
        s1.name(),
        show(found[1]),
        s2.name(),
        show(found[2])
    );
    let floor = found
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(FencingToken::ZERO);
    b.raise_floor(&resource, floor).await?;
    println!("raised the floor on {} to {floor}", b.name());

    // 2. The data: the record with its mark (what `fence migrate store` does).
    let record = s1.get(&key).await?.ok_or("the old store lost the record")?;
    s2.put(&key, record.value, record.token).await?;
    println!("copied {key:?} to {} at mark {}", s2.name(), record.token);

    // 3. The first holder on the new issuer fences the key on both stores
    //    before anything else: the copied mark equals the old holder's token,
    //    which a store accepts until a higher one fences it.
    let new = b
        .lock(&resource)
        .ttl(Duration::from_secs(30).max(b.min_ttl()))
        .wait(Duration::from_secs(10))
        .fence(&s1, [key.as_str()])
        .fence(&s2, [key.as_str()])
        .await?;
    println!("new holder: token {} from {}", new.token(), b.name());
    if new.token() <= old.token() || new.token() <= floor {
        return Err(format!(
            "the new token {} is not above the old {} and the floor {floor}",
            new.token(),
            old.token()
        )
        .into());
    }
    new.run(s2.put(&key, "written after the move".into(), new.token()))
        .await?;

    // 4. The old holder, still holding on the old issuer, writes again.
    for store in [&s1, &s2] {
        match store
            .put(&key, "late write from the old holder".into(), old.token())
            .await
        {
            Err(Error::StaleToken {
                presented, current, ..
            }) => {
                println!(
                    "old holder's write to {} refused: {presented} < {current}",
                    store.name()
                );
            }
            other => {
                return Err(format!(
                    "the old holder's write to {} gave {other:?}, not StaleToken",
                    store.name()
                )
                .into());
            }
        }
    }

    // 5. What to check after: the new store holds the new holder's write at
    //    its token, and no store's mark is above the new issuer's token.
    let after = s2.get(&key).await?.ok_or("the new store has no record")?;
    if after.value != "written after the move".as_bytes() || after.token != new.token() {
        return Err(format!("the new store holds {:?} at {}", after.value, after.token).into());
    }
    println!(
        "{} holds the new holder's write at mark {}",
        s2.name(),
        after.token
    );
    new.release().await?;
    // The old lease ends too (a real migration stops its holder first).
    old.release().await?;
    println!("ok: tokens only went up across the move");
    Ok(())
}

/// The highest token `issuer` has granted on `resource`, as `fence migrate
/// issuer` finds it: a probe grant is above every earlier one; a held
/// resource answers with its holder's token.
async fn highest_token(
    issuer: &dyn TokenIssuer,
    resource: &str,
) -> BoxResult<Option<FencingToken>> {
    let probe = LeaseRequest::new(resource, Duration::from_secs(5).max(issuer.min_ttl()));
    if let Some(lease) = issuer.try_acquire(&probe).await? {
        issuer.release(&lease).await?;
        return Ok(Some(lease.token()));
    }
    Ok(issuer.holder(resource).await?.map(|h| h.token))
}
