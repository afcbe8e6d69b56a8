//! The server's clock in a lease record's life: when a held record is
//! dead, and where a new record's counter starts.

use std::time::{Duration, SystemTime};

use super::{BlobIssuer, Current};
use crate::adapter::blob::BlobBackend;

/// `Last-Modified` and `Date` are whole seconds: an age read from them may
/// be up to this much longer than the real one.
const TIMESTAMP_GRAIN: Duration = Duration::from_secs(1);

impl<B: BlobBackend> BlobIssuer<B> {
    /// The first token of a new record: the server's time in microseconds
    /// (see the module docs), or 1 if the backend cannot tell it.
    pub(super) fn first_token(&self, key: &str) -> u64 {
        let seed = self
            .backend
            .server_now()
            .and_then(|now| now.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |since| {
                u64::try_from(since.as_micros()).unwrap_or(u64::MAX / 2)
            });
        if seed == 0 {
            tracing::warn!(
                key,
                backend = self.backend.name(),
                "new lease record at token 1: this backend reports no server time, so a record \
                 deleted by hand and created again would restart its tokens"
            );
        }
        seed + 1
    }

    /// Whether a held record is dead: a TTL old by the `Date` of the answer
    /// that carried it (run on by the monotonic clock since), or the same
    /// version seen by this waiter for a TTL.
    pub(super) fn expired(&self, key: &str, current: &Current) -> bool {
        let ttl = Duration::from_millis(current.record.ttl_ms);
        let by_server =
            current
                .modified
                .zip(current.answered)
                .is_some_and(|(modified, (date, received))| {
                    let now = date + received.elapsed();
                    now.duration_since(modified).unwrap_or_default() >= ttl + TIMESTAMP_GRAIN
                });
        let by_waiter = self
            .known(key)
            .is_some_and(|k| k.current.version == current.version && k.since.elapsed() >= ttl);
        by_server || by_waiter
    }
}
