//! The pauses between tries of the compare-and-swap loop after a lost
//! race, shared by every loop that writes on a version it read.

use std::time::Duration;

/// The pause after the `attempt`-th lost race: "full jitter" (a random
/// time up to a ceiling that doubles per attempt, 1 ms to 32 ms), so the
/// writers that lost one race spread out instead of re-reading and
/// colliding again in lockstep; the one that won is done, and one that
/// re-reads a higher mark stops at once (stale).
pub fn retry_pause(attempt: u32) -> Duration {
    retry_pause_after(attempt, Duration::ZERO)
}

/// The pause after the `attempt`-th lost race whose losing write took
/// `lost_write` to be answered: as [`retry_pause`], but with a ceiling of
/// at least that round trip (up to [`MAX_ROUND_TRIP_PAUSE`]). The writes
/// that raced ours were sent at about the same time; re-reading sooner than
/// a round trip later finds a version they are about to overtake (another
/// lost race, two more requests), or a lower mark than the one that will
/// refuse us. A slow server (one that answers requests one at a time, or a
/// distant region) makes the round trip, and so the pause, longer.
pub fn retry_pause_after(attempt: u32, lost_write: Duration) -> Duration {
    let doubling = Duration::from_micros(1000u64 << attempt.saturating_sub(1).min(5));
    let ceiling = doubling.max(lost_write.min(MAX_ROUND_TRIP_PAUSE));
    let ceiling_micros = u64::try_from(ceiling.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(rand::random_range(0..=ceiling_micros))
}

/// The most a round trip adds to a pause after a lost race: a write that
/// took long for its size (a large upload) says little of when the racing
/// writes land.
pub const MAX_ROUND_TRIP_PAUSE: Duration = Duration::from_millis(250);

#[cfg(test)]
mod tests {
    use super::{MAX_ROUND_TRIP_PAUSE, retry_pause, retry_pause_after};
    use std::time::Duration;

    #[test]
    fn a_pause_after_a_lost_race_reaches_about_the_lost_writes_round_trip() {
        let round_trip = Duration::from_millis(80);
        let pauses: Vec<Duration> = (0..400).map(|_| retry_pause_after(1, round_trip)).collect();
        assert!(pauses.iter().all(|p| *p <= round_trip));
        // Not held to the 1 ms of a first retry: the racing writes land
        // about a round trip after ours.
        assert!(pauses.iter().any(|p| *p > round_trip / 2));
        // A slow upload does not stall the retry for its whole duration.
        let slow = Duration::from_secs(10);
        assert!((0..200).all(|_| retry_pause_after(1, slow) <= MAX_ROUND_TRIP_PAUSE));
        // A quick round trip leaves the doubling ceiling as it was.
        let quick = Duration::from_micros(10);
        assert!((0..200).all(|_| retry_pause_after(6, quick) <= Duration::from_millis(32)));
    }

    #[test]
    fn retry_pauses_are_jittered_under_a_doubling_ceiling() {
        for (attempt, ceiling) in [(1, 1), (2, 2), (3, 4), (6, 32), (50, 32)] {
            let pauses: Vec<Duration> = (0..200).map(|_| retry_pause(attempt)).collect();
            let ceiling = Duration::from_millis(ceiling);
            assert!(pauses.iter().all(|p| *p <= ceiling), "attempt {attempt}");
            // Spread out, not one value: writers do not retry in lockstep.
            let distinct: std::collections::HashSet<_> = pauses.iter().collect();
            assert!(
                distinct.len() > 100,
                "attempt {attempt}: {}",
                distinct.len()
            );
        }
    }
}
