//! The zombie scenario of Kleppmann & Riccomini's Figure 9-6, with a real
//! pause.
//!
//! Client 1 acquires the lease (token T) and sleeps past its TTL. Client 2
//! acquires (T' > T) and writes — or, with `fence_on_acquire`, only fences
//! the key. Client 1 wakes and writes with T: the store refuses it with
//! [`Error::StaleToken`], and client 2's state is intact.

use std::time::{Duration, Instant};

use bytes::Bytes;
use fencing_core::{Error, FencedStore, FencingToken, LeaseRequest, TokenIssuer};

use crate::unique_prefix;

/// What happened, in order.
#[derive(Clone, Debug)]
pub enum Step {
    /// A client was granted the lease.
    Acquired {
        /// 1 or 2.
        client: u8,
        /// The lease's token.
        token: FencingToken,
        /// The lease's TTL.
        ttl: Duration,
    },
    /// A client stopped (a GC pause, a VM freeze).
    Paused {
        /// The paused client.
        client: u8,
        /// For how long.
        duration: Duration,
    },
    /// A client resumed, still believing it holds the lease.
    Resumed {
        /// The client.
        client: u8,
    },
    /// A client fenced the key before writing.
    Fenced {
        /// The client.
        client: u8,
        /// The mark it set.
        token: FencingToken,
    },
    /// The store accepted a write.
    Wrote {
        /// The client.
        client: u8,
        /// The token it carried.
        token: FencingToken,
        /// What it wrote.
        value: String,
    },
    /// The store refused a write.
    Refused {
        /// The client.
        client: u8,
        /// The token it carried.
        presented: FencingToken,
        /// The mark the store holds.
        current: FencingToken,
        /// The error as a program sees it.
        error: String,
    },
    /// The value the store holds at the end.
    Final {
        /// The value.
        value: String,
        /// Its mark.
        token: FencingToken,
    },
}

/// A step and when it happened, from the start of the scenario.
#[derive(Clone, Debug)]
pub struct Event {
    /// Time since the scenario started.
    pub at: Duration,
    /// What happened.
    pub step: Step,
}

/// The scenario twice: client 2 writing straight away, then client 2 only
/// fencing before the zombie wakes. Panics unless the zombie is refused
/// both times. This is what every adapter's suite runs (the
/// `zombie_is_refused` test of [`issuer_conformance!`](crate::issuer_conformance)
/// and [`store_conformance!`](crate::store_conformance)).
pub async fn zombie_is_refused(issuer: &dyn TokenIssuer, store: &dyn FencedStore, ttl: Duration) {
    for fence_on_acquire in [false, true] {
        let events = zombie_scenario(issuer, store, ttl, fence_on_acquire, |_| {}).await;
        assert!(
            events
                .iter()
                .any(|e| matches!(e.step, Step::Refused { client: 1, .. })),
            "{} × {} (fence_on_acquire: {fence_on_acquire}): no refusal in the timeline {events:?}",
            issuer.name(),
            store.name()
        );
    }
}

/// Runs the scenario on `key`-less fresh names, calling `observe` as each
/// step happens, and returns the timeline. Panics on any breach of the
/// contract.
pub async fn zombie_scenario(
    issuer: &dyn TokenIssuer,
    store: &dyn FencedStore,
    ttl: Duration,
    fence_on_acquire: bool,
    mut observe: impl FnMut(&Event) + Send,
) -> Vec<Event> {
    let prefix = unique_prefix();
    let resource = format!("{prefix}/figure-9-6");
    let key = format!("{prefix}/file");
    let started = Instant::now();
    let mut events = Vec::new();
    let mut log = |step: Step| {
        let event = Event {
            at: started.elapsed(),
            step,
        };
        observe(&event);
        events.push(event);
    };
    let wait = ttl * 10 + Duration::from_secs(30);

    let lease1 = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), wait)
        .await
        .expect("client 1 acquires");
    log(Step::Acquired {
        client: 1,
        token: lease1.token(),
        ttl,
    });

    // Client 1 stops while its lease runs out.
    let pause = ttl + ttl / 2;
    log(Step::Paused {
        client: 1,
        duration: pause,
    });
    tokio::time::sleep(pause).await;

    let lease2 = issuer
        .acquire(&LeaseRequest::new(&resource, ttl * 10), wait)
        .await
        .expect("client 2 acquires once client 1's lease expired");
    assert!(
        lease2.token() > lease1.token(),
        "client 2's token {} is not above client 1's {}",
        lease2.token(),
        lease1.token()
    );
    log(Step::Acquired {
        client: 2,
        token: lease2.token(),
        ttl: ttl * 10,
    });

    let value2 = "written by client 2";
    if fence_on_acquire {
        store
            .fence(&key, lease2.token())
            .await
            .expect("client 2 fences");
        log(Step::Fenced {
            client: 2,
            token: lease2.token(),
        });
    } else {
        store
            .put(&key, Bytes::from_static(value2.as_bytes()), lease2.token())
            .await
            .expect("client 2 writes");
        log(Step::Wrote {
            client: 2,
            token: lease2.token(),
            value: value2.into(),
        });
    }

    log(Step::Resumed { client: 1 });
    let zombie = store
        .put(
            &key,
            Bytes::from_static(b"written by client 1 (zombie)"),
            lease1.token(),
        )
        .await;
    match zombie {
        Err(
            ref e @ Error::StaleToken {
                presented, current, ..
            },
        ) => {
            assert_eq!(
                presented,
                lease1.token(),
                "the refusal names the zombie's token"
            );
            assert_eq!(
                current,
                lease2.token(),
                "the refusal names the store's mark"
            );
            log(Step::Refused {
                client: 1,
                presented,
                current,
                error: e.to_string(),
            });
        }
        other => panic!(
            "{} × {}: the zombie's write with token {} must be refused with StaleToken, got {other:?}",
            issuer.name(),
            store.name(),
            lease1.token()
        ),
    }

    if fence_on_acquire {
        store
            .put(&key, Bytes::from_static(value2.as_bytes()), lease2.token())
            .await
            .expect("client 2 writes");
        log(Step::Wrote {
            client: 2,
            token: lease2.token(),
            value: value2.into(),
        });
    }
    let stored = store
        .get(&key)
        .await
        .expect("read back")
        .expect("client 2's value is there");
    assert_eq!(
        stored.value,
        value2.as_bytes(),
        "client 2's data was changed"
    );
    assert_eq!(stored.token, lease2.token());
    log(Step::Final {
        value: String::from_utf8_lossy(&stored.value).into_owned(),
        token: stored.token,
    });
    // The zombie's own lease is gone; the issuer says so.
    assert!(
        matches!(issuer.renew(&lease1).await, Err(Error::LeaseLost { .. })),
        "the zombie could still renew its lease"
    );
    let _ = issuer.release(&lease2).await;
    events
}
