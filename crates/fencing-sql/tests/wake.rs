//! Waiters woken at release (PostgreSQL's `LISTEN`/`NOTIFY`), and the
//! fallback that needs no wake-up: expiry, on every dialect. Tokens come
//! from the counter whatever wakes a waiter. The cases are
//! `fencing_testkit::wake`'s.
//!
//! `handover_gap` (ignored) prints the release-to-grant gap of the old
//! polling acquire next to the woken one:
//! `cargo test -p fencing-sql --test wake -- --ignored --nocapture`.

use std::sync::Arc;
use std::time::Duration;

use fencing_core::TokenIssuer;
use fencing_harness::env::{MYSQL, POSTGRES};
use fencing_sql::{Db, SqlIssuer};
use fencing_testkit::wake::{self, Waiter};

mod common;
use common::{connect, sqlite_url};

async fn issuer(db: Option<Db>) -> Option<Arc<dyn TokenIssuer>> {
    Some(Arc::new(SqlIssuer::new(db?).await.expect("issuer")))
}

async fn postgres() -> Option<Arc<dyn TokenIssuer>> {
    issuer(connect(Some(&POSTGRES), &POSTGRES.endpoint()).await).await
}

/// Every dialect this run has: PostgreSQL notifies, the others poll.
async fn all() -> Vec<Arc<dyn TokenIssuer>> {
    let mut all = vec![];
    all.extend(postgres().await);
    all.extend(issuer(connect(Some(&MYSQL), &MYSQL.endpoint()).await).await);
    all.extend(issuer(connect(None, &sqlite_url()).await).await);
    all
}

fn resource(what: &str) -> String {
    format!("wake-{what}-{}", fencing_testkit::unique_prefix())
}

#[tokio::test]
async fn a_waiter_is_granted_at_release_not_at_its_next_poll() {
    if let Some(issuer) = postgres().await {
        wake::granted_at_release(&issuer, &resource("release")).await;
    }
}

#[tokio::test]
async fn a_waiter_gets_the_lease_after_the_holders_expiry_without_release() {
    for issuer in all().await {
        wake::granted_after_expiry_without_release(&issuer, &resource("expiry")).await;
    }
}

#[tokio::test]
async fn concurrent_waiters_hold_one_at_a_time_with_rising_tokens() {
    for issuer in all().await {
        wake::concurrent_waiters_hold_one_at_a_time(&issuer, &resource("crowd")).await;
    }
}

/// A pool of one connection cannot spare one to `LISTEN`: its waiters
/// poll, and are still granted at release.
#[tokio::test]
async fn a_pool_of_one_connection_polls() {
    if POSTGRES.skipped() {
        return;
    }
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&POSTGRES.endpoint())
        .await
        .expect("postgres");
    let db = Db::postgres(pool).with_tables(common::tables());
    let issuer: Arc<dyn TokenIssuer> = Arc::new(SqlIssuer::new(db).await.expect("issuer"));
    let blocked = Duration::from_millis(200);
    let gaps = wake::handovers(&issuer, &resource("one"), 2, blocked, Waiter::Issuer).await;
    assert!(gaps.iter().all(|g| *g < Duration::from_secs(1)), "{gaps:?}");
}

#[tokio::test]
#[ignore = "a measurement; run with --ignored --nocapture"]
async fn handover_gap() {
    if let Some(issuer) = postgres().await {
        wake::handover_gap(&issuer, &resource("gap")).await;
    }
}
