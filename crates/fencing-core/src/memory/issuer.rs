use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::{Error, FencingToken, HolderId, Holding, Lease, LeaseRequest, Result, TokenIssuer};

/// An issuer in process memory, with per-resource counters and real TTL
/// expiry on the monotonic clock. Re-entrant: the same holder acquiring again
/// gets its lease back, extended, with the same token. Clones share one
/// issuer.
#[derive(Clone, Debug, Default)]
pub struct MemoryIssuer {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    resources: Mutex<HashMap<String, Resource>>,
    released: Notify,
}

#[derive(Debug, Default)]
struct Resource {
    last_token: u64,
    held: Option<Held>,
}

#[derive(Debug)]
struct Held {
    holder: HolderId,
    token: FencingToken,
    expires: Instant,
}

impl MemoryIssuer {
    /// An issuer whose first token for every resource is 1.
    pub fn new() -> Self {
        Self::default()
    }

    /// When the current holder's lease runs out, if it is held by someone
    /// other than `holder`.
    fn blocked_until(&self, resource: &str, holder: &HolderId) -> Option<Instant> {
        let resources = self.inner.resources.lock().expect("poisoned");
        let held = resources.get(resource)?.held.as_ref()?;
        (held.holder != *holder && held.expires > Instant::now()).then_some(held.expires)
    }
}

#[async_trait]
impl TokenIssuer for MemoryIssuer {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn reentrant(&self) -> bool {
        true
    }

    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
        request.validate(self.min_ttl())?;
        let now = Instant::now();
        let mut resources = self.inner.resources.lock().expect("poisoned");
        let r = resources.entry(request.resource.clone()).or_default();
        if let Some(held) = r.held.as_mut().filter(|h| h.expires > now) {
            if held.holder != request.holder {
                return Ok(None);
            }
            held.expires = now + request.ttl;
            return Ok(Some(Lease::new(request, held.token, now)));
        }
        // Only after `u64::MAX` itself was granted: no token is left above it.
        let next = r.last_token.checked_add(1).ok_or(Error::TokenOutOfRange {
            token: FencingToken::new(r.last_token),
            max: FencingToken::new(u64::MAX),
        })?;
        r.last_token = next;
        let token = FencingToken::new(next);
        r.held = Some(Held {
            holder: request.holder.clone(),
            token,
            expires: now + request.ttl,
        });
        Ok(Some(Lease::new(request, token, now)))
    }

    async fn acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Lease> {
        let started = Instant::now();
        let give_up = crate::adapter::give_up_at(started, wait);
        loop {
            // Register for the release signal before looking, so a release
            // between the look and the wait is not missed.
            let released = self.inner.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if let Some(lease) = self.try_acquire(request).await? {
                return Ok(lease);
            }
            let now = Instant::now();
            if now >= give_up {
                return Err(Error::Timeout {
                    operation: format!("acquire {:?}", request.resource),
                    after: now - started,
                });
            }
            let until = self
                .blocked_until(&request.resource, &request.holder)
                .map_or(give_up, |expiry| expiry.min(give_up));
            let _ = tokio::time::timeout(until.saturating_duration_since(now), released).await;
        }
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let now = Instant::now();
        let mut resources = self.inner.resources.lock().expect("poisoned");
        let held = resources
            .get_mut(lease.resource())
            .and_then(|r| r.held.as_mut())
            .filter(|h| holds(h, lease) && h.expires > now);
        match held {
            Some(held) => {
                held.expires = now + lease.ttl();
                Ok(lease.renewed(now))
            }
            None => Err(Error::lease_lost(lease)),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let now = Instant::now();
        let mut resources = self.inner.resources.lock().expect("poisoned");
        let r = resources.get_mut(lease.resource());
        let Some(r) = r.filter(|r| {
            r.held
                .as_ref()
                .is_some_and(|h| holds(h, lease) && h.expires > now)
        }) else {
            return Err(Error::lease_lost(lease));
        };
        r.held = None;
        drop(resources);
        self.inner.released.notify_waiters();
        Ok(())
    }

    /// # Errors
    /// [`Error::TokenOutOfRange`] for `u64::MAX`: no token is left above it.
    async fn raise_floor(&self, resource: &str, floor: FencingToken) -> Result<()> {
        if floor.get() == u64::MAX {
            return Err(Error::TokenOutOfRange {
                token: floor,
                max: FencingToken::new(u64::MAX - 1),
            });
        }
        let mut resources = self.inner.resources.lock().expect("poisoned");
        let r = resources.entry(resource.to_owned()).or_default();
        r.last_token = r.last_token.max(floor.get());
        Ok(())
    }

    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        let now = Instant::now();
        let resources = self.inner.resources.lock().expect("poisoned");
        Ok(resources
            .get(resource)
            .and_then(|r| r.held.as_ref())
            .filter(|h| h.expires > now)
            .map(|h| Holding {
                holder: h.holder.clone(),
                token: h.token,
            }))
    }
}

/// Whether `held` is `lease`: the token *and* the holder, so a `Lease`
/// rebuilt with the token but another holder id cannot renew or release
/// the real holder's lease.
fn holds(held: &Held, lease: &Lease) -> bool {
    held.token == lease.token() && held.holder == *lease.holder()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_floor_without_room_above_it_is_refused() {
        let issuer = MemoryIssuer::new();
        let raised = issuer.raise_floor("r", FencingToken::new(u64::MAX)).await;
        assert!(
            matches!(raised, Err(Error::TokenOutOfRange { .. })),
            "{raised:?}"
        );
        let request = LeaseRequest::new("r", Duration::from_secs(1));
        let lease = issuer
            .try_acquire(&request)
            .await
            .expect("grants")
            .expect("free");
        assert_eq!(lease.token(), FencingToken::new(1));
        issuer.release(&lease).await.expect("release");
        // The highest floor with room: the next token is the last one.
        issuer
            .raise_floor("r", FencingToken::new(u64::MAX - 1))
            .await
            .expect("floor u64::MAX - 1");
        let lease = issuer
            .try_acquire(&request)
            .await
            .expect("grants")
            .expect("free");
        assert_eq!(lease.token(), FencingToken::new(u64::MAX));
        issuer.release(&lease).await.expect("release");
        let next = issuer.try_acquire(&request).await;
        assert!(
            matches!(next, Err(Error::TokenOutOfRange { .. })),
            "{next:?}"
        );
    }
}
