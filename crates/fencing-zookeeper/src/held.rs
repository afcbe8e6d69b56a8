//! Granted leases: each is a ZooKeeper session of its own, closed by a
//! watchdog at the lease's deadline unless renewed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencing_core::{HolderId, Lease};
use tokio::task::JoinHandle;
use zookeeper_client as zk;

use crate::queue::Queued;

/// A granted lease's session, closed by its watchdog at the deadline
/// unless renewed. A granted [`Lease`] carries it as its handle
/// (`Arc<Held>`).
pub(crate) struct Held {
    resource: String,
    pub(crate) path: String,
    /// Checked with the token: a `Lease` rebuilt with the token but another
    /// holder id must not renew or release this one.
    holder: HolderId,
    token: u64,
    pub(crate) session: zk::SessionId,
    ttl: Duration,
    state: Mutex<HeldState>,
    watchdog: Mutex<Option<JoinHandle<()>>>,
}

struct HeldState {
    /// `None` once the session is closed.
    client: Option<zk::Client>,
    deadline: Instant,
}

impl Held {
    /// The session's client, if the lease is still live by the local clock.
    pub(crate) fn live_client(&self) -> Option<zk::Client> {
        let mut state = self.state.lock().expect("poisoned");
        if Instant::now() >= state.deadline {
            state.client = None; // closes the session
        }
        state.client.clone()
    }

    /// Moves the deadline on by the TTL from `sent`; `false` if the session
    /// was closed meanwhile.
    pub(crate) fn extend(&self, sent: Instant) -> bool {
        let mut state = self.state.lock().expect("poisoned");
        if state.client.is_none() {
            return false;
        }
        state.deadline = sent + self.ttl;
        true
    }

    pub(crate) fn close(&self) {
        self.state.lock().expect("poisoned").client = None;
        if let Some(watchdog) = self.watchdog.lock().expect("poisoned").take() {
            watchdog.abort();
        }
    }

    fn is_open(&self) -> bool {
        self.state.lock().expect("poisoned").client.is_some()
    }

    /// Whether this is `lease`'s session: same resource, token and holder.
    fn is_of(&self, lease: &Lease) -> bool {
        self.resource == lease.resource()
            && self.token == lease.token().get()
            && self.holder == *lease.holder()
    }
}

/// `(resource, token)`: how a lease without a handle is found.
type Key = (String, u64);

fn key_of(lease: &Lease) -> Key {
    (lease.resource().to_owned(), lease.token().get())
}

/// The leases granted through this issuer, for leases that come back
/// without their handle (rebuilt from resource, holder and token).
#[derive(Default)]
pub(crate) struct HeldLeases {
    map: Mutex<HashMap<Key, Arc<Held>>>,
}

impl HeldLeases {
    /// Makes a queued node a held lease, alive since `alive_at`, whose
    /// session the watchdog closes at the deadline unless renewed.
    pub(crate) fn hold(&self, q: Queued, alive_at: Instant) -> Lease {
        let lease = Lease::new(&q.request, q.token, alive_at);
        let held = Arc::new(Held {
            resource: q.request.resource.clone(),
            path: q.path(),
            holder: q.request.holder.clone(),
            token: q.token.get(),
            session: q.client.session_id(),
            ttl: q.request.ttl,
            state: Mutex::new(HeldState {
                client: Some(q.client),
                deadline: lease.deadline(),
            }),
            watchdog: Mutex::new(None),
        });
        let watched = Arc::downgrade(&held);
        let watchdog = tokio::spawn(async move {
            loop {
                let Some(held) = watched.upgrade() else {
                    return;
                };
                let deadline = held.state.lock().expect("poisoned").deadline;
                drop(held);
                tokio::time::sleep_until(deadline.into()).await;
                let Some(held) = watched.upgrade() else {
                    return;
                };
                let mut state = held.state.lock().expect("poisoned");
                if Instant::now() >= state.deadline {
                    // Not renewed in time: end the session, and the node.
                    state.client = None;
                    return;
                }
            }
        });
        *held.watchdog.lock().expect("poisoned") = Some(watchdog);
        let mut map = self.map.lock().expect("poisoned");
        map.retain(|_, h| h.is_open());
        map.insert(key_of(&lease), held.clone());
        lease.with_handle(held)
    }

    /// `lease`'s session: the handle it carries, or else the one granted
    /// here with its resource and token, if the holder matches too.
    pub(crate) fn find(&self, lease: &Lease) -> Option<Arc<Held>> {
        if let Some(held) = handle_of(lease) {
            return Some(held.clone());
        }
        self.map
            .lock()
            .expect("poisoned")
            .get(&key_of(lease))
            .filter(|held| held.is_of(lease))
            .cloned()
    }

    /// Like [`find`](Self::find), and forgets it.
    pub(crate) fn take(&self, lease: &Lease) -> Option<Arc<Held>> {
        let mut map = self.map.lock().expect("poisoned");
        let key = key_of(lease);
        match handle_of(lease) {
            Some(held) => {
                if map.get(&key).is_some_and(|h| Arc::ptr_eq(h, held)) {
                    map.remove(&key);
                }
                Some(held.clone())
            }
            None => {
                if !map.get(&key)?.is_of(lease) {
                    return None;
                }
                map.remove(&key)
            }
        }
    }

    /// Keeps a lease whose release failed, so the caller can try again.
    pub(crate) fn put_back(&self, lease: &Lease, held: Arc<Held>) {
        self.map
            .lock()
            .expect("poisoned")
            .insert(key_of(lease), held);
    }
}

/// The session a lease carries, if it is this lease's.
fn handle_of(lease: &Lease) -> Option<&Arc<Held>> {
    lease.handle::<Arc<Held>>().filter(|held| held.is_of(lease))
}
