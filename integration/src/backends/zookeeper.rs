//! ZooKeeper: the issuer, its znodes under this run's prefix.

use std::time::Duration;

use fencing_harness::env;

use super::Backend;
use crate::run_prefix;

/// ZooKeeper, on `FENCING_ZK_ADDR`.
pub const BACKEND: Backend = Backend {
    name: "zookeeper",
    descriptor: "zookeeper",
    server: Some(&env::ZOOKEEPER),
    url: || format!("zk://{}/{}", env::ZOOKEEPER.endpoint(), run_prefix()),
    ttl: Duration::from_secs(2),
    store: None,
    unreachable: Some("zk://127.0.0.1:1/fencing"),
    #[cfg(feature = "bench")]
    bench: bench::BENCH,
};

#[cfg(feature = "bench")]
mod bench {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use fencing_harness::env;
    use fencing_zookeeper::zookeeper_client as zk;
    use fencing_zookeeper::{TokenSource, ZkConfig, ZkIssuer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use crate::backends::plain::lock::{
        LockPlain, LockRow, LockSides, call, call_with, fenced_lock,
    };
    use crate::backends::plain::{Bench, BoxResult, Plain, first_endpoint, loopback, metric};

    /// Its lock rows and scale rows, with `mntr` for its load.
    pub(super) const BENCH: Bench = Bench {
        plain: Plain::Lock(LockPlain {
            endpoint: || first_endpoint(&env::ZOOKEEPER.endpoint()),
            connect: |addr, prefix| {
                Box::pin(async move { Ok(ZooKeeper::connect(&addr, &prefix).await?.sides()) })
            },
        }),
        scale: true,
        load: Some(|| Box::pin(load())),
        in_memory: false,
        server_header: None,
    };

    /// The issuer (its leases of one TTL share a session) against create
    /// ephemeral sequential + delete on a session that is already open;
    /// and two issuers taking turns on one resource (neither knows the
    /// resource znode's version the other left) against the same raw
    /// calls.
    struct ZooKeeper {
        issuer: ZkIssuer,
        other: ZkIssuer,
        turn: AtomicBool,
        session: zk::Client,
        dir: String,
        addr: String,
    }

    impl ZooKeeper {
        /// The TTL of the fenced side and the session timeout of the raw
        /// one.
        const TTL: Duration = Duration::from_secs(4);

        async fn connect(addr: &str, prefix: &str) -> BoxResult<Self> {
            let root = format!("/{prefix}");
            let connect = async || {
                ZkConfig::new(addr)
                    .with_prefix(&root)
                    .with_token_source(TokenSource::Czxid)
                    .connect_issuer()
                    .await
            };
            let (issuer, other) = (connect().await?, connect().await?);
            let session = zk::Client::connector()
                .with_session_timeout(Self::TTL)
                .connect(addr)
                .await?;
            let dir = format!("{root}-raw/lock");
            let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            match session.mkdir(&dir, &options).await {
                Ok(()) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(e.into()),
            }
            Ok(Self {
                issuer,
                other,
                turn: AtomicBool::new(false),
                session,
                dir,
                addr: addr.to_owned(),
            })
        }

        fn sides(self) -> LockSides {
            let zk = Arc::new(self);
            let raw = || call(&zk, |z| Box::pin(z.raw()));
            LockSides {
                rows: vec![
                    LockRow {
                        operation: "acquire + release vs create + delete",
                        note: "raw: create an ephemeral sequential znode and delete it, on a session opened beforehand",
                        target: true,
                        fenced: call(&zk, |z| Box::pin(fenced_lock(&z.issuer, "lock", Self::TTL))),
                        raw: raw(),
                    },
                    LockRow {
                        operation: "… two issuers in turn on one resource",
                        note: "neither issuer knows the resource znode's version the other left: it reads it first (get + create + delete); raw as above",
                        target: false,
                        fenced: call(&zk, |z| Box::pin(z.fenced_in_turn())),
                        raw: raw(),
                    },
                ],
                // A znode per lease: no resource to share.
                raw_on: call_with(&zk, |z, _| Box::pin(async { z.raw().await.map(|()| true) })),
                version: call(&zk, |z| Box::pin(z.version())),
                clean_up: call(&zk, |z| {
                    Box::pin(async {
                        z.clean_up().await;
                        Ok(())
                    })
                }),
            }
        }

        /// Acquire + release by one of two issuers, in turn, on one
        /// resource.
        async fn fenced_in_turn(&self) -> BoxResult<()> {
            let turn = self.turn.fetch_xor(true, Ordering::Relaxed);
            let issuer = if turn { &self.other } else { &self.issuer };
            fenced_lock(issuer, "turns", Self::TTL).await
        }

        /// Create ephemeral sequential + delete on the session opened at
        /// connect.
        async fn raw(&self) -> BoxResult<()> {
            let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
            let (_, sequence) = self
                .session
                .create(&format!("{}/lock-", self.dir), b"holder", &options)
                .await?;
            self.session
                .delete(&format!("{}/lock-{sequence}", self.dir), None)
                .await?;
            Ok(())
        }

        /// Its answer to the `srvr` four-letter word: the version line.
        async fn version(&self) -> BoxResult<Option<String>> {
            let exchange = async {
                let out = four_letter_word(&self.addr, b"srvr").await.ok()?;
                out.lines()
                    .find_map(|l| l.strip_prefix("Zookeeper version:"))
                    .map(|v| {
                        let v = v.trim();
                        // "3.8.4-9316c2a7…, built on …": the version is enough.
                        let v = v.split([',', '-']).next().unwrap_or(v);
                        format!("ZooKeeper {v}")
                    })
            };
            Ok(tokio::time::timeout(Duration::from_secs(3), exchange)
                .await
                .ok()
                .flatten())
        }

        /// Deletes what the raw side created (the issuer's resource znodes
        /// stay: it never deletes them).
        async fn clean_up(&self) {
            let _ = self.session.delete(&self.dir, None).await;
            let parent = self.dir.trim_end_matches("/lock");
            let _ = self.session.delete(parent, None).await;
        }
    }

    /// What the server answers `word` with (a four-letter word, on the
    /// loopback only).
    async fn four_letter_word(addr: &str, word: &[u8]) -> BoxResult<String> {
        let mut stream = tokio::net::TcpStream::connect(loopback(addr)?).await?;
        stream.write_all(word).await?;
        let mut out = String::new();
        stream.read_to_string(&mut out).await?;
        Ok(out)
    }

    /// `mntr`: connections, ephemeral nodes and watches.
    async fn load() -> BoxResult<String> {
        let out = four_letter_word(&first_endpoint(&env::ZOOKEEPER.endpoint()), b"mntr").await?;
        let get = |name| metric(&out, name).unwrap_or_else(|| "?".to_owned());
        Ok(format!(
            "ZooKeeper: {} connections, {} ephemeral nodes, {} watches",
            get("zk_num_alive_connections"),
            get("zk_ephemerals_count"),
            get("zk_watch_count")
        ))
    }
}
