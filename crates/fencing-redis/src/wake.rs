//! Waking the issuer's waiters at release: the release script `PUBLISH`es
//! the lock key on `{prefix}released`, and one subscribed connection per
//! issuer hands it to the waiters.
//!
//! A wake-up only says "try again now": grants still come from the acquire
//! script and its counter, so a lost, late or spurious message costs
//! latency, never a second holder or a token out of order.

use std::time::Duration;

use fencing_core::adapter::Call;
pub(crate) use fencing_core::adapter::wake::acquire_woken;
use fencing_core::adapter::wake::{Subscription, Wake, wake_channel};
use futures_util::StreamExt;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::Layout;
use crate::error::map_error;

/// The channel our releases under key prefix `prefix` publish on: one
/// per prefix and layout, the lock key in the message. (Channels are not
/// keys: nothing is stored, and an ACL must allow it, `&{prefix}*`;
/// without it the release still works and waiters poll.) The other
/// layouts have an empty prefix by default: their channels start with
/// `fencing:` all the same.
pub(crate) fn channel(layout: Layout, prefix: &str) -> String {
    match layout {
        Layout::Fencing => format!("{prefix}released"),
        Layout::SetNx => format!("fencing:set-nx:{prefix}released"),
        Layout::Redisson => format!("fencing:redisson:{prefix}released"),
    }
}

/// One subscribed connection per issuer (shared by its clones), opened by
/// the first waiter with the issuer's own client (its TLS and login) and
/// kept while the issuer lives; a task reads its messages and hands them to
/// every waiter, who picks its lock key's. Not a connection per waiter:
/// each would hold a socket, and on the server a client, for the whole
/// wait. Not `BLPOP` on the issuer's multiplexed connection either: a
/// blocking command stalls every other command on it.
pub(crate) struct Listener {
    client: redis::Client,
    channel: String,
    subscription: Subscription,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl Listener {
    /// Wake-ups on `channel`, through `client`.
    pub(crate) fn new(client: redis::Client, channel: String) -> Self {
        Self {
            client,
            channel,
            subscription: Subscription::new(),
        }
    }

    /// The same client on another channel (nothing started yet).
    pub(crate) fn on(&self, channel: String) -> Self {
        Self::new(self.client.clone(), channel)
    }

    /// Wake-ups from now on; `None` when the subscription cannot run (the
    /// waiter polls), or `budget` is too short to start one.
    pub(crate) async fn subscribe(&self, budget: Duration) -> Option<broadcast::Receiver<Wake>> {
        let what = format!("redis SUBSCRIBE {}", self.channel);
        // The error names the operation, never the URL or password.
        let start = async || {
            self.start()
                .await
                .map_err(|e| map_error(e, Call::read("subscribe to releases")))
        };
        self.subscription.subscribe(budget, &what, start).await
    }

    /// Subscribes (confirmed before this returns, so a waiter that
    /// subscribes then tries misses no release) and spawns the reader.
    async fn start(&self) -> redis::RedisResult<(broadcast::Receiver<Wake>, JoinHandle<()>)> {
        let mut pubsub = self.client.get_async_pubsub().await?;
        pubsub.subscribe(&self.channel).await?;
        let mut messages = pubsub.into_on_message();
        let (sender, template) = wake_channel();
        let task = tokio::spawn(async move {
            while let Some(message) = messages.next().await {
                let key = String::from_utf8_lossy(message.get_payload_bytes());
                let _ = sender.send(Wake::Released(key.into()));
            }
            // The connection is gone (a restart, a network fault): what was
            // published meanwhile is lost. Waiters try now, then poll; the
            // next one subscribes again.
            tracing::debug!("redis: release subscription ended");
            let _ = sender.send(Wake::All);
        });
        Ok((template, task))
    }
}
