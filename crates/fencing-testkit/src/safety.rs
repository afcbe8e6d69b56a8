//! What an adapter says of a deployment: `verify`'s checks, and the
//! `Error::UnsafeConfiguration` refusals of a server that could re-issue a
//! token or lose an accepted write.

use std::fmt::Debug;

use fencing_core::safety::SafetyCheck;
use fencing_core::{Error, Result};

/// The check named `name` among `checks`.
///
/// # Panics
/// If there is none, listing the checks there are.
pub fn check<'a>(checks: &'a [SafetyCheck], name: &str) -> &'a SafetyCheck {
    checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no {name:?} check in {checks:#?}"))
}

/// The reason of an [`Error::UnsafeConfiguration`] from `backend`.
///
/// # Panics
/// On anything else, naming `what` should have been refused.
pub fn refusal<T: Debug>(result: Result<T>, backend: &str, what: &str) -> String {
    match result {
        Err(Error::UnsafeConfiguration {
            backend: refused_by,
            reason,
        }) if refused_by == backend => reason,
        other => {
            panic!("{what} must be refused by {backend} with UnsafeConfiguration, got {other:?}")
        }
    }
}
