//! Running a script that mints or raises a token: the server checks its
//! guard runs first, `WAIT` for replicas in the same round trip, and what
//! a refusal or too few acknowledgements mean.

use fencing_core::adapter::Call;
use fencing_core::{Error, Result};
use redis::{Script, ScriptInvocation};

use super::RedisIssuer;
use crate::durability::{Durability, Finding, inspect, unsafe_config};
use crate::error::map_error;
use crate::{Layout, NAME};

impl RedisIssuer {
    /// Checks the server the connection is on now and remembers its
    /// `run_id`, which the scripts compare before every grant. Nothing to
    /// check for a caller who accepted a volatile counter.
    pub(super) async fn check_server(&self) -> Result<()> {
        if self.durability == Durability::AcceptVolatileCounter {
            return Ok(());
        }
        let server = inspect(&mut self.connection.clone(), self.durability).await?;
        if let Some(unsafe_) = server.findings.iter().find(|f| !f.is_safe()) {
            return Err(unsafe_config(unsafe_.detail.clone()));
        }
        // An empty run_id is what the scripts read as "nothing to check":
        // a server that reports none (a proxy, a Redis-compatible server)
        // would switch every check off, the counter's TTL included.
        // The script reads it as `%x+`: anything else would read as
        // another process on every grant.
        if server.run_id.is_empty() || !server.run_id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(unsafe_config(
                "the server's `INFO server` has no hexadecimal `run_id`: the grant script could not \
                 tell this server process from another, so what was checked here could not be relied \
                 on in a grant"
                    .to_owned(),
            ));
        }
        *self.checked.lock().expect("run_id lock") = server.run_id;
        Ok(())
    }

    /// Appends the guard's arguments and its verdict key, the last key
    /// (see `scripts::GUARD`).
    fn guard_args(&self, invocation: &mut ScriptInvocation<'_>) {
        let (fewest, most) = self.durability.replica_bounds();
        let run_id = self.checked.lock().expect("run_id lock").clone();
        invocation
            .key(Layout::verdict_key(&self.prefix, &run_id))
            .arg(run_id)
            .arg(fewest)
            .arg(most.map_or_else(String::new, |m| m.to_string()));
    }

    /// Runs a script that mints or raises a token, then, with
    /// [`Durability::Replicated`], `WAIT` in the same pipeline (one round
    /// trip; `WAIT` cannot run inside a script). Returns the script's reply
    /// and how many replicas acknowledged (`None`: no `WAIT`).
    ///
    /// A reply saying the connection is on another server process checks
    /// that server and runs the script once more.
    pub(super) async fn run_guarded(
        &self,
        operation: &str,
        build: impl Fn(&mut ScriptInvocation<'_>),
        script: &Script,
    ) -> Result<(Vec<String>, Option<u32>)> {
        for _ in 0..2 {
            let mut invocation = script.prepare_invoke();
            build(&mut invocation);
            self.guard_args(&mut invocation);
            let (reply, acked) = self.invoke(operation, script, &invocation).await?;
            match reply.first().map(String::as_str) {
                Some("-1") => self.check_server().await?,
                Some("-2") => {
                    let at = |i: usize| reply.get(i).map_or("", String::as_str);
                    let finding = if at(1) == "connected_slaves" {
                        Finding::replicas(at(2), at(3), self.durability)
                    } else {
                        Finding::judge(at(1), at(2), self.durability)
                    };
                    return Err(unsafe_config(finding.detail));
                }
                _ => return Ok((reply, acked)),
            }
        }
        Err(Error::backend(
            NAME,
            true,
            format!(
                "{operation}: the Redis server process changed twice while it was being checked"
            ),
        ))
    }

    async fn invoke(
        &self,
        operation: &str,
        script: &Script,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<(Vec<String>, Option<u32>)> {
        let mut conn = self.connection.clone();
        let Durability::Replicated { replicas, timeout } = self.durability else {
            let reply = invocation
                .invoke_async(&mut conn)
                .await
                .map_err(|e| map_error(e, Call::write(operation)))?;
            return Ok((reply, None));
        };
        let mut pipe = redis::pipe();
        pipe.invoke_script(invocation)
            .cmd("WAIT")
            .arg(replicas)
            .arg(fencing_core::adapter::ttl_millis_ceil(timeout));
        let mut result = pipe.query_async(&mut conn).await;
        // A pipeline does not load a script the server lacks (after a
        // restart or on another node): load it and send once more. A
        // NOSCRIPT reply means the script did not run.
        if matches!(&result, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
        {
            // Loading a script twice is loading it once: a lost answer is
            // merely retried.
            script
                .load_async(&mut conn)
                .await
                .map_err(|e| map_error(e, Call::idempotent(operation)))?;
            result = pipe.query_async(&mut conn).await;
        }
        let (reply, acked): (Vec<String>, u32) =
            result.map_err(|e| map_error(e, Call::write(operation)))?;
        Ok((reply, Some(acked)))
    }

    /// Whether enough replicas acknowledged a write (`acked`: what `WAIT`
    /// answered, `None` if there was no `WAIT`); a retryable error naming
    /// `what` if not.
    pub(super) fn acknowledged(&self, acked: Option<u32>, what: &str) -> Result<()> {
        match (acked, self.durability) {
            (Some(acked), Durability::Replicated { replicas, timeout }) if acked < replicas => {
                Err(Error::backend(
                    NAME,
                    true,
                    format!(
                        "{what}: {acked} of {replicas} replicas acknowledged it within {timeout:?} (WAIT); \
                         a failover could lose it, so it is not handed out"
                    ),
                ))
            }
            _ => Ok(()),
        }
    }
}
