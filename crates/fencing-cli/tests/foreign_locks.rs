//! `fence token`: a lock client of another kind, holding the same lock as
//! our issuer, carries a token in the issuer's own order to a fenced store,
//! so tokens rise along the real order of grants across both kinds and a
//! paused holder of either kind is refused once the other has written. The
//! foreign clients are the real ones: `etcdctl lock` (the etcd package:
//! `FENCING_ETCDCTL`, default `etcdctl` on the `PATH`), etcd's v3lock
//! service through the server's HTTP gateway, kazoo's `Lock`
//! (PyPI: `FENCING_PYTHON`, default the venv of `integration/services.sh`)
//! and Curator's `InterProcessMutex` (Debian's libcurator-recipes-java, run
//! by the JDK).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::turns::{TURNS, foreign_turns, hold, our_grant, printed_token, runtime, write_in_turn};
use common::{FENCE, LEASE_LOST, Scratch, assert_exit, on_resource, put, text};
use fencing_harness::env::{ETCD, ZOOKEEPER};
use fencing_harness::foreign;

struct Etcdctl {
    bin: String,
    endpoint: String,
    prefix: String,
    issuer: String,
}

impl Etcdctl {
    fn new() -> Option<Self> {
        if ETCD.skipped() {
            return None;
        }
        let (endpoint, prefix) = (
            ETCD.endpoint(),
            format!("fencing-test/{}/", fencing_testkit::unique_prefix()),
        );
        Some(Self {
            bin: std::env::var("FENCING_ETCDCTL").unwrap_or_else(|_| "etcdctl".to_owned()),
            issuer: format!("etcd://{}?prefix={prefix}", endpoint.replace("http://", "")),
            endpoint,
            prefix,
        })
    }

    /// `etcdctl lock PREFIX+RESOURCE ARGS…` (or another etcdctl command),
    /// with `fence`, the issuer and the resource in its environment for
    /// the command it runs.
    fn command(&self, verb: &str, resource: &str, args: &[&str]) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .env("ETCDCTL_API", "3")
            .env("FENCE", FENCE)
            .env("ISSUER", &self.issuer)
            .env("RESOURCE", resource)
            .arg(format!("--endpoints={}", self.endpoint))
            .args([verb, &format!("{}{resource}", self.prefix)])
            .args(args);
        command
    }

    fn output(&self, mut command: Command) -> std::process::Output {
        command.output().unwrap_or_else(|e| {
            panic!(
                "no {} ({e}): install the etcd package's etcdctl (Debian: etcd-client), \
                 or point FENCING_ETCDCTL at one",
                self.bin
            )
        })
    }
}

#[test]
fn etcdctl_lock_and_our_leases_take_turns_with_tokens_in_grant_order() {
    let Some(etcdctl) = Etcdctl::new() else {
        return;
    };
    let s = Scratch::new("etcdctl-turns");
    let (issuer, resource, store) = (&etcdctl.issuer, "nightly-report", s.url());
    // etcdctl runs the command once it holds the lock, with ETCD_LOCK_KEY set.
    let script = s.path("holder.sh");
    s.write(
        "holder.sh",
        "#!/bin/sh\nexec \"$FENCE\" token --issuer \"$ISSUER\" --resource \"$RESOURCE\" --key \"$ETCD_LOCK_KEY\"\n",
    );
    let foreign_grant = || {
        let command = etcdctl.command("lock", resource, &["sh", script.to_str().unwrap()]);
        printed_token(&etcdctl.output(command))
    };

    // While one of ours holds, etcdctl waits: still waiting after a second.
    let etcdctl_waits = || {
        let mut command = Command::new("timeout");
        command.args(["1", &etcdctl.bin]).args(
            etcdctl
                .command("lock", resource, &["echo", "took it"])
                .get_args(),
        );
        command.env("ETCDCTL_API", "3");
        let out = etcdctl.output(command);
        assert_eq!(
            out.status.code(),
            Some(124),
            "etcdctl lock did not wait: {out:?}"
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains("took it"));
    };

    etcd_turns(
        issuer,
        resource,
        &store,
        "etcdctl lock",
        foreign_grant,
        etcdctl_waits,
    );
}

/// `TURNS` grants on `resource`, a foreign etcd lock (`grant`: take it,
/// print its token with `fence token --key`, let it go) and ours
/// alternating, tokens rising along them at the store; once, while ours
/// holds, `waits` checks that the foreign lock waits.
fn etcd_turns(
    issuer: &str,
    resource: &str,
    store: &str,
    who: &str,
    mut grant: impl FnMut() -> u64,
    waits: impl FnOnce(),
) {
    let mut waits = Some(waits);
    let mut last = None;
    for turn in 0..TURNS {
        let (token, by) = if turn % 2 == 0 {
            (grant(), who)
        } else {
            let while_held = waits.take();
            let token = our_grant(issuer, resource, || {
                if let Some(waits) = while_held {
                    waits();
                }
            });
            (token, "fence")
        };
        write_in_turn(store, token, last, by);
        last = Some(token);
    }
    // Nobody holds it now: no token for anyone.
    let free = on_resource("token", issuer, resource, &["--key", "nobody"]);
    assert_exit(&free, LEASE_LOST);
}

/// Real pauses, both ways: an `etcdctl lock` process stopped (SIGSTOP)
/// past its session while its command goes on working, then one of ours
/// stopped the same way; each time the other kind is granted once etcd
/// expired the paused one's lease, writes with a higher token, and the
/// paused holder's token is refused from then on.
#[test]
fn a_paused_etcdctl_holder_and_a_paused_one_of_ours_are_refused_once_the_other_took_over() {
    use fencing_harness::process::{Signal, signal};
    let Some(etcdctl) = Etcdctl::new() else {
        return;
    };
    let s = Scratch::new("etcdctl-paused");
    let (issuer, resource, store) = (&etcdctl.issuer, "report", s.url());
    s.write(
        "token.sh",
        "#!/bin/sh\nexec \"$FENCE\" token --issuer \"$ISSUER\" --resource \"$RESOURCE\" --key \"$ETCD_LOCK_KEY\"\n",
    );
    s.write(
        "work.sh",
        "#!/bin/sh\n\"$FENCE\" token --issuer \"$ISSUER\" --resource \"$RESOURCE\" --key \"$ETCD_LOCK_KEY\" && exec sleep 15\n",
    );
    let script = |name: &str| s.path(name).to_str().unwrap().to_owned();

    // etcdctl holds in a 2 s session; its command prints the token and
    // goes on working.
    let mut command = etcdctl.command("lock", resource, &["--ttl", "2", "sh", &script("work.sh")]);
    let mut foreign = command
        .stdout(Stdio::piped())
        .spawn()
        .expect("run etcdctl lock");
    let mut line = String::new();
    let mut out = BufReader::new(foreign.stdout.take().expect("stdout"));
    out.read_line(&mut line).expect("the token");
    let paused: u64 = line.trim().parse().expect("a token");
    write_in_turn(&store, paused, None, "etcdctl lock");
    signal(foreign.id(), Signal::SIGSTOP);
    let (mut ours, token) = hold(issuer, resource, &["--ttl", "2s", "--wait", "20s"]);
    write_in_turn(&store, token, Some(paused), "fence");
    signal(foreign.id(), Signal::SIGCONT);
    let _ = foreign.kill();
    let _ = foreign.wait();

    // Now ours pauses, and etcdctl is granted once our lease expired.
    signal(ours.id(), Signal::SIGSTOP);
    let command = etcdctl.command("lock", resource, &["sh", &script("token.sh")]);
    let taken = printed_token(&etcdctl.output(command));
    write_in_turn(&store, taken, Some(token), "etcdctl lock");
    signal(ours.id(), Signal::SIGCONT);
    let _ = ours.kill();
    let _ = ours.wait();
}

/// etcd's v3lock service through its HTTP gateway (`/v3/lock/lock`, the
/// server's own `concurrency.Mutex`, as a service without a Go client calls
/// it), on the etcd of `integration/services.sh`: JSON over `curl`.
struct LockGateway<'a> {
    etcd: &'a Etcdctl,
}

impl LockGateway<'_> {
    /// POSTs `body` to `path`; the answer's JSON, or `None` if no answer
    /// came within `max_secs`.
    fn post(
        &self,
        path: &str,
        body: &serde_json::Value,
        max_secs: u32,
    ) -> Option<serde_json::Value> {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", &max_secs.to_string(), "-X", "POST"])
            .arg(format!("{}{path}", self.etcd.endpoint))
            .args(["-d", &body.to_string()])
            .output()
            .unwrap_or_else(|e| panic!("no curl ({e}): integration/services.sh installs it"));
        if out.status.code() == Some(28) {
            return None; // curl's "operation timed out"
        }
        assert_exit(&out, 0);
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{path} answered {:?}: {e}", text(&out)));
        assert!(answer.get("error").is_none(), "{path}: {answer}");
        Some(answer)
    }

    /// A lease of `ttl_secs` for a lock to live in.
    fn lease(&self, ttl_secs: u32) -> String {
        let granted = self.post(
            "/v3/lease/grant",
            &serde_json::json!({ "TTL": ttl_secs }),
            10,
        );
        let granted = granted.expect("a lease");
        granted["ID"].as_str().expect("a lease ID").to_owned()
    }

    /// `Lock` on our resource's name in `lease`: the key it holds, or
    /// `None` if it was still waiting after `max_secs`.
    fn lock(&self, resource: &str, lease: &str, max_secs: u32) -> Option<String> {
        let name = format!("{}{resource}", self.etcd.prefix);
        let body = serde_json::json!({ "name": BASE64.encode(name), "lease": lease });
        let locked = self.post("/v3/lock/lock", &body, max_secs)?;
        let key = BASE64
            .decode(locked["key"].as_str().expect("the lock's key"))
            .expect("base64");
        Some(String::from_utf8(key).expect("a text key"))
    }

    fn unlock(&self, key: &str, lease: &str) {
        let body = serde_json::json!({ "key": BASE64.encode(key) });
        self.post("/v3/lock/unlock", &body, 10).expect("unlocked");
        let body = serde_json::json!({ "ID": lease });
        self.post("/v3/lease/revoke", &body, 10).expect("revoked");
    }
}

#[test]
fn etcds_lock_service_over_http_and_our_leases_take_turns_with_tokens_in_grant_order() {
    let Some(etcd) = Etcdctl::new() else {
        return;
    };
    let gateway = LockGateway { etcd: &etcd };
    let s = Scratch::new("etcd-gateway-turns");
    let (issuer, resource, store) = (&etcd.issuer, "nightly-report", s.url());
    let foreign_grant = || {
        let lease = gateway.lease(30);
        let key = gateway
            .lock(resource, &lease, 20)
            .expect("the lock service granted");
        let out = on_resource("token", issuer, resource, &["--key", &key]);
        let token = printed_token(&out);
        gateway.unlock(&key, &lease);
        token
    };
    // While one of ours holds, the lock service waits: no answer in a
    // second; its lease revoked, nothing of it stays queued.
    let gateway_waits = || {
        let lease = gateway.lease(30);
        let locked = gateway.lock(resource, &lease, 1);
        assert_eq!(locked, None, "the lock service granted a lock we hold");
        let body = serde_json::json!({ "ID": lease });
        gateway
            .post("/v3/lease/revoke", &body, 10)
            .expect("revoked");
    };
    etcd_turns(
        issuer,
        resource,
        &store,
        "v3lock over HTTP",
        foreign_grant,
        gateway_waits,
    );
}

/// Pauses both ways through the lock service: a holder whose lease stops
/// being kept alive (a paused service sends no keep-alive) and one of ours
/// stopped with SIGSTOP; each time the other kind is granted once etcd
/// expired the paused one's lease, writes with a higher token, and the
/// paused holder's token is refused.
#[test]
fn a_paused_lock_service_holder_and_a_paused_one_of_ours_are_refused_once_the_other_took_over() {
    use fencing_harness::process::{Signal, signal};
    let Some(etcd) = Etcdctl::new() else {
        return;
    };
    let gateway = LockGateway { etcd: &etcd };
    let s = Scratch::new("etcd-gateway-paused");
    let (issuer, resource, store) = (&etcd.issuer, "report", s.url());
    let key = gateway
        .lock(resource, &gateway.lease(2), 10)
        .expect("granted");
    let paused = printed_token(&on_resource("token", issuer, resource, &["--key", &key]));
    write_in_turn(&store, paused, None, "lock service");
    let (mut ours, token) = hold(issuer, resource, &["--ttl", "2s", "--wait", "20s"]);
    write_in_turn(&store, token, Some(paused), "fence");

    signal(ours.id(), Signal::SIGSTOP);
    let lease = gateway.lease(30);
    let key = gateway
        .lock(resource, &lease, 20)
        .expect("granted once ours expired");
    let taken = printed_token(&on_resource("token", issuer, resource, &["--key", &key]));
    write_in_turn(&store, taken, Some(token), "lock service");
    signal(ours.id(), Signal::SIGCONT);
    assert_exit(&put(&store, "report", &token.to_string(), "woken fence"), 3);
    let _ = ours.kill();
    let _ = ours.wait();
    gateway.unlock(&key, &lease);
}

/// A ZooKeeper issuer's URL under a prefix of the test's own, and the path
/// of `resource`'s znode there; `None` if ZooKeeper is skipped.
fn zookeeper_issuer(resource: &str) -> Option<(String, String)> {
    if ZOOKEEPER.skipped() {
        return None;
    }
    let prefix = format!("fencing-test/{}", fencing_testkit::unique_prefix());
    let issuer = format!("zk://{}/{prefix}", ZOOKEEPER.endpoint());
    // Our issuer makes the prefix znode (with its ACL) and the resource
    // znode before the other client runs.
    our_grant(&issuer, resource, || {});
    Some((issuer, format!("/{prefix}/{resource}")))
}

/// The token of a ZooKeeper lock node that `who` printed: its `fence token
/// --key NODE`, and only its own (turn 0 also checks that a cversion
/// issuer gives none: it refuses the prefix a czxid issuer made, whose
/// idle names may be removed).
fn zookeeper_token(who: &str, issuer: &str, resource: &str, turn: usize, node: &str) -> u64 {
    assert!(node.contains("lock"), "{who}'s node: {node}");
    let wrong = on_resource("token", issuer, resource, &["--key", "someone__lock__0"]);
    assert_exit(&wrong, LEASE_LOST);
    if turn == 0 {
        // No cversion token: the prefix is a czxid issuer's (and one
        // could not be read back for a foreign node anyway).
        let cversion = format!("{issuer}?token=cversion");
        let refused = on_resource("token", &cversion, resource, &["--key", node]);
        assert_exit(&refused, 1);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("made by a czxid issuer"), "{stderr}");
    }
    printed_token(&on_resource("token", issuer, resource, &["--key", node]))
}

#[test]
fn kazoo_lock_and_our_leases_take_turns_and_cversion_tokens_are_refused() {
    let resource = "nightly-report";
    let Some((issuer, path)) = zookeeper_issuer(resource) else {
        return;
    };
    let s = Scratch::new("kazoo-turns");
    let runtime = runtime();
    let session = std::time::Duration::from_secs(15);
    let mut kazoo = runtime.block_on(foreign::Client::kazoo(
        &ZOOKEEPER.endpoint(),
        &path,
        session,
    ));
    let token = |turn, node: &str| zookeeper_token("kazoo", &issuer, resource, turn, node);
    let store = s.url();
    foreign_turns(
        &runtime,
        "kazoo",
        &mut kazoo,
        (&issuer, resource, &store),
        token,
    );
    runtime.block_on(async move { kazoo.send("done").await });
}

/// Real pauses, both ways, with kazoo: a kazoo holder stopped (SIGSTOP)
/// past its 4 s session, then one of ours past its 2 s TTL; each time the
/// other kind is granted once ZooKeeper ended the paused one's session,
/// writes with a higher token, and the paused holder's token is refused
/// when it wakes.
#[test]
fn a_paused_kazoo_holder_and_a_paused_one_of_ours_are_refused_once_the_other_took_over() {
    use fencing_harness::process::{Signal, signal};
    let resource = "nightly-report";
    let Some((issuer, path)) = zookeeper_issuer(resource) else {
        return;
    };
    let s = Scratch::new("kazoo-paused");
    let store = s.url();
    let runtime = runtime();
    let hosts = ZOOKEEPER.endpoint();
    let session = std::time::Duration::from_secs(4);
    let mut kazoo = runtime.block_on(foreign::Client::kazoo(&hosts, &path, session));
    let node = runtime.block_on(async {
        kazoo.send("take").await;
        kazoo.line().await
    });
    let paused = printed_token(&on_resource("token", &issuer, resource, &["--key", &node]));
    write_in_turn(&store, paused, None, "kazoo");
    let pid = kazoo.id().expect("kazoo's pid");
    signal(pid, Signal::SIGSTOP);
    let (mut ours, token) = hold(&issuer, resource, &["--ttl", "2s", "--wait", "30s"]);
    write_in_turn(&store, token, Some(paused), "fence");
    signal(pid, Signal::SIGCONT);
    assert_exit(
        &put(&store, "report", &paused.to_string(), "woken kazoo"),
        3,
    );
    drop(kazoo); // its session is gone: killed, not released

    // Now ours pauses, and a new kazoo client is granted once our session
    // ended.
    signal(ours.id(), Signal::SIGSTOP);
    let mut kazoo = runtime.block_on(foreign::Client::kazoo(&hosts, &path, session));
    let node = runtime.block_on(async {
        kazoo.send("take").await;
        kazoo.line().await
    });
    let taken = printed_token(&on_resource("token", &issuer, resource, &["--key", &node]));
    write_in_turn(&store, taken, Some(token), "kazoo");
    signal(ours.id(), Signal::SIGCONT);
    assert_exit(&put(&store, "report", &token.to_string(), "woken fence"), 3);
    let _ = ours.kill();
    let _ = ours.wait();
    runtime.block_on(async move {
        kazoo.send("release").await;
        assert_eq!(kazoo.line().await, "released");
        kazoo.send("done").await;
    });
}

/// Curator's `InterProcessMutex` itself (Debian's libcurator-recipes-java)
/// and ours take turns; then one of ours is paused (SIGSTOP) past its TTL,
/// Curator takes the lock, and our woken holder's token is refused.
#[test]
fn curator_and_our_leases_take_turns_and_a_paused_fence_holder_is_refused() {
    let resource = "nightly-report";
    let Some((issuer, path)) = zookeeper_issuer(resource) else {
        return;
    };
    let s = Scratch::new("curator-turns");
    let store = s.url();
    let runtime = runtime();
    let session = std::time::Duration::from_secs(15);
    let mut curator = runtime.block_on(foreign::Client::curator(
        &ZOOKEEPER.endpoint(),
        &path,
        session,
    ));
    let token = |turn, node: &str| zookeeper_token("Curator", &issuer, resource, turn, node);
    foreign_turns(
        &runtime,
        "Curator",
        &mut curator,
        (&issuer, resource, &store),
        token,
    );

    // One of ours holds (a 2 s lease: its session's timeout) and pauses.
    let (mut held, paused) = hold(&issuer, resource, &["--ttl", "2s"]);
    write_in_turn(&store, paused, None, "fence");
    let pid = held.id();
    fencing_harness::process::signal(pid, fencing_harness::process::Signal::SIGSTOP);
    let node = runtime.block_on(async {
        curator.send("take").await;
        curator.line().await
    });
    let token = printed_token(&on_resource("token", &issuer, resource, &["--key", &node]));
    // Curator's write refuses the paused holder's token from now on.
    write_in_turn(&store, token, Some(paused), "Curator");
    fencing_harness::process::signal(pid, fencing_harness::process::Signal::SIGCONT);
    assert_exit(&put(&store, "report", &paused.to_string(), "woken"), 3);
    let _ = held.kill();
    let _ = held.wait();
    runtime.block_on(async move {
        curator.send("release").await;
        assert_eq!(curator.line().await, "released");
        curator.send("done").await;
    });
}

/// Why `fence token` and not `ETCD_LOCK_REV`: an `etcdctl lock` holder that
/// waited is handed the revision of the read that saw its predecessor go,
/// which is above the token of a lease of ours queued behind it, so a
/// paused such holder would beat ours at the store. Its key's create
/// revision (what `fence token` prints) is below ours.
#[test]
fn a_waiting_etcdctl_holder_gets_an_etcd_lock_rev_above_the_next_holders_token() {
    let Some(etcdctl) = Etcdctl::new() else {
        return;
    };
    let s = Scratch::new("etcdctl-lock-rev");
    let resource = "report";
    let lock = |args: &[&str]| {
        let mut command = etcdctl.command("lock", resource, args);
        command.stdout(Stdio::piped());
        command.spawn().expect("run etcdctl lock")
    };
    let queued = |n: usize| {
        for _ in 0..200 {
            let out = etcdctl.output(etcdctl.command(
                "get",
                &format!("{resource}/"),
                &["--prefix", "--keys-only"],
            ));
            let keys = String::from_utf8_lossy(&out.stdout);
            if keys.lines().filter(|l| !l.is_empty()).count() >= n {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        panic!("{n} keys never queued under {}{resource}/", etcdctl.prefix);
    };

    // A holds; B queues behind it; then one of ours behind B.
    let mut first = lock(&[]);
    let mut line = String::new();
    // Kept open: etcdctl prints as it unlocks.
    let mut first_out = BufReader::new(first.stdout.take().unwrap());
    first_out.read_line(&mut line).unwrap();
    s.write(
        "waiter.sh",
        "#!/bin/sh\necho \"$ETCD_LOCK_REV\"\nexec \"$FENCE\" token --issuer \"$ISSUER\" --resource \"$RESOURCE\" --key \"$ETCD_LOCK_KEY\"\n",
    );
    let waiter = lock(&["sh", s.path("waiter.sh").to_str().unwrap()]);
    queued(2);
    let ours = Command::new(FENCE)
        .args([
            "acquire",
            "--issuer",
            &etcdctl.issuer,
            "--resource",
            resource,
        ])
        .args(["--wait", "30s", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run fence acquire");
    queued(3);

    let interrupted = Command::new("kill")
        .args(["-INT", &first.id().to_string()])
        .status();
    assert!(interrupted.is_ok_and(|s| s.success()), "kill -INT etcdctl");
    assert!(first.wait().unwrap().success());
    drop(first_out);
    let waited = waiter.wait_with_output().expect("the waiter ran");
    assert_exit(&waited, 0);
    let printed = String::from_utf8_lossy(&waited.stdout).to_string();
    let numbers: Vec<u64> = printed.lines().map(|l| l.trim().parse().unwrap()).collect();
    let [lock_rev, token] = numbers[..] else {
        panic!("the waiter printed {printed:?}");
    };
    let ours = ours.wait_with_output().expect("ours ran");
    assert_exit(&ours, 0);
    let ours: serde_json::Value = serde_json::from_slice(&ours.stdout).unwrap();
    let ours = ours["token"].as_u64().unwrap();
    assert!(
        token < ours && ours < lock_rev,
        "the waiter's create revision {token} < our next token {ours} < its ETCD_LOCK_REV {lock_rev}"
    );
}
