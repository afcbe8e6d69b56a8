//! Watching an election from outside: who leads, and every change.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::Leader;
use crate::{Result, TokenIssuer};

/// The terms of an election as they go by ([`Election::observe`]).
///
/// [`next`](Self::next) returns the current leader on its first call, then
/// waits for each change (a new term, or no leader) and returns it. It
/// polls [`TokenIssuer::holder`], so a term shorter than the poll interval
/// can be missed; terms are reported in order, and their tokens strictly
/// increase (the issuer's contract).
///
/// [`Election::observe`]: super::Election::observe
pub struct Observer {
    issuer: Arc<dyn TokenIssuer>,
    resource: String,
    every: Duration,
    seen: Option<Option<Leader>>,
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("issuer", &self.issuer.name())
            .field("resource", &self.resource)
            .field("every", &self.every)
            .field("seen", &self.seen)
            .finish()
    }
}

impl Observer {
    pub(super) fn new(issuer: Arc<dyn TokenIssuer>, resource: String, every: Duration) -> Self {
        Self {
            issuer,
            resource,
            every,
            seen: None,
        }
    }

    /// Who leads now (one question to the issuer); remembered as seen.
    ///
    /// # Errors
    /// Any error of [`TokenIssuer::holder`]; the observer stays usable.
    pub async fn current(&mut self) -> Result<Option<Leader>> {
        let now = self
            .issuer
            .holder(&self.resource)
            .await?
            .map(Leader::from_holding);
        self.seen = Some(now.clone());
        Ok(now)
    }

    /// The leader on the first call; after that, waits until the leader
    /// differs from the one last returned and returns it (`None`: no one
    /// leads now).
    ///
    /// # Errors
    /// Any error of [`TokenIssuer::holder`]; the observer stays usable, and
    /// the next call goes on from the last leader returned.
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        let Some(seen) = self.seen.clone() else {
            return self.current().await;
        };
        loop {
            let now = self
                .issuer
                .holder(&self.resource)
                .await?
                .map(Leader::from_holding);
            if now != seen {
                self.seen = Some(now.clone());
                return Ok(now);
            }
            tokio::time::sleep(self.every).await;
        }
    }

    /// Waits for the next term (skipping moments with no leader) and
    /// returns its leader.
    ///
    /// # Errors
    /// As [`next`](Self::next).
    pub async fn next_term(&mut self) -> Result<Leader> {
        loop {
            if let Some(leader) = self.next().await? {
                return Ok(leader);
            }
        }
    }

    /// The leader last returned (`None` before the first call or when no
    /// one led).
    pub fn last(&self) -> Option<&Leader> {
        self.seen.as_ref().and_then(Option::as_ref)
    }
}
