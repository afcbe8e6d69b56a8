//! Where a lease's fencing token comes from, and the resource's floor
//! offset added to it.

use fencing_core::{Error, FencingToken, Result};

use crate::error::NAME;

/// Where a lease's fencing token comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TokenSource {
    /// The lock znode's `czxid`: the zxid of the transaction that created
    /// it, `epoch << 32 | counter`. Cluster-wide and monotonic, also
    /// across leader elections (a new leader starts a higher epoch). Shared
    /// by every resource: tokens of one resource jump by whatever happened
    /// elsewhere in between, and they are large (above 2³²). Right for
    /// almost everyone; the default.
    #[default]
    Czxid,
    /// The resource znode's `cversion` right after our lock node was
    /// created (read in the same transaction): it counts child creates
    /// *and* deletes of that one znode, so tokens are small and per
    /// resource; they advance by 2 per uncontended grant (our create, our
    /// delete). Right when a store keeps tokens in a narrow column or a
    /// person reads them. It resets if the resource znode is deleted and
    /// recreated, so nobody may delete resource znodes (the prefix znode's
    /// ACL lets nobody, and `verify` checks it); it is a signed 32-bit
    /// counter, and a wrapped value is refused
    /// ([`Error::UnsafeConfiguration`]) rather than let a token go
    /// backwards. (Not the sequence suffix of the node's name: on
    /// ZooKeeper 3.8 that counts creates only, and it wraps too,
    /// ZOOKEEPER-2944.) Costs one more write per acquire: the token is
    /// stored in the lock node for [`holder`](fencing_core::TokenIssuer::holder).
    ParentCversion,
}

/// The largest floor offset `raise_floor` writes (a czxid, an `i64`, or a
/// cversion, an `i32`, plus it still fits a token).
pub(crate) const MAX_OFFSET: u64 = FencingToken::MAX_FLOOR_OFFSET;

/// A token plus the resource's floor offset. It cannot overflow for an
/// offset `raise_floor` wrote (at most [`MAX_OFFSET`]); a larger one (an
/// older version, a hand edit) is refused.
pub(crate) fn with_offset(token: FencingToken, offset: u64) -> Result<FencingToken> {
    token
        .get()
        .checked_add(offset)
        .map(FencingToken::new)
        .ok_or(Error::TokenOutOfRange {
            token: FencingToken::new(offset),
            max: FencingToken::new(MAX_OFFSET),
        })
}

pub(crate) fn czxid_token(czxid: i64) -> Result<FencingToken> {
    u64::try_from(czxid)
        .map(FencingToken::new)
        .map_err(|_| Error::backend(NAME, false, format!("negative czxid {czxid}")))
}

/// The resource znode's cversion after our create; it is a signed 32-bit
/// counter, and a value that wrapped would let tokens go backwards.
pub(crate) fn cversion_token(cversion: i32) -> Result<FencingToken> {
    match u64::try_from(cversion) {
        Ok(c) if c > 0 => Ok(FencingToken::new(c)),
        _ => Err(Error::UnsafeConfiguration {
            backend: NAME,
            reason: format!(
                "the resource znode's cversion wrapped ({cversion}; a signed 32-bit counter): its tokens would go \
                 backwards; use TokenSource::Czxid or a new resource name"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_czxid_plus_the_largest_offset_fits() {
        let top = czxid_token(i64::MAX).unwrap();
        assert_eq!(
            with_offset(top, MAX_OFFSET).unwrap(),
            FencingToken::new(u64::MAX)
        );
        assert!(matches!(
            with_offset(top, MAX_OFFSET + 1),
            Err(Error::TokenOutOfRange { .. })
        ));
    }

    #[test]
    fn cversion_tokens_refuse_a_wrapped_counter() {
        assert_eq!(cversion_token(1).unwrap(), FencingToken::new(1));
        assert_eq!(
            cversion_token(i32::MAX).unwrap(),
            FencingToken::new(2_147_483_647)
        );
        assert!(matches!(
            cversion_token(i32::MIN),
            Err(Error::UnsafeConfiguration { .. })
        ));
        assert!(cversion_token(0).is_err());
    }
}
