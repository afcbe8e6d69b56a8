//! [`Tables`]: the names of the tables, checked once here because the
//! statements splice them into SQL (so it imports nothing of this crate).

use fencing_core::{Error, Result};

/// The names of the tables this crate uses, all sharing one prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tables {
    /// Fenced key-value records: `key`, `value`, `lock_token`. Also the
    /// marks of [`crate::fence_transaction`]'s domains: one row, one mark
    /// per name, whichever API fences it.
    pub records: String,
    /// Where earlier releases kept [`crate::fence_transaction`]'s marks
    /// (`domain`, `lock_token`): carried into `records` when the tables are
    /// opened, and read by the guard so that no mark kept here is lost. It
    /// also holds the store's floor (`FencedStore::raise_floor`), the row
    /// of the empty name: never truncate it while the store is in use.
    pub domains: String,
    /// Leases of [`crate::SqlIssuer`].
    pub leases: String,
}

impl Tables {
    /// The default prefix.
    pub const DEFAULT_PREFIX: &'static str = "fencing_";

    /// Tables named `{prefix}records`, `{prefix}domains`, `{prefix}leases`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless the prefix is 1..=40 ASCII letters,
    /// digits or underscores (it is spliced into SQL).
    pub fn from_prefix(prefix: &str) -> Result<Self> {
        let ok = !prefix.is_empty()
            && prefix.len() <= 40
            && prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(Error::invalid_input(format!(
                "table prefix {prefix:?} must be 1..=40 ASCII letters, digits or underscores"
            )));
        }
        Ok(Self {
            records: format!("{prefix}records"),
            domains: format!("{prefix}domains"),
            leases: format!("{prefix}leases"),
        })
    }
}

impl Default for Tables {
    fn default() -> Self {
        Self::from_prefix(Self::DEFAULT_PREFIX).expect("valid default prefix")
    }
}
