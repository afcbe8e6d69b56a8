//! The fencing token.

use std::fmt;
use std::num::ParseIntError;
use std::str::FromStr;

use crate::Error;

/// A fencing token: a number that strictly increases with every grant of a
/// lease on a resource.
///
/// The store remembers the highest token it has accepted for a key (its
/// *mark*) and refuses writes that carry a lower one. Tokens are `u64`; a
/// backend that stores signed 64-bit integers converts with
/// [`FencingToken::to_i64`], which refuses instead of wrapping.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct FencingToken(u64);

impl FencingToken {
    /// The lowest token. Every mark starts below any issued token.
    pub const ZERO: Self = Self(0);
    /// The highest token a signed 64-bit column can hold.
    pub const MAX_I64: Self = Self(i64::MAX as u64);

    /// Wraps a raw token.
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The token for a backend that stores `BIGINT`/`i64`.
    ///
    /// # Errors
    /// [`Error::TokenOutOfRange`] when the token is above `i64::MAX`.
    pub fn to_i64(self) -> Result<i64, Error> {
        i64::try_from(self.0).map_err(|_| Error::TokenOutOfRange {
            token: self,
            max: Self::MAX_I64,
        })
    }

    /// Reads a token back from a signed 64-bit column.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a negative value, which no issuer grants.
    pub fn from_i64(value: i64) -> Result<Self, Error> {
        u64::try_from(value)
            .map(Self)
            .map_err(|_| Error::invalid_input(format!("negative fencing token {value}")))
    }

    /// The next token, or `None` at `u64::MAX`.
    pub fn checked_next(self) -> Option<Self> {
        self.0.checked_add(1).map(Self)
    }

    /// The largest offset a floor may put on a backend counter that is an
    /// `i64` (an etcd revision, a ZooKeeper zxid): any such counter plus it
    /// still fits a token, so a floor can never make a later grant overflow.
    pub const MAX_FLOOR_OFFSET: u64 = u64::MAX - i64::MAX as u64;

    /// The offset a backend counter standing at `counter` needs so that its
    /// next value plus the offset is at least this floor: `None` when
    /// `current`, the offset in force, already does.
    ///
    /// # Errors
    /// [`Error::TokenOutOfRange`] when the offset would exceed
    /// [`MAX_FLOOR_OFFSET`](Self::MAX_FLOOR_OFFSET), naming the highest
    /// floor the counter allows.
    pub fn floor_offset(self, counter: u64, current: u64) -> Result<Option<u64>, Error> {
        // The next value is above `counter`, so `floor - counter` suffices.
        let needed = self.0.saturating_sub(counter);
        if needed <= current {
            return Ok(None);
        }
        if needed > Self::MAX_FLOOR_OFFSET {
            return Err(Error::TokenOutOfRange {
                token: self,
                max: Self(counter.saturating_add(Self::MAX_FLOOR_OFFSET)),
            });
        }
        Ok(Some(needed))
    }
}

impl From<u64> for FencingToken {
    fn from(value: u64) -> Self {
        Self(value)
    }
}

impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> Self {
        token.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FencingToken({})", self.0)
    }
}

impl FromStr for FencingToken {
    type Err = ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim().parse().map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floor_offset_is_what_the_counter_lacks_and_never_overflows() {
        let floor = FencingToken::new(100);
        assert_eq!(floor.floor_offset(40, 0).unwrap(), Some(60));
        assert_eq!(floor.floor_offset(40, 60).unwrap(), None);
        assert_eq!(floor.floor_offset(150, 0).unwrap(), None);
        let top = FencingToken::new(u64::MAX);
        assert!(matches!(
            top.floor_offset(0, 0),
            Err(Error::TokenOutOfRange { max, .. }) if max.get() == FencingToken::MAX_FLOOR_OFFSET
        ));
        let counter = u64::try_from(i64::MAX).unwrap();
        assert_eq!(
            top.floor_offset(counter, 0).unwrap(),
            Some(FencingToken::MAX_FLOOR_OFFSET)
        );
    }

    #[test]
    fn i64_conversion_refuses_instead_of_wrapping() {
        assert_eq!(FencingToken::new(42).to_i64().unwrap(), 42);
        assert_eq!(FencingToken::MAX_I64.to_i64().unwrap(), i64::MAX);
        let above = FencingToken::new(i64::MAX as u64 + 1);
        match above.to_i64() {
            Err(Error::TokenOutOfRange { token, max }) => {
                assert_eq!(token, above);
                assert_eq!(max, FencingToken::MAX_I64);
            }
            other => panic!("expected TokenOutOfRange, got {other:?}"),
        }
        assert!(FencingToken::new(u64::MAX).to_i64().is_err());
        assert!(FencingToken::from_i64(-1).is_err());
        assert_eq!(FencingToken::from_i64(7).unwrap(), FencingToken::new(7));
    }

    #[test]
    fn display_and_parse_round_trip() {
        let t = FencingToken::new(u64::MAX);
        assert_eq!(t.to_string().parse::<FencingToken>().unwrap(), t);
        assert!("-3".parse::<FencingToken>().is_err());
        assert!("".parse::<FencingToken>().is_err());
        assert_eq!(FencingToken::new(u64::MAX).checked_next(), None);
    }

    #[test]
    fn tokens_order_numerically() {
        assert!(FencingToken::new(33) < FencingToken::new(34));
        assert!(FencingToken::new(9) < FencingToken::new(10));
    }
}
