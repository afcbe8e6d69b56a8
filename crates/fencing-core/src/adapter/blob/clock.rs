//! [`ServerClock`]: the server's time, estimated from the `Date` of its
//! answers, for judging a lease's age on the server's clock alone.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// The server's clock as its answers tell it: the latest `Date` seen, plus
/// the time this process's monotonic clock has counted since that answer
/// arrived.
///
/// The estimate is never ahead of the server (a `Date` is written before
/// the answer leaves and truncated to the second), so an age judged by it
/// is never longer than the real one. The client's own wall clock is never
/// read.
#[derive(Debug, Default)]
pub struct ServerClock {
    last: Mutex<Option<(SystemTime, Instant)>>,
}

impl ServerClock {
    /// A clock that has seen no answer yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records an answer's `Date`, received just now. An answer that reads
    /// behind the current estimate (another server behind a load balancer,
    /// an answer overtaken by a later one) does not move the clock back.
    pub fn observe(&self, date: SystemTime) {
        let received = Instant::now();
        let mut last = self.last.lock().expect("server clock lock");
        let behind = last.is_some_and(|(seen, at)| date < seen + received.duration_since(at));
        if !behind {
            *last = Some((date, received));
        }
    }

    /// The server's time now, or `None` before the first answer.
    pub fn now(&self) -> Option<SystemTime> {
        let last = *self.last.lock().expect("server clock lock");
        last.map(|(date, at)| date + at.elapsed())
    }

    /// How long ago `then` was on the server's clock (zero if it is in the
    /// future), or `None` before the first answer.
    pub fn age_of(&self, then: SystemTime) -> Option<Duration> {
        self.now()
            .map(|now| now.duration_since(then).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knows_nothing_before_an_answer() {
        assert_eq!(ServerClock::new().now(), None);
    }

    #[test]
    fn runs_on_from_the_last_date_and_never_back() {
        let clock = ServerClock::new();
        let date = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        clock.observe(date);
        let now = clock.now().unwrap();
        assert!(now >= date && now < date + Duration::from_secs(1));
        clock.observe(date - Duration::from_secs(3600));
        assert!(
            clock.now().unwrap() >= date,
            "an older Date moved the clock back"
        );
        clock.observe(date + Duration::from_secs(60));
        assert!(clock.now().unwrap() >= date + Duration::from_secs(60));
        assert_eq!(
            clock.age_of(date + Duration::from_secs(3600)),
            Some(Duration::ZERO)
        );
    }
}
