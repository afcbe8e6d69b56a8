//! Where a new record's counter starts, so that a record deleted by hand
//! and made again never restarts its tokens.
//!
//! The rule: a record is first made *unseeded* (free, counter 0, nothing
//! granted from it), on the condition that none exists. Its first token is
//! a time `T` of the server's clock, in microseconds, later than the moment
//! the unseeded record was made (so later than any deletion before it),
//! written on the unseeded record's own version, and not before the
//! server's clock has reached `T`. Every token is then at most the server's
//! time when it was granted (one grant per microsecond at most: each is a
//! conditional write on one record), so every token of a deleted record is
//! below the server's time at its deletion, and below the first token of
//! the record made after it, in the same second or not. (Seeding straight
//! from a read that found no record is not enough: a write conditioned on
//! absence can land after a record was made, used and deleted in between,
//! with a seed taken before all of it. The model checker found that.)
//!
//! `T` comes from one of two readings, each truncated to its grain (never
//! rounded up), so one grain above it is past the moment it was read:
//! - the port's estimate of the server's clock ([`Clocks::server_now`],
//!   read after the answer to the unseeded write, or to the read that
//!   found one), at most [`Clocks::server_lag`] behind (the port's lag, a
//!   `Date`'s second, plus that answer's round trip: its `Date` was stamped
//!   somewhere between the request leaving and the answer arriving): `T`
//!   is the estimate plus that lag, reached once the lag has passed;
//! - where the port has no estimate (`object_store`), the unseeded
//!   record's own `Last-Modified`, read back: `T` is `Last-Modified` plus
//!   its grain (a second when it has no fraction), reached a grain after
//!   that read arrived.
//!
//! Anyone who finds an unseeded record (its maker crashed) seeds it the
//! same way. The wait (at most the grain: a second on S3, GCS, Azure,
//! DynamoDB) and the one more write are paid once per record made, never
//! by a grant on a record that exists.

use std::time::{Duration, Instant, SystemTime};

use super::Clocks;

/// The first token of a record being made, and when the server's clock
/// has surely reached it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Seed {
    pub(super) token: u64,
    pub(super) ready: Instant,
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

    /// From the estimate of the server's clock, read now.
    pub(super) fn by_estimate(clocks: &Clocks) -> Option<Self> {
        let now = clocks.server_now?;
        Some(Self::at(
            now + clocks.server_lag,
            clocks.now + clocks.server_lag,
        ))
    }

    /// From an unseeded record's own `Last-Modified`, read at `received`.
    pub(super) fn by_record(modified: Option<SystemTime>, received: Instant) -> Option<Self> {
        let modified = modified?;
        let grain = grain_of(modified);
        Some(Self::at(modified + grain, received + grain))
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
