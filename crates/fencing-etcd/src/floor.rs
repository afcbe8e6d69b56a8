//! Floors: an offset per resource, added to every create revision, so that
//! a migration can start a resource's tokens above anything granted before.

use etcd_client::{Compare, CompareOp, GetOptions, GetResponse, KeyValue, Txn, TxnOp};
use fencing_core::adapter::Call;
use fencing_core::{Error, FencingToken, Result};

use crate::client::Rpc;
use crate::error::{Failure, NAME, map_error};
use crate::keys::{Keys, Layout};

/// The largest floor offset [`raise`] writes (any etcd revision plus it
/// still fits a token).
pub(crate) const MAX_OFFSET: u64 = FencingToken::MAX_FLOOR_OFFSET;

/// How often a floor write may lose the race for the floor key.
const ATTEMPTS: u32 = 20;

/// A token: the create revision plus the resource's floor offset
/// (checked for room when the key is created). etcd revisions start at 1
/// and never go negative.
pub(crate) fn token_of(revision: i64, offset: u64) -> FencingToken {
    FencingToken::new(u64::try_from(revision).unwrap_or(0).saturating_add(offset))
}

/// The floor offset stored at a floor key: 0 if absent.
pub(crate) fn parse_floor(response: Option<&GetResponse>) -> Result<u64> {
    let Some(kv) = response.and_then(|r| r.kvs().first()) else {
        return Ok(0);
    };
    kv.value_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            Error::backend(
                NAME,
                false,
                format!(
                    "floor key {:?} holds no number",
                    String::from_utf8_lossy(kv.key())
                ),
            )
        })
}

/// The offset of a key created at `revision` (the floor read in its
/// transaction), checked for room.
///
/// # Errors
/// As [`parse_floor`]; [`Error::TokenOutOfRange`] if the token would not
/// fit: [`raise`] keeps offsets at most [`MAX_OFFSET`], so only an offset
/// an older version wrote can do that.
pub(crate) fn offset_at(revision: i64, floor: Option<&GetResponse>) -> Result<u64> {
    let offset = parse_floor(floor)?;
    if u64::try_from(revision)
        .ok()
        .and_then(|r| r.checked_add(offset))
        .is_none()
    {
        return Err(Error::TokenOutOfRange {
            token: FencingToken::new(offset),
            max: FencingToken::new(MAX_OFFSET),
        });
    }
    Ok(offset)
}

/// The resource's floor offset and its lock keys (as `options` select
/// them), read in one transaction.
pub(crate) async fn floor_and_keys(
    rpc: &Rpc,
    keys: &Keys,
    resource: &str,
    options: GetOptions,
) -> std::result::Result<(u64, Vec<KeyValue>), Failure> {
    let txn = Txn::new().and_then([
        TxnOp::get(keys.floor_key(resource), None),
        TxnOp::get(keys.dir(resource), Some(options)),
    ]);
    let response = rpc.txn(txn).await?;
    let mut gets = crate::client::gets(&response);
    let (floor, mut found) = (gets.next(), gets.next());
    let offset = parse_floor(floor.as_ref())
        .map_err(|e| Failure::Etcd(etcd_client::Error::InvalidArgs(e.to_string())))?;
    Ok((
        offset,
        found
            .as_mut()
            .map(GetResponse::take_kvs)
            .unwrap_or_default(),
    ))
}

/// [`TokenIssuer::raise_floor`](fencing_core::TokenIssuer::raise_floor):
/// sets the offset to `floor - current revision` if that is more, only
/// while the resource is free (no holder, nobody queued; checked in the
/// same transaction), so every live key carries the offset it was created
/// with.
///
/// A queue's range also holds the keys of the resources below it
/// (`{resource}/…`), which do not make it busy, so the write is not on an
/// empty range but on a range unchanged since the read that found none of
/// the resource's keys: a key created since (of any resource below) makes
/// it read again.
pub(crate) async fn raise(
    rpc: &Rpc,
    keys: &Keys,
    resource: &str,
    floor: FencingToken,
) -> Result<()> {
    keys.check(resource)?;
    let floor_key = keys.floor_key(resource);
    let dir = keys.dir(resource);
    for _ in 0..ATTEMPTS {
        let read = Txn::new().and_then([
            TxnOp::get(floor_key.clone(), None),
            TxnOp::get(
                dir.clone(),
                Some(keys.all(GetOptions::new().with_keys_only())),
            ),
        ]);
        let response = rpc
            .txn(read)
            .await
            .map_err(|e| map_error(e, Call::read("read the floor")))?;
        let seen = response.header().map_or(0, |h| h.revision());
        let mut gets = crate::client::gets(&response);
        let (current, found) = (gets.next(), gets.next());
        let offset = parse_floor(current.as_ref())?;
        let version = current
            .as_ref()
            .and_then(|r| r.kvs().first())
            .map_or(0, KeyValue::mod_revision);
        if found.is_some_and(|f| keys.own(resource, f.kvs()).next().is_some()) {
            return Err(Error::busy(resource, "raise_floor"));
        }
        let revision = u64::try_from(seen).unwrap_or(0);
        let Some(needed) = floor.floor_offset(revision, offset)? else {
            return Ok(());
        };
        let still_free = match keys.layout() {
            Layout::Queue => {
                Compare::mod_revision(dir.clone(), CompareOp::Less, seen + 1).with_prefix()
            }
            Layout::SingleKey => keys.free(resource),
        };
        let txn = Txn::new()
            .when([
                still_free,
                Compare::mod_revision(floor_key.clone(), CompareOp::Equal, version),
            ])
            .and_then([TxnOp::put(floor_key.clone(), needed.to_string(), None)]);
        let response = rpc
            .txn(txn)
            .await
            .map_err(|e| map_error(e, Call::write("raise the floor")))?;
        if response.succeeded() {
            return Ok(());
        }
        // A key or the floor changed since the read: read again.
    }
    Err(Error::Contention {
        key: floor_key,
        attempts: ATTEMPTS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_revision_plus_the_largest_offset_fits() {
        assert_eq!(token_of(i64::MAX, MAX_OFFSET), FencingToken::new(u64::MAX));
        assert!(
            u64::try_from(i64::MAX)
                .unwrap()
                .checked_add(MAX_OFFSET)
                .is_some()
        );
    }
}
