//! Waking the issuer's waiters at release: PostgreSQL's `LISTEN`/`NOTIFY`.
//!
//! A wake-up only says "try again now": grants still come from the acquire
//! statement and its counter, so a lost, late or spurious notification
//! costs latency, never a second holder or a token out of order.
// Without PostgreSQL only the polling bounds are used.
#![cfg_attr(not(feature = "postgres"), allow(dead_code))]

pub(crate) use fencing_core::adapter::wake::acquire_woken;

#[cfg(feature = "postgres")]
pub(crate) use listener::Listener;

#[cfg(feature = "postgres")]
mod listener {
    use std::time::Duration;

    use fencing_core::adapter::wake::{Subscription, Wake, wake_channel};
    use sqlx::postgres::{PgListener, PgPool};
    use tokio::sync::broadcast;
    use tokio::task::JoinHandle;

    /// One `LISTEN` connection per issuer (shared by its clones), started
    /// by the first waiter and kept while the issuer lives; a task reads
    /// its notifications and hands them to every waiter, who picks its
    /// resource's. Not one per waiter: each would hold a pool connection
    /// for the whole wait, so as many waiters as the pool has connections
    /// would leave none for the acquire statements (and a server's
    /// `max_connections` bounds the waiters of all processes). One per
    /// issuer costs one pool connection, so a pool of one connection never
    /// listens: its waiters poll.
    #[derive(Debug, Default)]
    pub(crate) struct Listener {
        subscription: Subscription,
    }

    impl Listener {
        /// Wake-ups for `channel`, from now on; `None` when the listener
        /// cannot run (the waiter polls), or `budget` is too short to start
        /// one.
        pub(crate) async fn subscribe(
            &self,
            pool: &PgPool,
            channel: &str,
            budget: Duration,
        ) -> Option<broadcast::Receiver<Wake>> {
            if pool.options().get_max_connections() < 2 {
                return None;
            }
            let what = format!("postgres LISTEN {channel}");
            self.subscription
                .subscribe(budget, &what, || start(pool, channel))
                .await
        }
    }

    /// `LISTEN`s on `channel` (done before this returns, so a waiter that
    /// subscribes then tries misses no release) and spawns the reader.
    async fn start(
        pool: &PgPool,
        channel: &str,
    ) -> sqlx::Result<(broadcast::Receiver<Wake>, JoinHandle<()>)> {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(channel).await?;
        // One notification to ourselves, through the pool: behind a
        // transaction-pooling proxy (PgBouncer) LISTEN succeeds and hears
        // nothing, and waiters must poll instead. An empty payload names
        // no resource.
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(channel)
            .execute(pool)
            .await?;
        while !listener.recv().await?.payload().is_empty() {}
        let (sender, template) = wake_channel();
        let task = tokio::spawn(async move {
            loop {
                let wake = match listener.try_recv().await {
                    Ok(Some(n)) => Wake::Released(n.payload().into()),
                    // Reconnected (and listening again): whatever was
                    // released meanwhile sent nothing we saw.
                    Ok(None) => Wake::All,
                    // The pool closed or the reconnect failed: waiters
                    // poll, and the next one starts a new listener.
                    Err(e) => {
                        tracing::debug!("postgres: release listener ended: {e}");
                        let _ = sender.send(Wake::All);
                        return;
                    }
                };
                let _ = sender.send(wake);
            }
        });
        Ok((template, task))
    }
}
