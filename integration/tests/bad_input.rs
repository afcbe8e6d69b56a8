//! Bad input, table-driven, on every store and against every backend's
//! connection: each case gets a typed, clear error, and the store's value
//! and mark are unchanged afterwards.

use std::time::Duration;

use bytes::Bytes;
use fencing_harness::env::{MYSQL, POSTGRES};
use fencing_integration::backends::Backend;
use fencing_integration::{for_each, store, stores};
use fencing_tokens::registry::Role;
use fencing_tokens::{Error, FencedStore, FencingToken, LeaseRequest};

fn t(n: u64) -> FencingToken {
    FencingToken::new(n)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    InvalidInput,
    OutOfRange,
    Stale,
}

fn kind(result: &Result<(), Error>) -> Option<Expect> {
    match result {
        Err(Error::InvalidInput { .. }) => Some(Expect::InvalidInput),
        Err(Error::TokenOutOfRange { .. }) => Some(Expect::OutOfRange),
        Err(Error::StaleToken { .. }) => Some(Expect::Stale),
        _ => None,
    }
}

async fn bad_input_on(name: &str) {
    let Some(store) = store(name).await else {
        return;
    };
    let limits = store.limits();
    let key = fencing_testkit::unique_name("bad-input");
    store
        .put(&key, "kept".into(), t(2))
        .await
        .expect("setup write");

    let huge_key = "k".repeat(1024 * 1024);
    let above = limits.max_token.checked_next();
    let mut cases: Vec<(&str, Result<(), Error>, Expect)> = vec![
        (
            "empty key",
            store.put("", "x".into(), t(3)).await,
            Expect::InvalidInput,
        ),
        (
            "1 MiB key",
            store.put(&huge_key, "x".into(), t(3)).await,
            Expect::InvalidInput,
        ),
        (
            "NUL in key",
            store.put("a\0b", "x".into(), t(3)).await,
            Expect::InvalidInput,
        ),
        (
            "fence of an empty key",
            store.fence("", t(3)).await.map(|_| ()),
            Expect::InvalidInput,
        ),
        (
            "delete of an empty key",
            store.delete("", t(3)).await,
            Expect::InvalidInput,
        ),
        (
            "token 0 after 2",
            store.put(&key, "x".into(), t(0)).await,
            Expect::Stale,
        ),
        (
            "fence below the mark",
            store.fence(&key, t(1)).await.map(|_| ()),
            Expect::Stale,
        ),
        (
            "delete below the mark",
            store.delete(&key, t(1)).await,
            Expect::Stale,
        ),
    ];
    if let Some(above) = above {
        cases.push((
            "token above the backend's max",
            store.put(&key, "x".into(), above).await,
            Expect::OutOfRange,
        ));
        cases.push((
            "u64::MAX",
            store.put(&key, "x".into(), t(u64::MAX)).await,
            Expect::OutOfRange,
        ));
    }
    if limits.max_value_len <= 64 * 1024 * 1024 {
        let big = Bytes::from(vec![0u8; limits.max_value_len + 1]);
        cases.push((
            "value over the limit",
            store.put(&key, big, t(3)).await,
            Expect::InvalidInput,
        ));
    }
    for (what, result, expect) in &cases {
        assert_eq!(
            kind(result),
            Some(*expect),
            "{name}: {what}: got {result:?}"
        );
        let message = result.as_ref().unwrap_err().to_string();
        assert!(!message.is_empty(), "{name}: {what}: empty message");
    }
    let stored = store.get(&key).await.unwrap().expect("value kept");
    assert_eq!(
        (stored.value.as_ref(), stored.token),
        (b"kept".as_slice(), t(2)),
        "{name}: bad input changed the value"
    );
    assert_eq!(
        store.mark(&key).await.unwrap(),
        Some(t(2)),
        "{name}: bad input changed the mark"
    );
    assert_eq!(store.mark("").await.ok().flatten(), None);
}

/// Keys that look like paths or escapes are plain, distinct keys.
async fn awkward_keys_round_trip(name: &str) {
    let Some(store) = store(name).await else {
        return;
    };
    let base = fencing_testkit::unique_name("awkward");
    let keys = [
        "a/b",
        "a%2Fb",
        "../escape",
        "a//b",
        "./dot",
        "trailing/",
        "ключ ✓",
        "with space",
        "q?x=1&y#z",
    ];
    for (i, k) in keys.iter().enumerate() {
        let key = format!("{base}/{k}");
        store
            .put(&key, Bytes::from(format!("value {i}")), t(1))
            .await
            .unwrap_or_else(|e| panic!("{name}: {key:?}: {e}"));
    }
    for (i, k) in keys.iter().enumerate() {
        let key = format!("{base}/{k}");
        let got = store
            .get(&key)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{name}: {key:?} lost"));
        assert_eq!(
            got.value,
            format!("value {i}").as_bytes(),
            "{name}: {key:?} read another key's value"
        );
    }
}

/// Every store of the registry (and the in-process ones), two at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_changes_nothing_on_every_store() {
    for_each(stores(), 2, bad_input_on).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awkward_keys_round_trip_on_every_store() {
    for_each(stores(), 2, awkward_keys_round_trip).await;
}

/// A SQL pool on `url`, as a caller opens one.
async fn sql(url: &str) -> Result<fencing_sql::Db, Error> {
    fencing_sql::SqlConfig::from_url(url)?.connect_db().await
}

/// What opening each role of `backend` at `url`, where nothing listens,
/// comes to: the error of opening, or (a client that connects lazily) of
/// its first call.
///
/// # Panics
/// If a call succeeds.
async fn nothing_listening(backend: &Backend, url: &str) -> Vec<(String, Error)> {
    let name = backend.name;
    let mut errors = Vec::new();
    if backend.opens(Role::Issuer) {
        let error = match fencing_tokens::open_issuer(url).await {
            Err(e) => e,
            Ok(issuer) => issuer
                .try_acquire(&LeaseRequest::new("r", Duration::from_secs(5)))
                .await
                .map(|_| ())
                .expect_err("a lease with nothing listening"),
        };
        errors.push((format!("{name} issuer at {url}, nothing listening"), error));
    }
    if backend.opens(Role::Store) {
        let error = match fencing_tokens::open_store(url).await {
            Err(e) => e,
            Ok(store) => store
                .get("k")
                .await
                .map(|_| ())
                .expect_err("a read with nothing listening"),
        };
        errors.push((format!("{name} store at {url}, nothing listening"), error));
    }
    errors
}

/// Endpoints and credentials that cannot work: typed errors, retryable
/// exactly when trying again could help.
#[tokio::test]
async fn unreachable_endpoints_and_wrong_credentials() {
    let refused = |e: &Error| {
        matches!(
            e,
            Error::Backend {
                retryable: true,
                ..
            }
        )
    };
    // Refused credentials: typed, never retryable.
    let denied = |e: &Error| matches!(e, Error::Unauthenticated { .. }) && !e.is_retryable();
    let invalid = |e: &Error| matches!(e, Error::InvalidInput { .. });

    type Case<'a> = (String, Error, &'a dyn Fn(&Error) -> bool);
    let mut cases: Vec<Case<'_>> = vec![
        (
            "postgres, unknown role (the test server trusts passwords)".to_owned(),
            sql(&POSTGRES
                .endpoint()
                .replacen("fencing:fencing@", "no_such_role:wrong@", 1))
            .await
            .unwrap_err(),
            &denied,
        ),
        (
            "mariadb, wrong password".to_owned(),
            sql(&MYSQL
                .endpoint()
                .replacen("fencing:fencing@", "fencing:wrong@", 1))
            .await
            .unwrap_err(),
            &denied,
        ),
        (
            "postgres, malformed URL".to_owned(),
            sql("postgres://fencing@[::1:5432/x").await.unwrap_err(),
            &invalid,
        ),
        (
            "unknown scheme".to_owned(),
            sql("oracle://x").await.unwrap_err(),
            &invalid,
        ),
        (
            "dynamodb, emulator=true without an endpoint".to_owned(),
            fencing_tokens::open_store("dynamodb://fenced?emulator=true")
                .await
                .unwrap_err(),
            &invalid,
        ),
    ];
    // Nothing listening, on every backend with a server: each role it
    // opens, at the URL its module gives.
    for backend in fencing_integration::backends::ALL {
        if let Some(url) = backend.unreachable {
            for (what, error) in nothing_listening(backend, url).await {
                cases.push((what, error, &refused));
            }
        }
    }
    for (what, error, expected) in &cases {
        assert!(expected(error), "{what}: unexpected {error:?}");
        assert!(!error.to_string().is_empty());
    }
}

/// A table or bucket that is not there: a non-retryable backend error, and
/// nothing created behind the caller's back.
#[tokio::test]
async fn a_missing_table_or_bucket_is_a_permanent_error() {
    if !fencing_harness::env::POSTGRES.skipped() {
        let db = sql(&fencing_harness::env::POSTGRES.endpoint())
            .await
            .unwrap()
            .with_tables(fencing_sql::Tables::from_prefix("ft_missing_").unwrap());
        let sql = fencing_sql::SqlStore::new(db.clone()).await.unwrap();
        db.drop_tables().await.unwrap();
        let e = sql.put("k", "v".into(), t(1)).await.unwrap_err();
        assert!(
            matches!(
                e,
                Error::Backend {
                    retryable: false,
                    ..
                }
            ),
            "missing table: {e:?}"
        );
    }
    if let Some(s3) = fencing_integration::s3().await {
        let missing =
            fencing_s3::S3Backend::new(s3.backend().client().clone(), "ft-no-such-bucket")
                .into_store();
        let e = missing.put("k", "v".into(), t(1)).await.unwrap_err();
        assert!(
            matches!(
                e,
                Error::Backend {
                    retryable: false,
                    ..
                }
            ),
            "missing bucket: {e:?}"
        );
    }
}

/// Leases with bad input are refused by every issuer before anything is
/// granted (the issuer suite checks each issuer; this checks the registry's).
#[tokio::test]
async fn bad_lease_requests_on_every_issuer() {
    for name in fencing_integration::issuers() {
        let Some((issuer, _)) = fencing_integration::issuer(name).await else {
            continue;
        };
        for request in [
            LeaseRequest::new("", Duration::from_secs(5)),
            LeaseRequest::new("r\0", Duration::from_secs(5)),
            LeaseRequest::new("r".repeat(1024 * 1024), Duration::from_secs(5)),
            LeaseRequest::new("r", Duration::ZERO),
        ] {
            let result = issuer.try_acquire(&request).await;
            assert!(
                matches!(result, Err(Error::InvalidInput { .. })),
                "{name}: {result:?}"
            );
        }
    }
}
