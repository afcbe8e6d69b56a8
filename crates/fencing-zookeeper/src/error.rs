//! ZooKeeper errors → [`fencing_core::Error`], in one place.

use fencing_core::{Error, FencingToken};
use zookeeper_client as zk;

/// The backend name in errors.
pub(crate) const BACKEND: &str = "zookeeper";

/// What was being done when a call failed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Op<'a> {
    /// For messages, e.g. `"create lock node"`.
    pub(crate) name: &'a str,
    /// Whether the call creates something: a create whose answer was lost
    /// ([`zk::Error::ConnectionLoss`]) may have been applied.
    pub(crate) create: bool,
    /// The lease the call was about: an expired or closed session, or our
    /// node gone, means it is lost.
    pub(crate) lease: Option<(&'a str, FencingToken)>,
}

impl<'a> Op<'a> {
    /// A call that creates nothing.
    pub(crate) const fn read(name: &'a str) -> Self {
        Self {
            name,
            create: false,
            lease: None,
        }
    }

    /// A call that creates a node.
    pub(crate) const fn create(name: &'a str) -> Self {
        Self {
            name,
            create: true,
            lease: None,
        }
    }

    /// The same call, about the lease on `resource` with `token`.
    pub(crate) const fn on_lease(mut self, resource: &'a str, token: FencingToken) -> Self {
        self.lease = Some((resource, token));
        self
    }
}

/// Maps a failed ZooKeeper call. The only place that decides what a
/// ZooKeeper error means:
/// - `SessionExpired`, `ClientClosed` (and `NoNode`, `BadVersion` on our
///   own lock node) → [`Error::LeaseLost`] when the call was about a lease;
/// - `ConnectionLoss` or `Timeout` during a create → [`Error::OutcomeUnknown`]
///   (the node may exist; it goes when its session ends);
/// - `ConnectionLoss`, `Timeout`, `NoHosts`, `Throttled`, `SessionMoved`,
///   and `SessionExpired` outside a lease → a retryable [`Error::Backend`];
/// - `BadArguments`, `InvalidAcl` → [`Error::InvalidInput`];
/// - anything else (`NodeExists` where we did not expect it, `NoAuth`, …)
///   → a [`Error::Backend`] that is not retryable.
pub(crate) fn map_error(e: zk::Error, op: Op<'_>) -> Error {
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
        zk::Error::ConnectionLoss | zk::Error::Timeout if op.create => {
            Error::outcome_unknown(BACKEND, op.name, e)
        }
        zk::Error::ConnectionLoss
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
    use super::*;

    #[test]
    fn connection_loss_during_a_create_is_an_unknown_outcome() {
        let e = map_error(zk::Error::ConnectionLoss, Op::create("create lock node"));
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
        let e = map_error(zk::Error::ConnectionLoss, Op::read("list lock nodes"));
        assert!(
            matches!(
                e,
                Error::Backend {
                    retryable: true,
                    ..
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn an_expired_session_is_a_lost_lease() {
        let lease = Op::read("check lock node").on_lease("r", FencingToken::new(9));
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
        assert!(map_error(zk::Error::SessionExpired, Op::read("x")).is_retryable());
    }

    #[test]
    fn other_codes() {
        assert!(matches!(
            map_error(zk::Error::BadArguments(&"path"), Op::read("x")),
            Error::InvalidInput { .. }
        ));
        let e = map_error(zk::Error::NodeExists, Op::create("x"));
        assert!(
            matches!(
                e,
                Error::Backend {
                    retryable: false,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
