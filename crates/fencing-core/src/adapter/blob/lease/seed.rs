//! Where a new record's counter starts, so that a record deleted by hand
//! and made again never restarts its tokens.
//!
//! The rule: a record's first token is a time `T` of the server's clock, in
//! microseconds, later than the moment the record was seen absent (so
//! later than its deletion), and it is not granted before the server's
//! clock has reached `T`. Every token is then at most the server's time
//! when it was granted (one grant per microsecond at most: each is a
//! conditional write on one object), so every token of a deleted record is
//! below the server's time at its deletion, and below the first token of
//! the record made after it, in the same second or not.
//!
//! `T` comes from one of two readings, each truncated to its grain (never
//! rounded up), so one grain above it is past the moment it was read:
//! - the backend's estimate of the server's clock
//!   ([`BlobBackend::server_now`], fed by the `Date` of the answer that
//!   showed the record absent), at most
//!   [`server_now_lag`](BlobBackend::server_now_lag) behind: `T` is the
//!   estimate plus that lag, reached once the lag has passed;
//! - where the backend has no estimate (`object_store`), the record's own
//!   `Last-Modified`: the record is first written *unseeded* (free, counter
//!   0, nothing granted from it), read back, and seeded at `T` =
//!   `Last-Modified` plus its grain (a second when it has no fraction),
//!   reached a grain after that read arrived. Anyone who finds an unseeded
//!   record (its maker crashed) seeds it the same way.
//!
//! The wait (at most the grain: a second on S3, GCS, Azure) is paid once
//! per record made, never by a grant on a record that exists.

use std::time::{Duration, Instant, SystemTime};

use super::io::Wrote;
use super::record::Record;
use super::{BlobIssuer, Current};
use crate::adapter::blob::{BlobBackend, Precondition};
use crate::{Error, Result};

/// The first token of a record being made, and when the server's clock
/// has surely reached it.
#[derive(Clone, Copy, Debug)]
struct Seed {
    token: u64,
    ready: Instant,
}

impl Seed {
    /// `at` on the server's clock, rounded up to the microsecond, reached
    /// by `ready` on this process's monotonic clock.
    fn at(at: SystemTime, ready: Instant) -> Self {
        let since = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let micros = since.as_micros() + u128::from(!since.subsec_nanos().is_multiple_of(1_000));
        Self {
            token: u64::try_from(micros).unwrap_or(u64::MAX / 2).max(1),
            // The rounding up adds under a microsecond.
            ready: ready + Duration::from_micros(1),
        }
    }
}

/// The grain a timestamp was truncated to, judged by its trailing zeros:
/// never finer than the real grain (a finer clock that lands on a whole
/// second only makes the wait longer).
fn grain_of(time: SystemTime) -> Duration {
    let nanos = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    match nanos {
        0 => Duration::from_secs(1),
        n if n.is_multiple_of(1_000_000) => Duration::from_millis(1),
        n if n.is_multiple_of(1_000) => Duration::from_micros(1),
        _ => Duration::from_nanos(1),
    }
}

impl<B: BlobBackend> BlobIssuer<B> {
    /// From the backend's estimate of the server's clock, read now.
    fn seed_by_estimate(&self) -> Option<Seed> {
        let now = self.backend.server_now()?;
        let lag = self.backend.server_now_lag();
        Some(Seed::at(now + lag, Instant::now() + lag))
    }

    /// From an unseeded record's own `Last-Modified`.
    fn seed_by_record(current: &Current) -> Option<Seed> {
        let modified = current.modified?;
        let grain = grain_of(modified);
        Some(Seed::at(modified + grain, current.received + grain))
    }

    fn no_server_clock(&self, key: &str) -> Error {
        Error::UnsafeConfiguration {
            backend: self.backend.name(),
            reason: format!(
                "no lease granted on {key:?}: this backend tells no server time (no `Date` \
                 estimate, no `Last-Modified` on reads), so a new lease record cannot start \
                 above the tokens of one deleted before it (tokens would restart at 1); fill \
                 StoredObject::modified or BlobBackend::server_now in the backend"
            ),
        }
    }

    /// The first token of `key`'s record, absent (`current` is `None`) or
    /// unseeded, and the precondition of the write that gives it, once the
    /// server's clock has reached it (see the module docs). `Ok(None)`:
    /// another write came first; read again.
    ///
    /// # Errors
    /// [`Error::UnsafeConfiguration`] when the backend tells no server
    /// time; a backend's errors.
    pub(super) async fn seed(
        &self,
        key: &str,
        current: Option<Current>,
    ) -> Result<Option<(Precondition, u64)>> {
        let (precondition, seed) = match current {
            Some(unseeded) => {
                let seed = Self::seed_by_record(&unseeded).or_else(|| self.seed_by_estimate());
                (Precondition::Matches(unseeded.version), seed)
            }
            None => match self.seed_by_estimate() {
                Some(seed) => (Precondition::Absent, Some(seed)),
                None => {
                    let unseeded = Record::unseeded();
                    if let Wrote::Lost = self.write(key, Precondition::Absent, unseeded).await? {
                        return Ok(None);
                    }
                    match self.read(key).await? {
                        Some(made) if made.record.is_unseeded() => {
                            let seed = Self::seed_by_record(&made);
                            (Precondition::Matches(made.version), seed)
                        }
                        _ => return Ok(None),
                    }
                }
            },
        };
        let seed = seed.ok_or_else(|| self.no_server_clock(key))?;
        // The timer's grain is a millisecond: the last of the wait (all of
        // it on a clock read exactly, as the in-memory one) is yielded away.
        if let Some(long) = seed
            .ready
            .checked_duration_since(Instant::now())
            .filter(|left| *left > Duration::from_millis(2))
        {
            tokio::time::sleep(long - Duration::from_millis(1)).await;
        }
        while Instant::now() < seed.ready {
            tokio::task::yield_now().await;
        }
        Ok(Some((precondition, seed.token)))
    }

    /// Whether this issuer can seed a record on this backend, and from
    /// what: for `verify`.
    pub(super) fn seeded_from(&self, reads_tell_modified: bool) -> Option<&'static str> {
        if self.backend.server_now().is_some() {
            Some("the `Date` of the server's answers")
        } else if reads_tell_modified {
            Some("the record's own `Last-Modified` (written unseeded, then read back)")
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timestamp_is_as_coarse_as_its_trailing_zeros() {
        let at = |nanos| SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, nanos);
        assert_eq!(grain_of(at(0)), Duration::from_secs(1));
        assert_eq!(grain_of(at(120_000_000)), Duration::from_millis(1));
        assert_eq!(grain_of(at(120_456_000)), Duration::from_micros(1));
        assert_eq!(grain_of(at(120_456_789)), Duration::from_nanos(1));
    }

    #[test]
    fn a_seed_is_rounded_up_to_the_microsecond() {
        let now = Instant::now();
        let seed = Seed::at(SystemTime::UNIX_EPOCH + Duration::new(2, 1_001), now);
        assert_eq!(seed.token, 2_000_002);
        assert!(seed.ready > now);
        let whole = Seed::at(SystemTime::UNIX_EPOCH + Duration::new(2, 1_000), now);
        assert_eq!(whole.token, 2_000_001);
    }
}
