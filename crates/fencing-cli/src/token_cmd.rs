//! `token`: the fencing token of a lock another lock client holds
//! (`etcdctl lock`, python-etcd3, Curator, kazoo), in the issuer's own
//! order.

use std::process::ExitCode;

use clap::Args;
use fencing_tokens::FencingToken;

use crate::lease_cmds::Target;
use crate::output::LeaseView;
use crate::{CliResult, backends, exit};

/// `token`: the token of a lock that another lock client holds.
#[derive(Debug, Args)]
pub(crate) struct TokenArgs {
    #[command(flatten)]
    target: Target,
    /// The lock key or node the other client holds: `etcdctl lock`'s
    /// `$ETCD_LOCK_KEY`, python-etcd3's `/locks/NAME@LEASE` (`layout=single-key`;
    /// its lease id in hex: `f"{lock.key}@{lock.lease.id:x}"`),
    /// a Curator or kazoo lock node's path or name. The token is printed
    /// only while that is the holder. Required: without it the token of
    /// whoever holds the resource, another client's, would be printed.
    #[arg(long, value_name = "KEY")]
    key: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Prints the fencing token of the resource's holder, for a lock client of
/// another kind (`etcdctl lock`, python-etcd3, Curator, kazoo) to carry to
/// a fenced store:
/// the token its grant has in the issuer's own order, so it is refused
/// there once a later holder, of either kind, has written.
pub(crate) async fn token(args: TokenArgs) -> CliResult {
    let resource = &args.target.resource;
    let issuer = backends::open_issuer(&args.target.issuer).await?;
    let Some(holding) = issuer.holder(resource).await? else {
        eprintln!("fence: nobody holds {resource:?}: a token is only given to its holder");
        return Ok(ExitCode::from(exit::LEASE_LOST));
    };
    // Before the key: such a holder's key is not one `holds` can name
    // (a Redisson lock's, redis-py's), and no token goes out either way.
    if holding.token == FencingToken::ZERO {
        eprintln!(
            "fence: {resource:?} is held by {}, whose lock keeps nothing this issuer can order \
             it by (a lock with no counter, as redis-py's, redlock's and Redisson's RLock's, whose \
             RFencedLock has its own token; or a ZooKeeper issuer with token_source=cversion): \
             no token is safe to give it; fence such writers with this issuer's own leases",
            holding.holder
        );
        return Ok(ExitCode::from(exit::UNSAFE));
    }
    if !holds(holding.holder.as_str(), &args.key) {
        // Not the holder's token: the caller may be the holder before it,
        // paused past its lease, and must not learn its successor's token.
        eprintln!(
            "fence: {:?} does not hold {resource:?}: {} does",
            args.key, holding.holder
        );
        return Ok(ExitCode::from(exit::LEASE_LOST));
    }
    if args.json {
        LeaseView::of_holding(resource, &holding).print(true);
    } else {
        out!("{}", holding.token);
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether the holder id names the lock `key`: a foreign holder is
/// `foreign:` and its key (etcd) or node name (ZooKeeper, which a client
/// may give as a path).
fn holds(holder: &str, key: &str) -> bool {
    holder.strip_prefix("foreign:").is_some_and(|name| {
        let key = key.trim_end_matches('/');
        name == key || key.rsplit('/').next() == Some(name)
    })
}

#[cfg(test)]
mod tests {
    use super::holds;

    #[test]
    fn a_key_holds_when_it_names_the_foreign_holder() {
        assert!(holds(
            "foreign:fencing/R/694d9a1b2c",
            "fencing/R/694d9a1b2c"
        ));
        assert!(holds(
            "foreign:_c_uuid-lock-0000000003",
            "/fencing/R/_c_uuid-lock-0000000003"
        ));
        assert!(holds(
            "foreign:abc__lock__0000000001",
            "abc__lock__0000000001"
        ));
        assert!(!holds("foreign:fencing/R/694d", "fencing/R/694e"));
        assert!(!holds("foreign:fencing/R/694d", "694d"));
        assert!(
            !holds("h-12", "h-12"),
            "one of our own leases is no foreign key"
        );
    }
}
