//! python-etcd3's `Lock` and ours, joined (`layout=single-key`): one key,
//! `/locks/NAME`, excludes both ways, and its create revision (plus the
//! floor) is the token of either kind, so the tokens a fenced store sees
//! rise along the real order of grants and a paused holder of either kind
//! is refused once the other wrote. python-etcd3 is the real client (PyPI
//! `etcd3` 0.12.0, `integration/harness/foreign/python_etcd3.py`), on the
//! etcd of `integration/services.sh`.

mod common;

use common::turns::{foreign_turns, hold, printed_token, runtime, write_in_turn};
use common::{LEASE_LOST, Scratch, assert_exit, on_resource, put};
use fencing_harness::env::ETCD;
use fencing_harness::foreign;
use fencing_harness::process::{Signal, signal};

/// Our issuer on python-etcd3's keys under `/locks/{a prefix of the
/// test's own}/`, and python-etcd3's name for `resource` there; `None` if
/// etcd is skipped.
fn single_key_issuer(resource: &str) -> Option<(String, String)> {
    if ETCD.skipped() {
        return None;
    }
    let dir = format!("{}/", fencing_testkit::unique_prefix());
    let endpoint = ETCD.endpoint().replace("http://", "");
    let issuer = format!("etcd://{endpoint}?layout=single-key&prefix=/locks/{dir}");
    Some((issuer, format!("{dir}{resource}")))
}

#[test]
fn python_etcd3_locks_and_our_leases_take_turns_with_tokens_in_grant_order() {
    let resource = "nightly-report";
    let Some((issuer, name)) = single_key_issuer(resource) else {
        return;
    };
    let s = Scratch::new("python-etcd3-turns");
    let store = s.url();
    let runtime = runtime();
    let mut python = runtime.block_on(foreign::Client::python_etcd3(&ETCD.endpoint(), &name, 10));
    let token = |_, key: &str| {
        assert!(key.starts_with(&format!("/locks/{name}@")), "{key}");
        let wrong = on_resource("token", &issuer, resource, &["--key", "/locks/other"]);
        assert_exit(&wrong, LEASE_LOST);
        let no_lease = on_resource(
            "token",
            &issuer,
            resource,
            &["--key", &format!("/locks/{name}")],
        );
        assert_exit(&no_lease, LEASE_LOST);
        printed_token(&on_resource("token", &issuer, resource, &["--key", key]))
    };
    foreign_turns(
        &runtime,
        "python-etcd3",
        &mut python,
        (&issuer, resource, &store),
        token,
    );
    runtime.block_on(async move { python.send("done").await });
}

/// Every python-etcd3 holder of a name has the same key: `fence token`
/// tells them apart by the key's lease, so a holder whose lease ran out is
/// not handed its successor's token (with which both would write).
#[test]
fn a_python_etcd3_holder_whose_lease_ran_out_gets_no_token() {
    let resource = "nightly-report";
    let Some((issuer, name)) = single_key_issuer(resource) else {
        return;
    };
    let runtime = runtime();
    let (first, second) = runtime.block_on(async {
        let mut first = foreign::Client::python_etcd3(&ETCD.endpoint(), &name, 1).await;
        let mut second = foreign::Client::python_etcd3(&ETCD.endpoint(), &name, 10).await;
        first.send("take").await;
        let gone = first.line().await;
        // python-etcd3 keeps no lease alive: the first's ends after 1 s.
        second.send("take").await;
        let holding = second.line().await;
        for client in [&mut first, &mut second] {
            client.send("done").await;
        }
        (gone, holding)
    });
    assert_ne!(first, second, "two holders named alike");
    let stale = on_resource("token", &issuer, resource, &["--key", &first]);
    assert_exit(&stale, LEASE_LOST);
    let token = printed_token(&on_resource(
        "token",
        &issuer,
        resource,
        &["--key", &second],
    ));
    let said = String::from_utf8_lossy(&stale.stderr);
    assert!(
        !said.contains(&token.to_string()),
        "the refusal told the stale holder its successor's token: {said}"
    );
}

/// Real pauses, both ways: a python-etcd3 holder stopped (SIGSTOP) past its
/// 2 s lease, then one of ours; each time the other kind is granted once
/// etcd expired the paused one's lease, writes with a higher token, and the
/// paused holder's token is refused when it wakes.
#[test]
fn a_paused_python_etcd3_holder_and_a_paused_one_of_ours_are_refused_once_the_other_took_over() {
    let resource = "nightly-report";
    let Some((issuer, name)) = single_key_issuer(resource) else {
        return;
    };
    let s = Scratch::new("python-etcd3-paused");
    let store = s.url();
    let runtime = runtime();
    let mut python = runtime.block_on(foreign::Client::python_etcd3(&ETCD.endpoint(), &name, 2));
    let pid = python.id().expect("python-etcd3's pid");

    let key = runtime.block_on(async {
        python.send("take").await;
        python.line().await
    });
    let paused = printed_token(&on_resource("token", &issuer, resource, &["--key", &key]));
    write_in_turn(&store, paused, None, "python-etcd3");
    signal(pid, Signal::SIGSTOP);
    let (mut ours, token) = hold(&issuer, resource, &["--ttl", "2s", "--wait", "20s"]);
    write_in_turn(&store, token, Some(paused), "fence");
    signal(pid, Signal::SIGCONT);
    assert_exit(
        &put(&store, "report", &paused.to_string(), "woken python-etcd3"),
        3,
    );
    runtime.block_on(async {
        python.send("release").await;
        assert_eq!(
            python.line().await,
            "lost",
            "python-etcd3 released our lock"
        );
    });

    // Now ours pauses, and python-etcd3 is granted once our lease expired.
    signal(ours.id(), Signal::SIGSTOP);
    let key = runtime.block_on(async {
        python.send("take").await;
        python.line().await
    });
    let taken = printed_token(&on_resource("token", &issuer, resource, &["--key", &key]));
    write_in_turn(&store, taken, Some(token), "python-etcd3");
    signal(ours.id(), Signal::SIGCONT);
    assert_exit(&put(&store, "report", &token.to_string(), "woken fence"), 3);
    let _ = ours.kill();
    let _ = ours.wait();
    runtime.block_on(async move {
        python.send("release").await;
        assert_eq!(python.line().await, "released");
        python.send("done").await;
    });
}
