//! ZooKeeper errors → [`fencing_core::Error`], in one place.

use fencing_core::{Call, Error};
use zookeeper_client as zk;

/// The backend name in errors.
pub(crate) const BACKEND: &str = "zookeeper";

/// Maps a failed ZooKeeper call. The only place that decides what a
/// ZooKeeper error means:
/// - `SessionExpired`, `ClientClosed` (and `NoNode`, `BadVersion` on our
///   own lock node) → [`Error::LeaseLost`] when the call was about a lease;
/// - a lost connection (`ConnectionLoss`, `Timeout`, the client's own
///   `Custom` connection failures) during a write → [`Error::OutcomeUnknown`]
///   (a created node may exist, a deleted one may be gone; either goes or
///   stays gone when its session ends);
/// - the same on a read, `NoHosts`, `Throttled`, `SessionMoved`, and
///   `SessionExpired` outside a lease → a retryable [`Error::Backend`];
/// - `BadArguments`, `InvalidAcl` → [`Error::InvalidInput`];
/// - anything else (`NodeExists` where we did not expect it, `NoAuth`, …)
///   → a [`Error::Backend`] that is not retryable.
pub(crate) fn map_error(e: zk::Error, op: Call<'_>) -> Error {
    if let Some((resource, token)) = op.lease
        && matches!(
            e,
            zk::Error::SessionExpired
                | zk::Error::ClientClosed
                | zk::Error::NoNode
                | zk::Error::BadVersion
        )
    {
        return Error::LeaseLost {
            resource: resource.to_owned(),
            token,
        };
    }
    match e {
        // `Custom`: the client's session loop failing a pending request on
        // its connection ("no response from connection in 2000ms", a read
        // error): as much a lost connection as `ConnectionLoss`.
        zk::Error::ConnectionLoss | zk::Error::Timeout | zk::Error::Custom(_) if op.write => {
            Error::outcome_unknown(BACKEND, op.name, e)
        }
        zk::Error::ConnectionLoss
        | zk::Error::Custom(_)
        | zk::Error::Timeout
        | zk::Error::NoHosts
        | zk::Error::Throttled
        | zk::Error::SessionMoved
        | zk::Error::SessionExpired => Error::backend(BACKEND, true, e),
        zk::Error::BadArguments(_) | zk::Error::InvalidAcl => {
            Error::invalid_input(format!("zookeeper refused {}: {e}", op.name))
        }
        e => Error::backend(BACKEND, false, e),
    }
}

#[cfg(test)]
mod tests {
    use fencing_core::FencingToken;

    use super::*;

    #[test]
    fn connection_loss_during_a_create_is_an_unknown_outcome() {
        let e = map_error(zk::Error::ConnectionLoss, Call::write("create lock node"));
        assert!(
            matches!(
                e,
                Error::OutcomeUnknown {
                    backend: "zookeeper",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = map_error(zk::Error::ConnectionLoss, Call::read("list lock nodes"));
        assert!(
            matches!(e, Error::Backend { retryable, .. } if retryable),
            "{e:?}"
        );
    }

    #[test]
    fn an_expired_session_is_a_lost_lease() {
        let lease = Call::read("check lock node").on_lease("r", FencingToken::new(9));
        for e in [
            zk::Error::SessionExpired,
            zk::Error::ClientClosed,
            zk::Error::NoNode,
            zk::Error::BadVersion,
        ] {
            assert!(
                matches!(map_error(e, lease), Error::LeaseLost { token, .. } if token.get() == 9)
            );
        }
        assert!(map_error(zk::Error::SessionExpired, Call::read("x")).is_retryable());
    }

    #[test]
    fn other_codes() {
        assert!(matches!(
            map_error(zk::Error::BadArguments(&"path"), Call::read("x")),
            Error::InvalidInput { .. }
        ));
        let e = map_error(zk::Error::NodeExists, Call::write("x"));
        assert!(
            matches!(e, Error::Backend { retryable, .. } if !retryable),
            "{e:?}"
        );
    }
}
