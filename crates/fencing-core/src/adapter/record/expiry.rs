//! When a held record is dead by the servers' clocks: [`LeaseExpiry`], and
//! its judgement by dates.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use super::Seen;

/// `Last-Modified` and `Date` are whole seconds: an age read from them may
/// be up to this much longer than the real one.
const TIMESTAMP_GRAIN: Duration = Duration::from_secs(1);

/// How a waiter judges a held lease record dead (the URL option
/// `lease_expiry=`, [`BlobIssuer::with_expiry`](crate::adapter::blob::BlobIssuer::with_expiry)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseExpiry {
    /// `waiter-clock`, the default: a waiter takes over only once it has
    /// seen the same record version, unchanged, for a whole TTL of its own
    /// monotonic clock. No two clocks are compared, no server's included;
    /// a record released by its holder is free at once. A waiter that
    /// first sees a lease its holder abandoned long ago still waits a TTL.
    #[default]
    WaiterClock,
    /// `server-clocks-agree`: also dead once the `Date` of the answer that
    /// carried the record says its `Last-Modified` is a TTL (and a second)
    /// old, so a newcomer takes over a long-abandoned lease on its first
    /// try. **Assumes every server node's clock agrees, within a second,
    /// with the one that stamped the record.** A front end whose clock runs
    /// ahead of it (a node of a self-hosted S3-compatible cluster, a proxy
    /// that stamps or rewrites `Date`) makes a live lease look dead: a
    /// waiter then takes it over and two holders write at once (the store
    /// still refuses the older token, but the lock no longer excludes).
    /// Backends whose reads tell no `Date` (GCS, `object_store`) judge on
    /// the waiter's clock whatever this says.
    ServerClocksAgree,
}

impl LeaseExpiry {
    /// The URL option's words, the default first.
    pub const WORDS: [&'static str; 2] = ["waiter-clock", "server-clocks-agree"];

    /// The word of `lease_expiry=` for this rule.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WaiterClock => Self::WORDS[0],
            Self::ServerClocksAgree => Self::WORDS[1],
        }
    }
}

impl fmt::Display for LeaseExpiry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LeaseExpiry {
    type Err = String;

    fn from_str(word: &str) -> Result<Self, Self::Err> {
        match word {
            "waiter-clock" => Ok(Self::WaiterClock),
            "server-clocks-agree" => Ok(Self::ServerClocksAgree),
            _ => Err(format!("expected one of {}", Self::WORDS.join(", "))),
        }
    }
}

/// Whether the answer that carried `seen` (`since` ago on the monotonic
/// clock) dates its last write a TTL (and the timestamps' grain) ago:
/// [`LeaseExpiry::ServerClocksAgree`].
pub(super) fn by_dates<V>(seen: &Seen<V>, since: Duration, ttl: Duration) -> bool {
    seen.modified
        .zip(seen.answered)
        .is_some_and(|(modified, date)| {
            let now: SystemTime = date + since;
            now.duration_since(modified).unwrap_or_default() >= ttl + TIMESTAMP_GRAIN
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_words_read_back() {
        for word in LeaseExpiry::WORDS {
            assert_eq!(word.parse::<LeaseExpiry>().unwrap().as_str(), word);
        }
        assert_eq!(LeaseExpiry::default().as_str(), LeaseExpiry::WORDS[0]);
        assert!("server-clock".parse::<LeaseExpiry>().is_err());
    }
}
