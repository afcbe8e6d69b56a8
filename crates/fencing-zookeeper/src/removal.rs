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
//! `token=cversion` issuer may have used (one without [`CZXID_MARK`]),
//! since its resource names may hold such counts.
//!
//! Idle is judged by the server: every grant of ours writes the resource
//! znode's data in its create's transaction, so the znode's `mtime` is its
//! last grant's time, by the leader's clock; "now" is the `mtime` that a
//! write of the keeper's data gets from the same clock. (Releases and
//! renewals change no time ZooKeeper keeps, nor do another client's
//! grants: ours alone count. A znode with a child but the keeper, a lock
//! node of ours or another client's or a nested resource's znode, is in
//! use.)
//!
//! The removal is one transaction: the keeper, the resource znode at the
//! data version judged idle (a grant since changed it: `BadVersion`; a
//! lock node created since: `NotEmpty`; either keeps both), and a write
//! of the prefix znode's data at the version read with the resource
//! znode. That version counts removals, and every create and floor checks
//! it too ([`Rpc::read_resource`]): a process paused between its
//! read and its write (a create, a floor, another removal), across a
//! removal and the znode made again at the same version, is refused and
//! reads again rather than acting on the znode it read. The prefix has a
//! keeper of its own, so it is never empty, never deleted, and its version
//! never starts again.
//!
//! Only names directly under the prefix are removed: a nested name's
//! parent (`{prefix}/jobs` for `jobs/a`) may be another lock's znode, whose
//! ACL a removal would have to open. The prefix lets nobody delete its
//! children, and a transaction cannot change an ACL: the removal adds
//! DELETE to our entries of the prefix's ACL just before its transaction
//! and takes it away again just after, whatever the transaction answered
//! (in a task of its own if the call is dropped). Meanwhile our identity
//! (anyone, without credentials) can delete the prefix's empty resource
//! znodes, floored ones included: do not `deleteall` under the prefix
//! while a sweep runs. A DELETE that a crash left there goes with the next
//! removal, or when an issuer connects. Removals in one process take
//! turns ([`Rpc::removal_turn`]).

use std::time::Duration;

use fencing_core::adapter::{Call, check_idle};
use fencing_core::{Error, Removal, Result};
use zookeeper_client as zk;

use crate::access::prefix_permissions;
use crate::client::{ResourceRead, Rpc};
use crate::error::{NAME, map_error};
use crate::floor::parse_offset;
use crate::keys::{CZXID_MARK, KEEPER, Znode, keeper_path};
use crate::token::TokenSource;

/// How often a removal judges again after its transaction was refused
/// for something other than the resource (another process's removal, an
/// ACL changed under it), before giving up (retryable).
const ATTEMPTS: u32 = 10;

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
    if znode.dir.rsplit_once('/').map(|(parent, _)| parent) != Some(znode.prefix.as_str()) {
        return Err(Error::UnsafeConfiguration {
            backend: NAME,
            reason: format!(
                "{resource:?} is not removed: only names directly under the prefix {} are (a nested \
                 name's parent may be another lock's znode, whose ACL a removal would have to open)",
                znode.prefix
            ),
        });
    }
    let client = rpc.live_main().await?;
    let idle_millis = i64::try_from(idle_for.as_millis()).unwrap_or(i64::MAX);
    // One at a time in this process: each changes the prefix's version and
    // its ACL, which would refuse the others' transactions.
    let _turn = rpc.removal_turn().await;
    for _ in 0..ATTEMPTS {
        let idle = match judge(rpc, &client, &znode, resource, idle_millis).await? {
            Judged::Kept(removal) => return Ok(removal),
            Judged::Idle(idle) => idle,
        };
        if let Removed::Done(removal) = remove(rpc, &client, &znode, &idle).await? {
            return Ok(removal);
        }
        let pause = 10 + rand::random::<u64>() % 40;
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    Err(Error::Contention {
        key: znode.dir,
        attempts: ATTEMPTS,
    })
}

/// What [`judge`] found.
pub(crate) enum Judged {
    /// Nothing to remove, or kept: the answer.
    Kept(Removal),
    /// Idle: to remove at these versions.
    Idle(Idle),
}

/// A resource znode judged idle, and the versions it was read at.
pub(crate) struct Idle {
    version: i32,
    prefix_version: i32,
}

/// Reads the resource znode (and the prefix's mark and version in the
/// same request) and judges it.
pub(crate) async fn judge(
    rpc: &Rpc,
    client: &zk::Client,
    znode: &Znode,
    resource: &str,
    idle_millis: i64,
) -> Result<Judged> {
    let (prefix, dir) = (znode.prefix.as_str(), znode.dir.as_str());
    let keeper = keeper_path(dir);
    let read = |e| map_error(e, Call::read("read the resource znode"));
    let snapshot = rpc.read_resource(client, znode, true).await.map_err(read)?;
    check_mark(&snapshot.mark, prefix, resource)?;
    let Some(ResourceRead {
        data,
        stat,
        children,
    }) = snapshot.resource
    else {
        return Ok(Judged::Kept(Removal::Absent));
    };
    if children.iter().any(|name| name != KEEPER) {
        return Ok(Judged::Kept(Removal::InUse));
    }
    if !children.iter().any(|name| name == KEEPER) {
        // Another client's lock path that we never granted on: nothing
        // of ours is there.
        return Ok(Judged::Kept(Removal::Absent));
    }
    let offset =
        parse_offset(&data).map_err(|e| map_error(e, Call::read("read the floor offset")))?;
    if offset != 0 {
        return Ok(Judged::Kept(Removal::Floored));
    }
    // The leader's clock, as the grants' writes read it.
    let now = match rpc.timed(client.set_data(&keeper, b"", None)).await {
        Ok(now) => now,
        // Removed since the read.
        Err(zk::Error::NoNode) => return Ok(Judged::Kept(Removal::Absent)),
        Err(e) => return Err(map_error(e, Call::idempotent("read the server's clock"))),
    };
    if now.mtime.saturating_sub(stat.mtime) < idle_millis {
        return Ok(Judged::Kept(Removal::InUse));
    }
    Ok(Judged::Idle(Idle {
        version: stat.version,
        prefix_version: snapshot.prefix_version,
    }))
}

/// What [`remove`] did.
pub(crate) enum Removed {
    Done(Removal),
    /// Refused for something other than the resource (another process's
    /// removal, an ACL changed under it): judge again.
    Again,
}

/// The removal's transaction for a znode [`judge`] found idle, with
/// DELETE on the prefix's ACL around it.
pub(crate) async fn remove(
    rpc: &Rpc,
    client: &zk::Client,
    znode: &Znode,
    idle: &Idle,
) -> Result<Removed> {
    let (prefix, dir) = (znode.prefix.as_str(), znode.dir.as_str());
    let keeper = keeper_path(dir);
    let closing = Closing::new(client.clone(), prefix, rpc.operation_timeout());
    match allow_delete(rpc, client, prefix).await {
        Ok(true) => {}
        Ok(false) => {
            closing.close().await;
            return Ok(Removed::Again);
        }
        Err(e) => {
            // The change may have been applied: take it away.
            closing.close().await;
            return Err(e);
        }
    }
    let removal = async {
        let mut writer = client.new_multi_writer();
        writer.add_delete(&keeper, None)?;
        writer.add_delete(dir, Some(idle.version))?;
        // Counts the removal for every write that read the znode before it
        // (and fails if another removal came since this one's read).
        writer.add_set_data(prefix, CZXID_MARK, Some(idle.prefix_version))?;
        writer.commit().await
    };
    let removed = match tokio::time::timeout(rpc.operation_timeout(), removal).await {
        Ok(done) => done.map_err(Failed::from),
        Err(_) => Err(Failed::Request(zk::Error::Timeout)),
    };
    closing.close().await;
    match removed {
        Ok(_) => {
            rpc.remember_resource(dir, None);
            Ok(Removed::Done(Removal::Removed))
        }
        // A grant came since the read (it wrote the znode's data), or a
        // lock node or a nested resource's znode was created under it (or
        // under the keeper, by another client).
        Err(Failed::At(0 | 1, zk::Error::BadVersion | zk::Error::NotEmpty)) => {
            Ok(Removed::Done(Removal::InUse))
        }
        // Another removal came since the read (the prefix's version), or
        // removed this one (the keeper, the znode), or DELETE was taken
        // away again (another process's removal, an issuer connecting)
        // before the transaction: judge again.
        Err(Failed::At(_, zk::Error::BadVersion | zk::Error::NoNode | zk::Error::NoAuth)) => {
            Ok(Removed::Again)
        }
        // Judged again if asked again: a lost answer is harmless.
        Err(Failed::At(_, e) | Failed::Request(e)) => {
            Err(map_error(e, Call::idempotent("remove the resource znode")))
        }
    }
}

/// A transaction's failure: the operation at an index, or the request.
enum Failed {
    At(usize, zk::Error),
    Request(zk::Error),
}

impl From<zk::MultiWriteError> for Failed {
    fn from(e: zk::MultiWriteError) -> Self {
        match e {
            zk::MultiWriteError::OperationFailed { index, source } => Self::At(index, source),
            zk::MultiWriteError::RequestFailed { source } => Self::Request(source),
        }
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

/// Whether an ACL entry is one the prefix was made with (every
/// permission but DELETE, or all of them): ours, not another's entry that
/// a removal has no business changing.
fn ours(acl: &zk::Acl) -> bool {
    acl.permission() & prefix_permissions() == prefix_permissions()
}

/// Adds DELETE to our entries of the prefix's ACL (at the ACL version
/// read): `true` once one lets us delete, `false` if another change came
/// first.
async fn allow_delete(rpc: &Rpc, client: &zk::Client, prefix: &str) -> Result<bool> {
    let failed = |e| map_error(e, Call::idempotent("let the resource znode be deleted"));
    let (acls, stat) = rpc.timed(client.get_acl(prefix)).await.map_err(failed)?;
    if !acls.iter().any(ours) {
        // Another identity's prefix: nothing of ours to open.
        return Err(failed(zk::Error::NoAuth));
    }
    if acls
        .iter()
        .any(|a| ours(a) && a.permission().has(zk::Permission::DELETE))
    {
        return Ok(true);
    }
    let opened: Vec<zk::Acl> = acls
        .iter()
        .map(|a| match ours(a) {
            true => zk::Acl::new(a.permission() | zk::Permission::DELETE, a.auth_id().clone()),
            false => a.clone(),
        })
        .collect();
    match rpc
        .timed(client.set_acl(prefix, &opened, Some(stat.aversion)))
        .await
    {
        Ok(_) => Ok(true),
        Err(zk::Error::BadVersion) => Ok(false),
        Err(e) => Err(failed(e)),
    }
}

/// Takes DELETE off a parent's ACL again: awaited by [`Closing::close`],
/// or in a task of its own if the removal is dropped before.
struct Closing {
    client: Option<zk::Client>,
    parent: String,
    timeout: Duration,
}

impl Closing {
    fn new(client: zk::Client, parent: &str, timeout: Duration) -> Self {
        Self {
            client: Some(client),
            parent: parent.to_owned(),
            timeout,
        }
    }

    async fn close(mut self) {
        if let Some(client) = self.client.take() {
            close(client, std::mem::take(&mut self.parent), self.timeout).await;
        }
    }
}

impl Drop for Closing {
    fn drop(&mut self) {
        if let Some(client) = self.client.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(close(
                client,
                std::mem::take(&mut self.parent),
                self.timeout,
            ));
        }
    }
}

/// Takes DELETE off every entry of `parent`'s ACL, at the ACL version
/// read (again after another change came first).
async fn close(client: zk::Client, parent: String, timeout: Duration) {
    for _ in 0..ATTEMPTS {
        let (acls, stat) = match tokio::time::timeout(timeout, client.get_acl(&parent)).await {
            Ok(Ok(found)) => found,
            Ok(Err(zk::Error::NoNode)) => return,
            failed => {
                tracing::warn!(
                    parent,
                    ?failed,
                    "could not read the ACL to take DELETE off it again"
                );
                return;
            }
        };
        if !acls
            .iter()
            .any(|a| ours(a) && a.permission().has(zk::Permission::DELETE))
        {
            return;
        }
        let closed: Vec<zk::Acl> = acls
            .iter()
            .map(|a| match ours(a) {
                true => zk::Acl::new(a.permission() & prefix_permissions(), a.auth_id().clone()),
                false => a.clone(),
            })
            .collect();
        let closing = client.set_acl(&parent, &closed, Some(stat.aversion));
        match tokio::time::timeout(timeout, closing).await {
            Ok(Ok(_)) => return,
            Ok(Err(zk::Error::BadVersion)) => {}
            failed => {
                tracing::warn!(
                    parent,
                    ?failed,
                    "could not take DELETE off the ACL again after a removal: the next removal under it does"
                );
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use fencing_core::tls::TlsOptions;
    use fencing_core::{FencingToken, TokenIssuer};
    use fencing_harness::env::ZOOKEEPER;

    use super::*;
    use crate::access::Access;
    use crate::issuer::ZkIssuer;

    /// Two sweepers: one judges a name idle and pauses before its
    /// transaction; the other removes the name, and a floor makes its
    /// znode again at the version the first judged. The first one's
    /// transaction must remove nothing (the prefix's version moved), and
    /// the floor stays.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_removal_paused_across_another_and_a_floor_removes_nothing() {
        if ZOOKEEPER.skipped() {
            return;
        }
        let prefix = format!("/fencing-test/{}", fencing_testkit::unique_prefix());
        let access = Access::load(&TlsOptions::new(), None).expect("access");
        let issuer = ZkIssuer::open(&ZOOKEEPER.endpoint(), access, &prefix, TokenSource::Czxid)
            .await
            .unwrap_or_else(|e| ZOOKEEPER.unavailable(&e));
        let resource = "paused-sweep";
        let ttl = Duration::from_secs(10);
        let lease = fencing_testkit::issuer::grant(&issuer, resource, ttl).await;
        issuer.release(&lease).await.expect("release");
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let (rpc, client) = (issuer.rpc(), issuer.client());
        let znode = issuer.znode(resource).expect("znode");
        let Judged::Idle(idle) = judge(rpc, &client, &znode, resource, 1000)
            .await
            .expect("judge")
        else {
            panic!("not judged idle");
        };
        let other = issuer
            .remove_idle(resource, Duration::from_secs(1))
            .await
            .expect("the other removal");
        assert_eq!(other, Removal::Removed);
        let floor = FencingToken::new(1 << 62);
        issuer.raise_floor(resource, floor).await.expect("floor");
        let (data, stat) = client.get_data(&znode.dir).await.expect("read");
        assert_eq!(
            stat.version, idle.version,
            "the test needs the version judged"
        );
        let paused = remove(rpc, &client, &znode, &idle).await.expect("remove");
        assert!(
            matches!(paused, Removed::Again),
            "the paused removal went through"
        );
        let (kept, _) = client.get_data(&znode.dir).await.expect("still there");
        assert_eq!(kept, data);
        let next = fencing_testkit::issuer::grant(&issuer, resource, ttl).await;
        assert!(
            next.token() > floor,
            "{} under the floor {floor}",
            next.token()
        );
        issuer.release(&next).await.expect("release");
    }
}
