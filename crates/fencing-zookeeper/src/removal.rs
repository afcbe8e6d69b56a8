//! [`TokenIssuer::remove_idle`](fencing_core::TokenIssuer::remove_idle):
//! deleting an idle resource's znode and its keeper, with `token=czxid`
//! only, under a prefix that such an issuer made.
//!
//! Why it cannot send a token back: a token is the lock node's `czxid`
//! plus the resource znode's floor offset. The czxid is the zxid of the
//! creating transaction, ensemble-wide and only rising, so a lock node
//! created under a resource znode made again is above every lock node
//! created under the one removed. The offset would be lost with the znode,
//! so a znode that has one is kept ([`Removal::Floored`]). With
//! `token=cversion` the token counts the znode's child changes, which
//! start again at 0: refused by name. So is a prefix that a
//! `token=cversion` issuer may have used (one without
//! [`CZXID_MARK`]), since its resource names may hold such counts.
//!
//! Idle is judged by the server: every grant writes the resource znode's
//! data in its create's transaction, so the znode's `mtime` is its last
//! grant's time, by the leader's clock; "now" is the `mtime` that a write
//! of the keeper's data gets from the same clock. (Releases and renewals
//! change no time ZooKeeper keeps: grants alone count.) A znode with a
//! child but the keeper (a lock node, ours or another client's, or a
//! nested resource's znode) is in use.
//!
//! The removal is one transaction: the keeper, then the resource znode at
//! the data version that was judged idle (a grant since changed it:
//! `BadVersion`; a lock node created since: `NotEmpty`; either keeps
//! both), and a write of the prefix znode's data, whose version every
//! create and floor checks against the one they read the resource znode
//! with ([`crate::queue::read_resource`]): a process paused between its
//! read and its write, across a removal and the znode made again, is
//! refused and reads again rather than writing what the old znode held.
//!
//! The prefix znode (and a znode between it and a nested resource's)
//! lets nobody delete its children, and a transaction cannot change an
//! ACL: the removal adds DELETE to the parent's ACL just before, and takes
//! what it added away again just after, each at the ACL version it read.
//! A DELETE that a crash in between left there is taken away by the next
//! issuer that connects (`make_prefix`), and `fence doctor` reports it
//! meanwhile.

use std::time::Duration;

use fencing_core::adapter::{Call, check_idle};
use fencing_core::{Error, Removal, Result};
use zookeeper_client as zk;

use crate::client::{Rpc, ZkResult};
use crate::error::{NAME, map_error};
use crate::floor::parse_offset;
use crate::keys::{CZXID_MARK, KEEPER, Znode, keeper_path};
use crate::token::TokenSource;

/// How often a removal starts again after the parent's ACL changed under
/// it (another removal, an issuer connecting), before giving up
/// (retryable).
const ATTEMPTS: u32 = 5;

pub(crate) async fn remove_idle(
    rpc: &Rpc,
    znode: Znode,
    resource: &str,
    idle_for: Duration,
) -> Result<Removal> {
    check_idle(idle_for)?;
    if znode.source == TokenSource::ParentCversion {
        return Err(Error::UnsafeConfiguration {
            backend: NAME,
            reason: format!(
                "{resource:?} is not removed: its tokens are its znode's cversion (TokenSource::ParentCversion), \
                 which would start again at 0 with the znode; only a czxid issuer removes idle resources"
            ),
        });
    }
    let client = rpc.live_main().await?;
    let idle_millis = i64::try_from(idle_for.as_millis()).unwrap_or(i64::MAX);
    for _ in 0..ATTEMPTS {
        match remove_once(rpc, &client, &znode, resource, idle_millis).await? {
            Some(removal) => return Ok(removal),
            None => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    Err(Error::Contention {
        key: znode.dir,
        attempts: ATTEMPTS,
    })
}

/// One try; `None` when the parent's ACL changed under it.
async fn remove_once(
    rpc: &Rpc,
    client: &zk::Client,
    znode: &Znode,
    resource: &str,
    idle_millis: i64,
) -> Result<Option<Removal>> {
    let (prefix, dir) = (znode.prefix.as_str(), znode.dir.as_str());
    let keeper = keeper_path(dir);
    let read = |e| map_error(e, Call::read("read the resource znode"));
    let mut reader = client.new_multi_reader();
    reader.add_get_data(prefix).map_err(read)?;
    reader.add_get_data(dir).map_err(read)?;
    reader.add_get_children(dir).map_err(read)?;
    let mut results = rpc.timed(reader.commit()).await.map_err(read)?.into_iter();
    let (mark, data, stat, children) = match (results.next(), results.next(), results.next()) {
        (
            Some(zk::MultiReadResult::Data { data: mark, .. }),
            Some(zk::MultiReadResult::Data { data, stat }),
            Some(zk::MultiReadResult::Children { children }),
        ) => (mark, data, stat, children),
        (
            Some(zk::MultiReadResult::Data { data: mark, .. }),
            Some(zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            }),
            _,
        ) => {
            check_mark(&mark, prefix, resource)?;
            return Ok(Some(Removal::Absent));
        }
        (Some(zk::MultiReadResult::Error { err }), _, _)
        | (_, Some(zk::MultiReadResult::Error { err }), _)
        | (_, _, Some(zk::MultiReadResult::Error { err })) => return Err(read(err)),
        _ => return Err(Error::backend(NAME, true, format!("could not read {dir}"))),
    };
    check_mark(&mark, prefix, resource)?;
    if children.iter().any(|name| name != KEEPER) {
        return Ok(Some(Removal::InUse));
    }
    if !children.iter().any(|name| name == KEEPER) {
        // Another client's lock path that we never granted on: nothing
        // of ours is there.
        return Ok(Some(Removal::Absent));
    }
    if parse_offset(&data).map_err(read)? != 0 {
        return Ok(Some(Removal::Floored));
    }
    // The leader's clock, as the grants' writes read it.
    let now = match rpc.timed(client.set_data(&keeper, b"", None)).await {
        Ok(now) => now,
        // Removed since the read.
        Err(zk::Error::NoNode) => return Ok(Some(Removal::Absent)),
        Err(e) => return Err(map_error(e, Call::idempotent("read the server's clock"))),
    };
    if now.mtime.saturating_sub(stat.mtime) < idle_millis {
        return Ok(Some(Removal::InUse));
    }
    let parent = dir.rsplit_once('/').map_or(prefix, |(parent, _)| parent);
    let Some(opened) = allow_delete(rpc, client, parent).await? else {
        return Ok(None);
    };
    let removal = async {
        let mut writer = client.new_multi_writer();
        writer.add_delete(&keeper, None)?;
        writer.add_delete(dir, Some(stat.version))?;
        // Counts the removal for every write that read the znode before it.
        writer.add_set_data(prefix, CZXID_MARK, None)?;
        writer.commit().await.map_err(zk::Error::from)
    };
    let removed = rpc.timed(removal).await;
    if let Opened::Added { acls, version } = opened {
        restore_acl(rpc, client, parent, &acls, version).await;
    }
    match removed {
        Ok(_) => {
            rpc.remember_resource(dir, None);
            Ok(Some(Removal::Removed))
        }
        // A grant came since the read (it wrote the znode's data), or a
        // lock node or a nested resource's znode was created under it.
        Err(zk::Error::BadVersion | zk::Error::NotEmpty) => Ok(Some(Removal::InUse)),
        // Another removal came first.
        Err(zk::Error::NoNode) => Ok(Some(Removal::Absent)),
        // DELETE was taken away again (another removal, an issuer
        // connecting) before the transaction: once more.
        Err(zk::Error::NoAuth) => Ok(None),
        // Judged again if asked again: a lost answer is harmless.
        Err(e) => Err(map_error(e, Call::idempotent("remove the resource znode"))),
    }
}

/// Refuses a prefix without [`CZXID_MARK`] (made by an earlier release,
/// or by a `token=cversion` issuer), naming why.
fn check_mark(mark: &[u8], prefix: &str, resource: &str) -> Result<()> {
    if mark == CZXID_MARK {
        return Ok(());
    }
    Err(Error::UnsafeConfiguration {
        backend: NAME,
        reason: format!(
            "{resource:?} is not removed: {prefix} was not made by a czxid issuer of this release (its \
             data is not {:?}), so a cversion issuer (TokenSource::ParentCversion) may have granted on \
             the name, and a removal would start that count again at 0; idle resources are removed \
             under a prefix that a czxid issuer made",
            String::from_utf8_lossy(CZXID_MARK)
        ),
    })
}

/// What [`allow_delete`] did to the parent's ACL.
enum Opened {
    /// It let someone delete already (another removal's, or a resource
    /// znode's own ACL): left as it was.
    Already,
    /// DELETE was added, from `acls`; the ACL is now at `version`.
    Added { acls: Vec<zk::Acl>, version: i32 },
}

/// Adds DELETE to every entry of `parent`'s ACL (at the ACL version
/// read); `None` if another change came first.
async fn allow_delete(rpc: &Rpc, client: &zk::Client, parent: &str) -> Result<Option<Opened>> {
    let failed = |e| map_error(e, Call::idempotent("let the resource znode be deleted"));
    let (acls, stat) = rpc.timed(client.get_acl(parent)).await.map_err(failed)?;
    if acls
        .iter()
        .any(|a| a.permission().has(zk::Permission::DELETE))
    {
        return Ok(Some(Opened::Already));
    }
    let opened: Vec<zk::Acl> = acls
        .iter()
        .map(|a| zk::Acl::new(a.permission() | zk::Permission::DELETE, a.auth_id().clone()))
        .collect();
    match rpc
        .timed(client.set_acl(parent, &opened, Some(stat.aversion)))
        .await
    {
        Ok(stat) => Ok(Some(Opened::Added {
            acls,
            version: stat.aversion,
        })),
        Err(zk::Error::BadVersion) => Ok(None),
        Err(e) => Err(failed(e)),
    }
}

/// Puts back the ACL [`allow_delete`] changed, if nothing changed it
/// since (`BadVersion`: another issuer took DELETE away already, or
/// another removal is using it and puts back its own).
async fn restore_acl(rpc: &Rpc, client: &zk::Client, parent: &str, acls: &[zk::Acl], version: i32) {
    let restored: ZkResult<_> = rpc.timed(client.set_acl(parent, acls, Some(version))).await;
    match restored {
        Ok(_) | Err(zk::Error::BadVersion) => {}
        Err(e) => tracing::warn!(
            parent,
            error = %e,
            "could not take DELETE off the ACL again after a removal: the next issuer to connect does"
        ),
    }
}
