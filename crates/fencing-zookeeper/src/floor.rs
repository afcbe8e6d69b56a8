//! Floors: an offset per resource, kept in the resource znode's data and
//! added to every token, so that a migration can start a resource's tokens
//! above anything granted before.

use fencing_core::adapter::Call;
use fencing_core::{Error, FencingToken, Result};
use zookeeper_client as zk;

use crate::client::{ResourceRead, Rpc, ZkResult};
use crate::error::map_error;
use crate::keys::{KEEPER, Znode};
use crate::token::TokenSource;

/// How often a write of the resource znode's data (a lock node's create,
/// which rewrites it, or a floor) may lose the race for its version to
/// other writes before giving up (retryable). Here, not in `queue`: the
/// queue depends on the floor, never the reverse.
pub(crate) const CREATE_ATTEMPTS: u32 = 50;

/// A resource znode's data: its floor offset, empty for none.
pub(crate) fn parse_offset(data: &[u8]) -> ZkResult<u64> {
    if data.is_empty() {
        return Ok(0);
    }
    std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| {
            zk::Error::UnexpectedError("a resource znode's data is not a floor offset".into())
        })
}

/// [`TokenIssuer::raise_floor`](fencing_core::TokenIssuer::raise_floor)
/// on the resource znode `dir`: the offset is written at the version of a
/// snapshot that showed no lock node, and since every create rewrites that
/// data at the version it read, the write fails if any create came in
/// between. So every live lock node carries the offset it was created
/// with, and tokens keep strictly increasing.
pub(crate) async fn raise(
    rpc: &Rpc,
    znode: Znode,
    resource: &str,
    floor: FencingToken,
) -> Result<()> {
    let client = rpc.live_main().await?;
    let (dir, source) = (znode.dir.as_str(), znode.source);
    let read = |e| map_error(e, Call::read("read the resource znode"));
    let mut made = false;
    for _ in 0..CREATE_ATTEMPTS {
        if !made {
            rpc.make_resource(&client, &znode).await?;
            made = true;
        }
        let snapshot = match rpc.read_resource(&client, &znode, true).await {
            Ok(snapshot) => snapshot,
            // The prefix is gone: make it again.
            Err(zk::Error::NoNode) => {
                made = false;
                continue;
            }
            Err(e) => return Err(read(e)),
        };
        let Some(ResourceRead {
            data,
            stat,
            children,
        }) = snapshot.resource
        else {
            // Removed as idle since it was made: make it again.
            made = false;
            continue;
        };
        // Any ephemeral child but the keeper: another client's lock node
        // holds or waits as ours do. A persistent one is the znode of a
        // resource below this one.
        for name in children.iter().filter(|name| *name != KEEPER) {
            let stat = rpc.timed(client.check_stat(&format!("{dir}/{name}"))).await;
            if stat.map_err(read)?.is_some_and(|s| s.ephemeral_owner != 0) {
                return Err(Error::busy(resource, "raise_floor"));
            }
        }
        let offset = parse_offset(&data).map_err(read)?;
        // The next create's token source is above what this snapshot shows.
        let below_next = match source {
            TokenSource::Czxid => stat.czxid.max(stat.mzxid).max(stat.pzxid),
            TokenSource::ParentCversion => i64::from(stat.cversion),
        };
        let below_next = u64::try_from(below_next).unwrap_or(0);
        let Some(needed) = floor.floor_offset(below_next, offset)? else {
            return Ok(());
        };
        // At the prefix's version too: a resource znode removed and made
        // again since the read may be back at `stat.version` with a lock
        // node in it.
        let write = async {
            let mut writer = client.new_multi_writer();
            writer.add_check_version(&znode.prefix, snapshot.prefix_version)?;
            writer.add_set_data(dir, needed.to_string().as_bytes(), Some(stat.version))?;
            writer.commit().await.map_err(zk::Error::from)
        };
        match rpc.timed(write).await {
            Ok(_) => return Ok(()),
            // A create or a removal came first: look again.
            Err(zk::Error::BadVersion) => {}
            Err(zk::Error::NoNode) => made = false,
            Err(e) => return Err(map_error(e, Call::write("write the floor"))),
        }
    }
    Err(Error::Contention {
        key: dir.to_owned(),
        attempts: CREATE_ATTEMPTS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_parse_or_are_refused() {
        assert_eq!(parse_offset(b"").unwrap(), 0);
        assert_eq!(parse_offset(b"42\n").unwrap(), 42);
        assert!(parse_offset(b"x").is_err());
    }
}
