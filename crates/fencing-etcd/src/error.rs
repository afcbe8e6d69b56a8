//! etcd errors → [`fencing_core::Error`], in one place.

use std::time::Duration;

use fencing_core::Error;
use fencing_core::adapter::{Call, tls_failure};
use tonic::Code;

/// The backend name in errors.
pub(crate) const NAME: &str = "etcd";

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
/// - a CA or client identity that tonic cannot parse →
///   [`Error::InvalidInput`];
/// - a TLS handshake that failed (a rustls error anywhere in the chain: an
///   untrusted server certificate, a client certificate refused or
///   missing) → [`Error::Tls`];
/// - credentials refused (`Unauthenticated`: a wrong password, an unknown
///   user, an invalid token; none given while etcd has `auth enable`) →
///   [`Error::Unauthenticated`];
/// - `PermissionDenied` (the user's role may not touch the key) → a
///   [`Error::Backend`] that is not retryable, saying so;
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
                Error::outcome_unknown(NAME, op.name, source)
            } else {
                Error::backend(NAME, true, source)
            };
        }
        Failure::Etcd(e) => e,
    };
    if let Some(problem) = unusable_tls_files(&e) {
        return Error::invalid_input(format!(
            "etcd TLS options: {problem}; check sslrootcert, sslcert and sslkey"
        ));
    }
    // Before `never_sent`: a refused handshake is no reason to try again.
    // On a write, a TLS failure may follow the request (an alert from a
    // proxy restarting): it may have been applied.
    if handshake_failed(&e) {
        return if op.write {
            Error::outcome_unknown(NAME, op.name, e)
        } else {
            Error::tls(NAME, e)
        };
    }
    if never_sent(&e) {
        return Error::backend(NAME, true, e);
    }
    if refused_credentials(&e) {
        return Error::unauthenticated(NAME, e);
    }
    let transient = match &e {
        etcd_client::Error::GRpcStatus(status) => match status.code() {
            Code::PermissionDenied => {
                return Error::backend(
                    NAME,
                    false,
                    Denied {
                        call: op.name.to_owned(),
                        source: e,
                    },
                );
            }
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => true,
            Code::InvalidArgument | Code::OutOfRange => {
                return Error::invalid_input(format!(
                    "etcd refused {}: {}",
                    op.name,
                    status.message()
                ));
            }
            Code::ResourceExhausted | Code::Aborted => {
                return Error::backend(NAME, true, e);
            }
            _ => return Error::backend(NAME, false, e),
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
        Error::outcome_unknown(NAME, op.name, e)
    } else {
        Error::backend(NAME, transient, e)
    }
}

/// Whether a TLS handshake failed: a rustls error anywhere below the
/// client's error (tonic's transport errors wrap it deeply, inside an
/// `io::Error`), or its text where h2 kept only that: an alert the server
/// sent after the handshake (TLS 1.3: "received fatal alert:
/// BadCertificate" for a missing or refused client certificate) reaches
/// the client through h2, which turns the rustls error into a string.
/// `etcd_client::Error` itself has no `source()`.
fn handshake_failed(e: &etcd_client::Error) -> bool {
    let source: &(dyn std::error::Error + 'static) = match e {
        etcd_client::Error::TransportError(t) => t,
        etcd_client::Error::GRpcStatus(status) => status,
        etcd_client::Error::IoError(io) => io,
        _ => return false,
    };
    if tls_failure(source) {
        return true;
    }
    let mut cause = Some(source);
    while let Some(c) = cause {
        let text = c.to_string();
        if RUSTLS_TEXTS.iter().any(|t| text.starts_with(t)) {
            return true;
        }
        cause = c.source();
    }
    false
}

/// How rustls errors of a failed handshake begin (their `Display`).
const RUSTLS_TEXTS: &[&str] = &[
    "received fatal alert: ",
    "invalid peer certificate: ",
    "peer sent no certificates",
    "peer is incompatible: ",
];

/// What tonic says of a CA or client identity it cannot use, when it
/// builds the connection (before anything is sent): a file with PEM
/// markers around no certificate or key, or no system roots at all.
fn unusable_tls_files(e: &etcd_client::Error) -> Option<String> {
    let etcd_client::Error::TransportError(t) = e else {
        return None;
    };
    let mut cause = std::error::Error::source(t);
    while let Some(c) = cause {
        let text = c.to_string();
        if [
            "parsing TLS certificate",
            "parsing TLS private key",
            "no native certs found",
        ]
        .iter()
        .any(|s| text.contains(s))
        {
            return Some(text.trim_end_matches('.').to_owned());
        }
        cause = c.source();
    }
    None
}

/// etcd's answers to credentials it does not accept: `Unauthenticated`
/// (an invalid or expired token that could not be renewed), a wrong
/// password or an unknown user (which etcd reports as `InvalidArgument`),
/// and no user at all while `auth enable` is on.
const REFUSED_CREDENTIALS: &[&str] = &[
    "etcdserver: authentication failed, invalid user ID or password",
    "etcdserver: user name is empty",
    "etcdserver: user name not found",
    "etcdserver: invalid auth token",
];

fn refused_credentials(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            status.code() == Code::Unauthenticated
                || REFUSED_CREDENTIALS.contains(&status.message())
                || invalid_token(e)
        }
        _ => false,
    }
}

/// Whether etcd refused the auth token (expired: a simple token lives
/// `--auth-token-ttl` after its last use). etcd-client logs in again by
/// itself on `Unauthenticated`, and on `Unknown` only with the message
/// "etcdserver: invalid auth token"; etcd 3.4 answers some calls (the
/// alarm list) with `Unknown` "auth: invalid auth token", which it does
/// not recognise: [`Rpc::call`](crate::client::Rpc::call) logs in again
/// for those.
pub(crate) fn invalid_token(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(status)
        if matches!(status.code(), Code::Unauthenticated | Code::Unknown)
            && status.message().ends_with("invalid auth token"))
}

/// Whether etcd answered that authentication is off: a user and password
/// were given to a server without `auth enable`.
pub(crate) fn auth_not_enabled(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(status)
        if status.code() == Code::FailedPrecondition
            && status.message() == "etcdserver: authentication is not enabled")
}

/// Whether etcd refused a call for the user's role (`PermissionDenied`).
pub(crate) fn permission_denied(failure: &Failure) -> bool {
    matches!(failure, Failure::Etcd(etcd_client::Error::GRpcStatus(status))
        if status.code() == Code::PermissionDenied)
}

/// A call the user's role may not make: the source of the
/// [`Error::Backend`] for `PermissionDenied`.
#[derive(Debug)]
struct Denied {
    call: String,
    source: etcd_client::Error,
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "etcd refused to {}: permission denied. The user's role lacks read and write rights on the \
             issuer's key prefix (the URL's prefix=, default fencing/); grant them with `etcdctl role \
             grant-permission ROLE --prefix=true readwrite PREFIX`",
            self.call
        )
    }
}

impl std::error::Error for Denied {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
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
    fn refused_credentials_are_unauthenticated_and_a_role_without_rights_says_so() {
        let status = |s: tonic::Status| Failure::Etcd(s.into());
        for refused in [
            tonic::Status::invalid_argument(
                "etcdserver: authentication failed, invalid user ID or password",
            ),
            tonic::Status::unauthenticated("etcdserver: invalid auth token"),
            tonic::Status::unknown("auth: invalid auth token"),
            tonic::Status::invalid_argument("etcdserver: user name is empty"),
        ] {
            let e = map_error(status(refused), Call::write("create lock key"));
            assert!(
                matches!(
                    e,
                    Error::Unauthenticated {
                        backend: "etcd",
                        ..
                    }
                ),
                "{e:?}"
            );
            assert!(!e.is_retryable());
        }
        let denied = tonic::Status::permission_denied("etcdserver: permission denied");
        assert!(permission_denied(&status(denied.clone())));
        let e = map_error(status(denied), Call::read("find the holder"));
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
        let chain = e.chain();
        assert!(
            chain.contains("refused to find the holder: permission denied")
                && chain.contains("role lacks")
                && chain.contains("etcdserver: permission denied"),
            "{chain}"
        );
        let off = tonic::Status::failed_precondition("etcdserver: authentication is not enabled");
        assert!(auth_not_enabled(&off.into()));
        assert!(!auth_not_enabled(
            &tonic::Status::failed_precondition("other").into()
        ));
    }

    #[test]
    fn a_tls_alert_that_h2_kept_as_text_is_a_tls_error() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "received fatal alert: BadCertificate",
        );
        let status = tonic::Status::from_error(Box::new(io));
        let e = map_error(Failure::Etcd(status.into()), Call::read("connect"));
        assert!(
            matches!(
                e,
                Error::Tls {
                    backend: "etcd",
                    ..
                }
            ),
            "{e:?}"
        );
        let other = std::io::Error::new(std::io::ErrorKind::InvalidData, "frame too large");
        let status = tonic::Status::from_error(Box::new(other));
        let e = map_error(Failure::Etcd(status.into()), Call::read("connect"));
        assert!(matches!(e, Error::Backend { .. }), "{e:?}");
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
