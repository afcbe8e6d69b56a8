//! Figure 9-6 of Kleppmann & Riccomini (DDIA, ch. 9), run for real through
//! the public traits: the one scenario `fence demo` narrates and every
//! conformance suite asserts (`fencing-testkit`'s `zombie_is_refused`).
//!
//! Client 1 acquires the lease (token T) and sleeps past its TTL. Client 2
//! acquires (T' > T) and writes — or, with `fence_on_acquire`, only fences
//! the key first. Client 1 wakes and writes with T: the store must refuse it
//! with [`Error::StaleToken`] naming both tokens, and client 2's value must
//! be intact. Any other outcome is a [`ScenarioError::Breach`].

use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::{Error, FencedStore, FencingToken, LeaseRequest, TokenIssuer};

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

/// Why the scenario did not finish as the contract says.
#[derive(Debug)]
pub enum ScenarioError {
    /// A call the scenario needs failed (the server is down, a bad TTL).
    Call {
        /// Which step, e.g. `"client 2 acquires"`.
        step: &'static str,
        /// The error.
        source: Error,
    },
    /// The backends broke the contract: what was seen.
    Breach(String),
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Call { step, source } => write!(f, "{step}: {source}"),
            Self::Breach(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for ScenarioError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Call { source, .. } => Some(source),
            Self::Breach(_) => None,
        }
    }
}

/// Runs the scenario once on the resource `{prefix}/figure-9-6` and the key
/// `{prefix}/file`, calling `observe` as each step happens, and returns the
/// timeline.
///
/// # Errors
/// [`ScenarioError::Call`] when a call fails; [`ScenarioError::Breach`]
/// when client 2's token is not above client 1's, the zombie's write is not
/// refused with both tokens named, client 2's value or mark changed, or the
/// zombie can still renew its lease.
pub async fn figure_9_6(
    issuer: &dyn TokenIssuer,
    store: &dyn FencedStore,
    ttl: Duration,
    fence_on_acquire: bool,
    prefix: &str,
    mut observe: impl FnMut(&Event),
) -> Result<Vec<Event>, ScenarioError> {
    let call = |step: &'static str| move |source: Error| ScenarioError::Call { step, source };
    let breach = |what: String| {
        ScenarioError::Breach(format!("{} x {}: {what}", issuer.name(), store.name()))
    };
    let (resource, key) = (format!("{prefix}/figure-9-6"), format!("{prefix}/file"));
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
        .map_err(call("client 1 acquires"))?;
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
        .map_err(call("client 2 acquires once client 1's lease expired"))?;
    if lease2.token() <= lease1.token() {
        return Err(breach(format!(
            "client 2's token {} is not above client 1's {}",
            lease2.token(),
            lease1.token()
        )));
    }
    log(Step::Acquired {
        client: 2,
        token: lease2.token(),
        ttl: ttl * 10,
    });

    let value2 = "written by client 2";
    let write2 = || store.put(&key, Bytes::from_static(value2.as_bytes()), lease2.token());
    if fence_on_acquire {
        store
            .fence(&key, lease2.token())
            .await
            .map_err(call("client 2 fences"))?;
        log(Step::Fenced {
            client: 2,
            token: lease2.token(),
        });
    } else {
        write2().await.map_err(call("client 2 writes"))?;
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
        ) if presented == lease1.token() && current == lease2.token() => log(Step::Refused {
            client: 1,
            presented,
            current,
            error: e.to_string(),
        }),
        other => {
            return Err(breach(format!(
                "the zombie's write with token {} must be refused with StaleToken naming {} and {}, got {other:?}",
                lease1.token(),
                lease1.token(),
                lease2.token()
            )));
        }
    }

    if fence_on_acquire {
        write2().await.map_err(call("client 2 writes"))?;
        log(Step::Wrote {
            client: 2,
            token: lease2.token(),
            value: value2.into(),
        });
    }
    let stored = store
        .get(&key)
        .await
        .map_err(call("read back"))?
        .ok_or_else(|| breach("client 2's value is missing from the store".into()))?;
    if stored.value != value2.as_bytes() || stored.token != lease2.token() {
        return Err(breach(format!(
            "client 2's data was changed: the store holds {:?} at token {}",
            String::from_utf8_lossy(&stored.value),
            stored.token
        )));
    }
    log(Step::Final {
        value: String::from_utf8_lossy(&stored.value).into_owned(),
        token: stored.token,
    });
    // The zombie's own lease is gone; the issuer says so.
    if !matches!(issuer.renew(&lease1).await, Err(Error::LeaseLost { .. })) {
        return Err(breach("the zombie could still renew its lease".into()));
    }
    let _ = issuer.release(&lease2).await;
    Ok(events)
}
