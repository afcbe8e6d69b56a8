//! etcd errors → [`fencing_core::Error`], in one place.

use std::time::Duration;

use fencing_core::{Call, Error};
use tonic::Code;

/// The backend name in errors.
pub(crate) const BACKEND: &str = "etcd";

/// Why an etcd call failed: the client said so, or it did not answer in time.
#[derive(Debug)]
pub(crate) enum Failure {
    /// An error from `etcd-client`.
    Etcd(etcd_client::Error),
    /// No answer within the operation timeout: the request may have been sent.
    Elapsed(Duration),
}

impl From<etcd_client::Error> for Failure {
    fn from(e: etcd_client::Error) -> Self {
        Self::Etcd(e)
    }
}

/// Whether the failure says the etcd lease does not exist (expired or
/// revoked).
pub(crate) fn lease_not_found(failure: &Failure) -> bool {
    match failure {
        Failure::Etcd(etcd_client::Error::LeaseKeepAliveError(message)) => {
            message.contains("not found")
        }
        Failure::Etcd(etcd_client::Error::GRpcStatus(status)) => {
            status.code() == Code::NotFound && status.message().contains("lease not found")
        }
        _ => false,
    }
}

/// Whether a call failed before it left this process: no connection could
/// be made to the member the client picked (e.g. a killed leader). Such a
/// call changed nothing, so even a write is safe to repeat.
pub(crate) fn never_sent(e: &etcd_client::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = match e {
        etcd_client::Error::GRpcStatus(status) => {
            if status.code() == Code::Unavailable && status.message() == "tcp connect error" {
                return true;
            }
            std::error::Error::source(status)
        }
        etcd_client::Error::TransportError(t) => Some(t),
        _ => None,
    };
    while let Some(s) = source {
        if s.to_string().contains("tcp connect error")
            || s.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// Maps a failed etcd call. The only place that decides what an etcd
/// failure means:
/// - the lease is gone (`lease not found`) → [`Error::LeaseLost`] when the
///   call was about a lease;
/// - a call that never left this process (connection refused) → a
///   retryable [`Error::Backend`], even for a write;
/// - no answer, `Unavailable`, `DeadlineExceeded`, `Cancelled`, a broken
///   connection → [`Error::OutcomeUnknown`] for a write (etcd may have
///   applied it), a retryable [`Error::Backend`] otherwise;
/// - `InvalidArgument`, `OutOfRange` (a request etcd refuses, e.g. too
///   large) → [`Error::InvalidInput`];
/// - `ResourceExhausted`, `Aborted` → retryable; anything else → not.
pub(crate) fn map_error(failure: Failure, op: Call<'_>) -> Error {
    if let Some((resource, token)) = op.lease
        && lease_not_found(&failure)
    {
        return Error::LeaseLost {
            resource: resource.to_owned(),
            token,
        };
    }
    let e = match failure {
        Failure::Elapsed(after) => {
            let source = format!("no answer from etcd within {after:?} to {}", op.name);
            return if op.write {
                Error::outcome_unknown(BACKEND, op.name, source)
            } else {
                Error::backend(BACKEND, true, source)
            };
        }
        Failure::Etcd(e) => e,
    };
    if never_sent(&e) {
        return Error::backend(BACKEND, true, e);
    }
    let transient = match &e {
        etcd_client::Error::GRpcStatus(status) => match status.code() {
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => true,
            Code::InvalidArgument | Code::OutOfRange => {
                return Error::invalid_input(format!(
                    "etcd refused {}: {}",
                    op.name,
                    status.message()
                ));
            }
            Code::ResourceExhausted | Code::Aborted => {
                return Error::backend(BACKEND, true, e);
            }
            _ => return Error::backend(BACKEND, false, e),
        },
        etcd_client::Error::TransportError(_)
        | etcd_client::Error::IoError(_)
        | etcd_client::Error::WatchError(_)
        | etcd_client::Error::LeaseKeepAliveError(_) => true,
        etcd_client::Error::InvalidArgs(_)
        | etcd_client::Error::InvalidUri(_)
        | etcd_client::Error::EndpointError(_) => {
            return Error::invalid_input(format!("etcd {}: {e}", op.name));
        }
        _ => false,
    };
    if transient && op.write {
        Error::outcome_unknown(BACKEND, op.name, e)
    } else {
        Error::backend(BACKEND, transient, e)
    }
}

#[cfg(test)]
mod tests {
    use fencing_core::FencingToken;

    use super::*;

    #[test]
    fn unavailable_is_unknown_for_writes_and_retryable_for_reads() {
        let unavailable =
            || Failure::Etcd(tonic::Status::unavailable("etcdserver: no leader").into());
        let e = map_error(unavailable(), Call::write("create lock key"));
        assert!(
            matches!(
                e,
                Error::OutcomeUnknown {
                    backend: "etcd",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(!e.is_retryable());
        let e = map_error(unavailable(), Call::read("find holder"));
        assert!(
            matches!(e, Error::Backend { retryable, .. } if retryable),
            "{e:?}"
        );
        let e = map_error(
            Failure::Elapsed(Duration::from_secs(1)),
            Call::write("revoke lease"),
        );
        assert!(matches!(e, Error::OutcomeUnknown { .. }), "{e:?}");
    }

    #[test]
    fn lease_not_found_is_lease_lost_only_for_a_lease() {
        let gone = || {
            Failure::Etcd(tonic::Status::not_found("etcdserver: requested lease not found").into())
        };
        let e = map_error(
            gone(),
            Call::write("revoke lease").on_lease("r", FencingToken::new(7)),
        );
        assert!(
            matches!(e, Error::LeaseLost { token, .. } if token.get() == 7),
            "{e:?}"
        );
        let e = map_error(gone(), Call::write("revoke lease"));
        assert!(
            matches!(e, Error::Backend { retryable, .. } if !retryable),
            "{e:?}"
        );
        let keep_alive = Failure::Etcd(etcd_client::Error::LeaseKeepAliveError(
            "lease not found".into(),
        ));
        assert!(lease_not_found(&keep_alive));
    }

    #[test]
    fn a_call_that_never_left_is_retryable_even_for_a_write() {
        let refused = tonic::Status::unavailable("tcp connect error");
        assert!(never_sent(&refused.clone().into()));
        let e = map_error(
            Failure::Etcd(refused.into()),
            Call::write("create lock key"),
        );
        assert!(
            matches!(e, Error::Backend { retryable, .. } if retryable),
            "{e:?}"
        );
        let leader_changed = tonic::Status::unavailable("etcdserver: leader changed");
        assert!(!never_sent(&leader_changed.into()));
    }

    #[test]
    fn refused_requests_are_invalid_input() {
        let big = Failure::Etcd(
            tonic::Status::invalid_argument("etcdserver: request is too large").into(),
        );
        assert!(matches!(
            map_error(big, Call::write("put")),
            Error::InvalidInput { .. }
        ));
    }
}
