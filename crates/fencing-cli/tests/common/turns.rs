//! Grants taken in turn by our `fence` and a lock client of another kind,
//! and the tokens each carries to a fenced store.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use fencing_harness::foreign;

use super::{FENCE, assert_exit, on_resource, put};

/// Grants taken in turn, foreign and ours alternating.
pub(crate) const TURNS: usize = 20;

/// The token a `fence token` printed.
pub(crate) fn printed_token(out: &std::process::Output) -> u64 {
    assert_exit(out, 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a token: {stdout:?}"))
}

/// `fence acquire --hold` with `more` arguments (a ZooKeeper lease lives
/// in its process's session): the process, and its lease's token.
pub(crate) fn hold(issuer: &str, resource: &str, more: &[&str]) -> (std::process::Child, u64) {
    let mut hold = Command::new(FENCE)
        .args(["acquire", "--issuer", issuer, "--resource", resource])
        .args(["--hold", "--json"])
        .args(more)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run fence acquire --hold");
    let mut line = String::new();
    BufReader::new(hold.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the lease");
    let lease: serde_json::Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("fence acquire --hold printed {line:?}: {e}"));
    (hold, lease["token"].as_u64().expect("a token"))
}

/// Our lease's token: [`hold`], `while_held`, then Ctrl-C, which releases
/// it.
pub(crate) fn our_grant(issuer: &str, resource: &str, while_held: impl FnOnce()) -> u64 {
    let (mut hold, token) = hold(issuer, resource, &[]);
    while_held();
    let interrupted = Command::new("kill")
        .args(["-INT", &hold.id().to_string()])
        .status();
    assert!(interrupted.is_ok_and(|s| s.success()), "kill -INT fence");
    let status = hold.wait().expect("wait for fence");
    assert!(status.success(), "fence acquire --hold: {status}");
    token
}

/// Writes `token` to the store's key, and checks that the one before it
/// (a holder paused since its grant) is refused there now, nothing written.
pub(crate) fn write_in_turn(store: &str, token: u64, before: Option<u64>, who: &str) {
    assert_exit(&put(store, "report", &token.to_string(), who), 0);
    if let Some(before) = before {
        assert!(token > before, "{who}: token {token} after {before}");
        let zombie = put(store, "report", &before.to_string(), "paused");
        assert_exit(&zombie, 3);
    }
}

/// `etcdctl` (`FENCING_ETCDCTL`, else the one on the `PATH`) on the etcd of
/// `integration/services.sh`, and our issuer's URL there, under a prefix of
/// this test's own; `lock NAME` is our resource `NAME`'s lock.
/// `TURNS` grants on `resource`, `who` (a foreign lock client in lines:
/// `try`, `take`, `release`) and ours alternating: each excludes the other
/// (while the foreign one holds, our issuer waits), and tokens rise along
/// the order of grants at the store. `token_of(turn, line)` is the foreign
/// holder's token, from what its `take` printed.
pub(crate) fn foreign_turns(
    runtime: &tokio::runtime::Runtime,
    who: &str,
    client: &mut foreign::Client,
    (issuer, resource, store): (&str, &str, &str),
    token_of: impl Fn(usize, &str) -> u64,
) {
    let mut last = None;
    for turn in 0..TURNS {
        if turn % 2 == 1 {
            // While ours holds, the other client finds it held.
            let token = our_grant(issuer, resource, || {
                runtime.block_on(async {
                    client.send("try").await;
                    assert_eq!(client.line().await, "busy", "{who} took a lock we hold");
                });
            });
            write_in_turn(store, token, last, "fence");
            last = Some(token);
            continue;
        }
        let took = runtime.block_on(async {
            client.send("take").await;
            client.line().await
        });
        assert_exit(&on_resource("acquire", issuer, resource, &[]), super::HELD);
        let token = token_of(turn, &took);
        write_in_turn(store, token, last, who);
        last = Some(token);
        runtime.block_on(async {
            client.send("release").await;
            assert_eq!(client.line().await, "released");
        });
    }
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}
