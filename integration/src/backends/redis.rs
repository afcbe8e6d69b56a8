//! Redis: the issuer, on the append-only server it requires.

use std::time::Duration;

use fencing_harness::env::{self, with_option};

use super::Backend;
use crate::run_prefix;

/// Redis, on `FENCING_REDIS_AOF_URL` (`appendfsync always`).
pub const BACKEND: Backend = Backend {
    name: "redis",
    descriptor: "redis",
    server: Some(&env::REDIS_AOF),
    url: || {
        with_option(
            &env::REDIS_AOF.endpoint(),
            &format!("prefix={}:", run_prefix()),
        )
    },
    ttl: Duration::from_millis(300),
    store: None,
    unreachable: Some("redis://127.0.0.1:1"),
    #[cfg(feature = "bench")]
    bench: bench::BENCH,
};

#[cfg(feature = "bench")]
mod bench {
    use std::sync::Arc;
    use std::time::Duration;

    use fencing_harness::env;
    use fencing_redis::{RedisConfig, RedisIssuer};
    use fencing_tokens::HolderId;
    use redis::aio::{ConnectionManager, ConnectionManagerConfig};

    use crate::backends::plain::lock::{
        LockPlain, LockRow, LockSides, call, call_with, fenced_lock,
    };
    use crate::backends::plain::{Bench, BoxResult, Plain};

    /// Its lock rows and scale rows, with `INFO` for its load.
    pub(super) const BENCH: Bench = Bench {
        plain: Plain::Lock(LockPlain {
            endpoint: || env::REDIS_AOF.endpoint(),
            connect: |url, prefix| {
                Box::pin(async move { Ok(Redis::connect(&url, &prefix).await?.sides()) })
            },
        }),
        scale: true,
        load: Some(|| Box::pin(load())),
        in_memory: false,
        server_header: None,
    };

    /// The issuer's acquire and release scripts against `SET NX PX`,
    /// `INCR` and `DEL`, on the append-only server the issuer requires.
    struct Redis {
        issuer: RedisIssuer,
        raw: ConnectionManager,
        prefix: String,
    }

    impl Redis {
        const TTL: Duration = Duration::from_secs(10);

        async fn connect(url: &str, prefix: &str) -> BoxResult<Self> {
            let issuer = RedisConfig::new(url)
                .with_prefix(format!("{prefix}:"))
                .connect_issuer()
                .await?;
            // The issuer's connection settings.
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(2)))
                .set_response_timeout(Some(Duration::from_secs(5)))
                .set_number_of_retries(2);
            let raw = redis::Client::open(url)?
                .get_connection_manager_with_config(config)
                .await?;
            Ok(Self {
                issuer,
                raw,
                prefix: prefix.to_owned(),
            })
        }

        fn sides(self) -> LockSides {
            let redis = Arc::new(self);
            LockSides {
                rows: vec![LockRow {
                    operation: "acquire + release vs SET NX PX + INCR + DEL",
                    note: "the issuer's acquire and release scripts; both on the append-only server (`appendfsync always`)",
                    target: true,
                    fenced: call(&redis, |r| {
                        Box::pin(fenced_lock(&r.issuer, "lock", Self::TTL))
                    }),
                    raw: call(&redis, |r| Box::pin(r.raw())),
                }],
                raw_on: call_with(&redis, |r, name| {
                    Box::pin(async move { r.raw_on(&name).await })
                }),
                version: call(&redis, |r| Box::pin(r.version())),
                clean_up: call(&redis, |r| {
                    Box::pin(async {
                        r.clean_up().await;
                        Ok(())
                    })
                }),
            }
        }

        async fn raw(&self) -> BoxResult<()> {
            if self.raw_on("lock").await? {
                Ok(())
            } else {
                Err("the raw lock key was held".into())
            }
        }

        /// The raw calls on the lock `name`: `false` if it was held. The
        /// fence counter is one per name, as the issuer's is one per
        /// resource.
        async fn raw_on(&self, name: &str) -> BoxResult<bool> {
            let mut conn = self.raw.clone();
            let lock = format!("{}:raw:{name}", self.prefix);
            let holder = HolderId::unique();
            let ttl = u64::try_from(Self::TTL.as_millis())?;
            let taken: Option<String> = redis::cmd("SET")
                .arg(&lock)
                .arg(holder.as_str())
                .arg("NX")
                .arg("PX")
                .arg(ttl)
                .query_async(&mut conn)
                .await?;
            if taken.is_none() {
                return Ok(false);
            }
            let _token: u64 = redis::cmd("INCR")
                .arg(format!("{lock}:fence"))
                .query_async(&mut conn)
                .await?;
            let _: u64 = redis::cmd("DEL").arg(&lock).query_async(&mut conn).await?;
            Ok(true)
        }

        async fn version(&self) -> BoxResult<Option<String>> {
            let mut conn = self.raw.clone();
            let info: String = redis::cmd("INFO")
                .arg("server")
                .query_async(&mut conn)
                .await?;
            let version = info
                .lines()
                .find_map(|l| l.strip_prefix("redis_version:"))
                .unwrap_or("?")
                .trim()
                .to_owned();
            Ok(Some(format!(
                "Redis {version} (appendonly yes, appendfsync always)"
            )))
        }

        /// Deletes the counters and locks of both sides.
        async fn clean_up(&self) {
            let mut conn = self.raw.clone();
            let keys = [
                format!("{}:raw:lock:fence", self.prefix),
                format!("{}:raw:lock", self.prefix),
                format!("{}:lock:fence", self.prefix),
                format!("{}:lock:lock", self.prefix),
            ];
            let _: Result<u64, _> = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await;
        }
    }

    /// `INFO`: clients and keys.
    async fn load() -> BoxResult<String> {
        let client = redis::Client::open(env::REDIS_AOF.endpoint())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let info: String = redis::cmd("INFO").query_async(&mut conn).await?;
        let keys = info
            .lines()
            .find_map(|l| l.strip_prefix("db0:keys="))
            .and_then(|rest| rest.split(',').next())
            .unwrap_or("0")
            .to_owned();
        let clients = info
            .lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .unwrap_or("?")
            .trim()
            .to_owned();
        Ok(format!("Redis: {clients} clients, {keys} keys"))
    }
}
