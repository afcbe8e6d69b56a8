//! Waiters woken at release (the release script's `PUBLISH`), and the
//! fallback that needs no wake-up: expiry. Tokens come from the counter
//! whatever wakes a waiter (the cases are `fencing_testkit::wake`'s). On
//! the append-only server
//! (`FENCING_REDIS_AOF_URL`) and the TLS, ACL-login one
//! (`FENCING_REDIS_TLS_URL`).
//!
//! `handover_gap` (ignored) prints the release-to-grant gap of the old
//! polling acquire next to the woken one:
//! `cargo test -p fencing-redis --test wake -- --ignored --nocapture`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use fencing_core::{Error, TokenIssuer};
use fencing_harness::env::{REDIS_AOF, REDIS_TLS, Server, tls_file, with_option};
use fencing_redis::{Durability, RedisConfig};
use fencing_testkit::wake::{self, Waiter};

async fn connect(server: &Server, url: &str) -> Option<Arc<dyn TokenIssuer>> {
    if server.skipped() {
        return None;
    }
    match RedisConfig::from_url(url)
        .expect("a Redis URL")
        .with_durability(Durability::Required)
        .with_prefix(format!("{}:", fencing_testkit::unique_prefix()))
        .connect_issuer()
        .await
    {
        Ok(issuer) => Some(Arc::new(issuer)),
        Err(e @ Error::Backend { .. }) => server.unavailable(&e.chain()),
        Err(e) => panic!("{}: {}", server.name, e.chain()),
    }
}

async fn aof() -> Option<Arc<dyn TokenIssuer>> {
    connect(&REDIS_AOF, &REDIS_AOF.endpoint()).await
}

/// The TLS server, its certificate checked against the test CA, with the
/// ACL login of its URL.
async fn tls() -> Option<Arc<dyn TokenIssuer>> {
    let url = with_option(
        &REDIS_TLS.endpoint(),
        &format!("sslrootcert={}", tls_file("ca.pem").display()),
    );
    connect(&REDIS_TLS, &url).await
}

/// On both servers: the subscription logs in and speaks TLS as the issuer
/// does.
#[tokio::test]
async fn a_waiter_is_granted_at_release_not_at_its_next_poll() {
    for issuer in [aof().await, tls().await].into_iter().flatten() {
        wake::granted_at_release(&issuer, "wake-release").await;
    }
}

#[tokio::test]
async fn a_waiter_gets_the_lease_after_the_holders_expiry_without_release() {
    if let Some(issuer) = aof().await {
        wake::granted_after_expiry_without_release(&issuer, "wake-expiry").await;
    }
}

#[tokio::test]
async fn concurrent_waiters_hold_one_at_a_time_with_rising_tokens() {
    if let Some(issuer) = aof().await {
        wake::concurrent_waiters_hold_one_at_a_time(&issuer, "wake-crowd").await;
    }
}

/// An ACL user without channel rights (Redis 7's default for new users):
/// the release's `PUBLISH` is refused inside the script, the release still
/// happens, and a waiter, which cannot subscribe, polls and is granted.
#[tokio::test]
async fn a_login_without_channel_rights_still_releases_and_waiters_poll() {
    if REDIS_AOF.skipped() {
        return;
    }
    let mut admin = common::raw(&REDIS_AOF.endpoint()).await;
    let prefix = format!("{}:", fencing_testkit::unique_prefix());
    let user = format!("wake-{}", prefix.trim_end_matches(':'));
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&user)
        .arg("on")
        .arg(">wake-secret")
        .arg("resetchannels")
        .arg(format!("~{prefix}*"))
        .arg("+@all")
        .query_async(&mut admin)
        .await
        .expect("ACL SETUSER");
    let url = REDIS_AOF
        .endpoint()
        .replacen("://", &format!("://{user}:wake-secret@"), 1);
    let run = tokio::spawn(async move {
        let issuer: Arc<dyn TokenIssuer> = Arc::new(
            RedisConfig::from_url(&url)
                .unwrap()
                .with_durability(Durability::Required)
                .with_prefix(prefix)
                .connect_issuer()
                .await
                .expect("login"),
        );
        let blocked = Duration::from_millis(300);
        wake::handovers(&issuer, "wake-acl", 3, blocked, Waiter::Issuer).await
    })
    .await;
    // Deleting the user drops its connections: only after the run.
    let _: () = redis::cmd("ACL")
        .arg("DELUSER")
        .arg(&user)
        .query_async(&mut admin)
        .await
        .expect("ACL DELUSER");
    let gaps = run.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    assert!(gaps.iter().all(|g| *g < Duration::from_secs(1)), "{gaps:?}");
}

#[tokio::test]
#[ignore = "a measurement; run with --ignored --nocapture"]
async fn handover_gap() {
    if let Some(issuer) = aof().await {
        wake::handover_gap(&issuer, "wake-gap").await;
    }
}
