//! Granted leases: each a lock node in its TTL class's shared session,
//! deleted by a watchdog at the lease's deadline unless renewed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencing_core::{HolderId, Lease};
use tokio::task::JoinHandle;
use zookeeper_client as zk;

use crate::client::{Reap, reap};
use crate::queue::Queued;

/// A granted lease's lock node, deleted by its watchdog at the deadline
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
    /// The operation timeout, for the watchdog's delete.
    timeout: Duration,
    state: Mutex<HeldState>,
    watchdog: Mutex<Option<JoinHandle<()>>>,
}

struct HeldState {
    /// The shared session; `None` once the lease is over here (released,
    /// lost, or past its deadline and its node deleted).
    client: Option<zk::Client>,
    deadline: Instant,
}

impl Held {
    /// The session's client, if the lease is still live by the local
    /// clock (past the deadline, the watchdog deletes the node).
    pub(crate) fn live_client(&self) -> Option<zk::Client> {
        let state = self.state.lock().expect("poisoned");
        if Instant::now() >= state.deadline {
            return None;
        }
        state.client.clone()
    }

    /// Moves the deadline on by the TTL from `sent`; `false` if the lease
    /// ended meanwhile.
    pub(crate) fn extend(&self, sent: Instant) -> bool {
        let mut state = self.state.lock().expect("poisoned");
        if state.client.is_none() {
            return false;
        }
        state.deadline = sent + self.ttl;
        true
    }

    /// Ends the lease here, its node already deleted (or gone).
    pub(crate) fn close(&self) {
        self.state.lock().expect("poisoned").client = None;
        if let Some(watchdog) = self.watchdog.lock().expect("poisoned").take() {
            watchdog.abort();
        }
    }

    /// Ends the lease here and deletes its node (in the background).
    fn delete_node(&self) {
        let client = self.state.lock().expect("poisoned").client.take();
        if let Some(client) = client
            && tokio::runtime::Handle::try_current().is_ok()
        {
            reap(client, Reap::Path(self.path.clone()), self.timeout);
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

impl Drop for Held {
    /// A lease dropped unreleased (and forgotten here) before its deadline
    /// passed: nothing else would delete its node in a shared session.
    fn drop(&mut self) {
        self.delete_node();
    }
}

/// `(resource, token)`: how a lease without a handle is found.
type Key = (String, u64);

fn key_of(lease: &Lease) -> Key {
    (lease.resource().to_owned(), lease.token().get())
}

/// The leases granted through this issuer, for leases that come back
/// without their handle (rebuilt from resource, holder and token).
pub(crate) struct HeldLeases {
    map: Mutex<HashMap<Key, Arc<Held>>>,
    timeout: Duration,
}

impl HeldLeases {
    /// Leases whose watchdogs delete with `timeout` per call.
    pub(crate) fn new(timeout: Duration) -> Self {
        Self {
            map: Mutex::default(),
            timeout,
        }
    }

    /// Makes a queued node a held lease, alive since `alive_at`, whose
    /// node the watchdog deletes at the deadline unless renewed.
    pub(crate) fn hold(&self, q: Queued, alive_at: Instant) -> Lease {
        let lease = Lease::new(&q.request, q.token, alive_at);
        let held = Arc::new(Held {
            resource: q.request.resource.clone(),
            path: q.path(),
            holder: q.request.holder.clone(),
            token: q.token.get(),
            session: q.client.session_id(),
            ttl: q.request.ttl,
            timeout: self.timeout,
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
                if Instant::now() >= held.state.lock().expect("poisoned").deadline {
                    // Not renewed in time: the node goes, the session
                    // (and the other leases in it) stays.
                    held.delete_node();
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
