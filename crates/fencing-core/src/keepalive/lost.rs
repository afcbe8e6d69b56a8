//! Why a kept-alive lease was lost, for the work it guarded.

use std::fmt;
use std::sync::Arc;

use crate::{Error, Lease};

/// Why a lease was lost.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum LostReason {
    /// The issuer refused a renewal ([`Error::LeaseLost`]): the lease
    /// expired there, was released, or was taken by another holder.
    Refused,
    /// The lease's local [`deadline`](Lease::deadline) passed before a
    /// renewal succeeded: renewals kept failing (the last failure is kept),
    /// went unanswered, or the process was paused past the deadline. The
    /// lease may be held by someone else now.
    Expired {
        /// The last renewal failure, if a renewal was answered at all.
        last_error: Option<Arc<Error>>,
    },
    /// The keep-alive was stopped by its owner: the guard was released or
    /// dropped, or [`KeepAlive::stop`](super::KeepAlive::stop) was called.
    /// This process no longer holds the lease for whatever writes under it
    /// (a released lease may be granted to the next holder at once).
    Stopped,
}

/// A lost lease: which one, and why. Stop the work it guarded.
///
/// Converts into [`Error::LeaseLost`].
#[derive(Clone, Debug)]
pub struct Lost {
    pub(super) lease: Lease,
    pub(super) reason: LostReason,
}

impl Lost {
    /// The lease as last renewed.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Why it was lost.
    pub fn reason(&self) -> &LostReason {
        &self.reason
    }
}

impl fmt::Display for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lease on {:?} with token {} is no longer held: ",
            self.lease.resource(),
            self.lease.token()
        )?;
        match &self.reason {
            LostReason::Refused => f.write_str("the issuer refused to renew it"),
            LostReason::Expired {
                last_error: Some(e),
            } => write!(
                f,
                "renewals failed until its deadline passed (last failure: {e})"
            ),
            LostReason::Expired { last_error: None } => {
                f.write_str("its deadline passed before a renewal was answered")
            }
            LostReason::Stopped => {
                f.write_str("its guard was released or dropped (its keep-alive stopped)")
            }
        }
    }
}

impl std::error::Error for Lost {}

impl From<Lost> for Error {
    fn from(lost: Lost) -> Self {
        Self::LeaseLost {
            resource: lost.lease.resource().to_owned(),
            token: lost.lease.token(),
        }
    }
}
