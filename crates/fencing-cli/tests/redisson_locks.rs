//! Redisson's lock and ours, joined (`layout=redisson`): the hash at the
//! lock's name excludes both ways, and both count their grants in
//! `RFencedLock`'s counter, so the tokens a fenced store sees rise along the
//! real order of grants across both kinds, and a paused holder of either
//! kind is refused once the other wrote. The Redisson side is node-redisson
//! (npm: Redisson's `RLock` ported to Node.js, its scripts run by `EVAL`),
//! fenced as `RFencedLock` is (`integration/harness/foreign/redisson.js`),
//! on the append-only Redis of `integration/services.sh`
//! (`FENCING_REDIS_AOF_URL`).

mod common;

use std::time::Duration;

use common::turns::{foreign_turns, hold, runtime, write_in_turn};
use common::{Scratch, assert_exit, on_resource, put};
use fencing_harness::env::REDIS_AOF;
use fencing_harness::foreign;
use fencing_harness::process::{Signal, signal};

/// Our issuer on Redisson's lock `{prefix}{resource}`, under a prefix of
/// the test's own, and that lock's name; `None` if Redis is skipped.
fn redisson_issuer(resource: &str) -> Option<(String, String)> {
    if REDIS_AOF.skipped() {
        return None;
    }
    let prefix = format!("{}:", fencing_testkit::unique_prefix());
    let issuer = format!("{}?layout=redisson&prefix={prefix}", REDIS_AOF.endpoint());
    Some((issuer, format!("{prefix}{resource}")))
}

#[test]
fn redisson_fenced_locks_and_our_leases_take_turns_with_tokens_in_grant_order() {
    let resource = "ledger";
    let Some((issuer, name)) = redisson_issuer(resource) else {
        return;
    };
    let s = Scratch::new("redisson-turns");
    let store = s.url();
    let runtime = runtime();
    let url = REDIS_AOF.endpoint();
    let mut redisson = runtime.block_on(foreign::Client::redisson(
        &url,
        &name,
        true,
        Duration::from_secs(30),
    ));
    let token = |turn, printed: &str| {
        if turn == 0 {
            // A Redisson holder's token is its own to read: `fence token`
            // cannot tell an RFencedLock's grant from a plain RLock's,
            // which counts nothing, so it gives none.
            assert_exit(
                &on_resource("token", &issuer, resource, &["--key", name.as_str()]),
                7,
            );
        }
        printed
            .parse()
            .unwrap_or_else(|_| panic!("Redisson's token: {printed:?}"))
    };
    foreign_turns(
        &runtime,
        "Redisson",
        &mut redisson,
        (&issuer, resource, &store),
        token,
    );
    runtime.block_on(async move { redisson.send("done").await });
}

/// Real pauses, both ways: a Redisson holder stopped (SIGSTOP) past its
/// 2 s lease, then one of ours; each time the other kind is granted once
/// Redis expired the paused one's hash, writes with a higher token, and the
/// paused holder's token is refused when it wakes.
#[test]
fn a_paused_redisson_holder_and_a_paused_one_of_ours_are_refused_once_the_other_took_over() {
    let resource = "ledger";
    let Some((issuer, name)) = redisson_issuer(resource) else {
        return;
    };
    let s = Scratch::new("redisson-paused");
    let store = s.url();
    let runtime = runtime();
    let url = REDIS_AOF.endpoint();
    let lease = Duration::from_secs(2);
    let mut redisson = runtime.block_on(foreign::Client::redisson(&url, &name, true, lease));
    let pid = redisson.id().expect("node-redisson's pid");

    let paused: u64 = runtime.block_on(async {
        redisson.send("take").await;
        redisson.line().await.parse().expect("a token")
    });
    write_in_turn(&store, paused, None, "Redisson");
    signal(pid, Signal::SIGSTOP);
    let (mut ours, token) = hold(&issuer, resource, &["--ttl", "2s", "--wait", "20s"]);
    write_in_turn(&store, token, Some(paused), "fence");
    signal(pid, Signal::SIGCONT);
    assert_exit(
        &put(&store, "report", &paused.to_string(), "woken Redisson"),
        3,
    );
    runtime.block_on(async {
        redisson.send("release").await;
        assert_eq!(redisson.line().await, "lost", "Redisson released our lock");
    });

    // Now ours pauses, and Redisson is granted once our hash expired.
    signal(ours.id(), Signal::SIGSTOP);
    let taken: u64 = runtime.block_on(async {
        redisson.send("take").await;
        redisson.line().await.parse().expect("a token")
    });
    write_in_turn(&store, taken, Some(token), "Redisson");
    signal(ours.id(), Signal::SIGCONT);
    assert_exit(&put(&store, "report", &token.to_string(), "woken fence"), 3);
    let _ = ours.kill();
    let _ = ours.wait();
    runtime.block_on(async move {
        redisson.send("release").await;
        assert_eq!(redisson.line().await, "released");
        redisson.send("done").await;
    });
}
