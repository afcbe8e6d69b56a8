//! etcd: the issuer, its keys under this run's prefix.

use std::time::Duration;

use fencing_harness::env;

use super::Backend;
use crate::run_prefix;

/// etcd, on `FENCING_ETCD_ENDPOINTS`.
pub const BACKEND: Backend = Backend {
    name: "etcd",
    descriptor: "etcd",
    server: Some(&env::ETCD),
    url: || {
        format!(
            "etcd://{}?prefix={}/",
            env::ETCD.endpoint().replace("http://", ""),
            run_prefix()
        )
    },
    ttl: Duration::from_secs(2),
    store: None,
    unreachable: Some("etcd://127.0.0.1:1"),
    #[cfg(feature = "bench")]
    bench: bench::BENCH,
};

#[cfg(feature = "bench")]
mod bench {
    use std::sync::Arc;
    use std::time::Duration;

    use fencing_etcd::etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
    use fencing_etcd::{EtcdConfig, EtcdIssuer};
    use fencing_harness::env;

    use crate::backends::plain::lock::{
        LockPlain, LockRow, LockSides, call, call_with, fenced_lock,
    };
    use crate::backends::plain::{
        Bench, BoxResult, Plain, first_endpoint, http_get, loopback, metric,
    };

    /// Its lock rows and scale rows, with `/metrics` for its load.
    pub(super) const BENCH: Bench = Bench {
        plain: Plain::Lock(LockPlain {
            endpoint: || first_endpoint(&env::ETCD.endpoint()),
            connect: |url, prefix| {
                Box::pin(async move { Ok(Etcd::connect(&url, &prefix).await?.sides()) })
            },
        }),
        scale: true,
        load: Some(|| Box::pin(load())),
        in_memory: false,
        server_header: None,
    };

    /// The issuer against lease grant + a transaction that creates the key
    /// only if absent, with the lease + revoke.
    struct Etcd {
        issuer: EtcdIssuer,
        prefix: String,
    }

    impl Etcd {
        /// The TTL of both sides: etcd's shortest (whole seconds).
        const TTL: Duration = Duration::from_secs(2);

        async fn connect(endpoint: &str, prefix: &str) -> BoxResult<Self> {
            let issuer = EtcdConfig::new([endpoint])
                .with_prefix(format!("{prefix}/"))
                .connect_issuer()
                .await?;
            Ok(Self {
                issuer,
                prefix: prefix.to_owned(),
            })
        }

        fn sides(self) -> LockSides {
            let etcd = Arc::new(self);
            let fenced = || {
                call(&etcd, |e| {
                    Box::pin(fenced_lock(&e.issuer, "lock", Self::TTL))
                })
            };
            LockSides {
                rows: vec![
                    LockRow {
                        operation: "acquire + release vs grant + txn + revoke",
                        note: "raw: lease grant, a txn creating the key with the lease if absent, lease revoke; same client",
                        target: true,
                        fenced: fenced(),
                        raw: call(&etcd, |e| Box::pin(e.raw_lock(false))),
                    },
                    LockRow {
                        operation: "… vs grant + txn + read + revoke",
                        note: "what a lease rebuilt from its token alone pays: release finds its lock key by the token first",
                        target: false,
                        fenced: fenced(),
                        raw: call(&etcd, |e| Box::pin(e.raw_lock(true))),
                    },
                    LockRow {
                        operation: "… vs etcd's own lock service (v3lock)",
                        note: "raw: lease grant, `Lock` on the lease, `Unlock`, lease revoke: what `etcdctl lock` and Go's `concurrency.Mutex` do",
                        target: false,
                        fenced: fenced(),
                        raw: call(&etcd, |e| Box::pin(e.v3lock())),
                    },
                ],
                // A key per lease: no resource to share.
                raw_on: call_with(&etcd, |e, _| {
                    Box::pin(async { e.raw_lock(false).await.map(|()| true) })
                }),
                version: call(&etcd, |e| Box::pin(e.version())),
                clean_up: call(&etcd, |_| Box::pin(async { Ok(()) })),
            }
        }

        /// The raw calls, on the issuer's own client; with `lookup`, plus
        /// the read the issuer's release makes before it revokes (one
        /// transaction: the resource's floor key and its lock keys).
        async fn raw_lock(&self, lookup: bool) -> BoxResult<()> {
            let mut client = self.issuer.client().clone();
            let ttl = i64::try_from(Self::TTL.as_secs())?;
            let lease = client.lease_grant(ttl, None).await?.id();
            let key = format!("{}/raw/{lease:016x}", self.prefix);
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key,
                    "holder",
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            if !client.txn(txn).await?.succeeded() {
                return Err("the raw lock key existed".into());
            }
            if lookup {
                let read = Txn::new().and_then([
                    TxnOp::get(format!("{}/%floor/raw", self.prefix), None),
                    TxnOp::get(
                        format!("{}/raw/", self.prefix),
                        Some(GetOptions::new().with_prefix()),
                    ),
                ]);
                client.txn(read).await?;
            }
            client.lease_revoke(lease).await?;
            Ok(())
        }

        /// etcd's own lock service (v3lock, what `etcdctl lock` and the Go
        /// `concurrency.Mutex` do): lease grant, `Lock` on the lease,
        /// `Unlock`, lease revoke.
        async fn v3lock(&self) -> BoxResult<()> {
            let mut client = self.issuer.client().clone();
            let ttl = i64::try_from(Self::TTL.as_secs())?;
            let lease = client.lease_grant(ttl, None).await?.id();
            let options = fencing_etcd::etcd_client::LockOptions::new().with_lease(lease);
            let locked = client
                .lock(format!("{}/v3lock", self.prefix), Some(options))
                .await?;
            client.unlock(locked.key()).await?;
            client.lease_revoke(lease).await?;
            Ok(())
        }

        async fn version(&self) -> BoxResult<Option<String>> {
            let status = self.issuer.client().clone().status().await?;
            Ok(Some(format!("etcd {}", status.version())))
        }
    }

    /// `/metrics`: keys and watchers. (Its lease counters are totals since
    /// the server started, from which no live count can be told.)
    async fn load() -> BoxResult<String> {
        let endpoint = first_endpoint(&env::ETCD.endpoint());
        let host = endpoint.trim_start_matches("http://");
        let body = http_get(loopback(host)?, "/metrics").await?;
        let get = |name| metric(&body, name).unwrap_or_else(|| "?".to_owned());
        Ok(format!(
            "etcd: {} keys, {} watchers",
            get("etcd_debugging_mvcc_keys_total"),
            get("etcd_debugging_mvcc_watcher_total"),
        ))
    }
}
