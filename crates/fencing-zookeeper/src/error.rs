//! ZooKeeper errors → [`fencing_core::Error`], in one place.

use std::fmt;

use fencing_core::Error;
use fencing_core::adapter::{Call, tls_failure};
use zookeeper_client as zk;

/// The backend name in errors.
pub(crate) const NAME: &str = "zookeeper";

/// What failed: a ZooKeeper call, or, when no session could be opened, what
/// a handshake of our own then found (zookeeper-client reports a refused
/// certificate as a lost connection).
#[derive(Debug)]
pub(crate) enum Failure {
    /// A call's error.
    Zk(zk::Error),
    /// Our TLS handshake with `server` failed (a certificate refused
    /// either way, a TLS alert, the server hanging up in the middle of it),
    /// where the session's had failed as a lost connection.
    Handshake {
        server: String,
        error: std::io::Error,
    },
    /// `server` speaks TLS, and the connection asked for plaintext.
    TlsOnly { server: String },
}

impl From<zk::Error> for Failure {
    fn from(e: zk::Error) -> Self {
        Self::Zk(e)
    }
}

/// Maps a failure. The only place that decides what a ZooKeeper error
/// means:
/// - a TLS failure (a rustls error in the chain, or found by our own
///   handshake) → [`Error::Tls`]; a server that speaks TLS to a plaintext
///   connection → a [`Error::Backend`] that is not retryable, saying so;
/// - `AuthFailed`, and `NoAuth` (digest never refuses a login: a wrong
///   password is another identity, which our znodes' ACL refuses, as it
///   refuses a session without credentials) → [`Error::Unauthenticated`];
/// - `SessionExpired`, `ClientClosed` (and `NoNode`, `BadVersion` on our
///   own lock node) → [`Error::LeaseLost`] when the call was about a lease;
/// - a lost connection (`ConnectionLoss`, `Timeout`, the client's own
///   `Custom` connection failures) during a write → [`Error::OutcomeUnknown`]
///   (a created node may exist, a deleted one may be gone; either goes or
///   stays gone when its session ends);
/// - the same on a read, `NoHosts`, `Throttled`, `SessionMoved`, and
///   `SessionExpired` outside a lease → a retryable [`Error::Backend`];
/// - `BadArguments`, `InvalidAcl` → [`Error::InvalidInput`];
/// - anything else (`NodeExists` where we did not expect it, …) → a
///   [`Error::Backend`] that is not retryable.
pub(crate) fn map_error(e: impl Into<Failure>, op: Call<'_>) -> Error {
    let e = match e.into() {
        Failure::Zk(e) => e,
        Failure::Handshake { server, error } => {
            return Error::tls(NAME, AtServer { server, error });
        }
        Failure::TlsOnly { server } => {
            return Error::backend(
                NAME,
                false,
                format!(
                    "{server} speaks TLS (a secureClientPort) and this connection is plaintext: give the \
                     servers' CA with sslrootcert=PATH (sslmode=verify-full), or use the plaintext clientPort"
                ),
            );
        }
    };
    // e.g. "invalid client private key" around a rustls error, at connect;
    // on a write it may follow the request (an alert from a proxy).
    if tls_failure(&e) {
        return if op.write {
            Error::outcome_unknown(NAME, op.name, e)
        } else {
            Error::tls(NAME, e)
        };
    }
    let refused = match e {
        zk::Error::AuthFailed => Some("the server refused the session's login"),
        zk::Error::NoAuth => Some(
            "the znode's ACL admits another identity (with digest, a wrong password is one), or asks for \
             credentials this session does not have",
        ),
        _ => None,
    };
    if let Some(why) = refused {
        return Error::unauthenticated(NAME, format!("{}: {e}; {why}", op.name));
    }
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
            Error::outcome_unknown(NAME, op.name, e)
        }
        zk::Error::ConnectionLoss
        | zk::Error::Custom(_)
        | zk::Error::Timeout
        | zk::Error::NoHosts
        | zk::Error::Throttled
        | zk::Error::SessionMoved
        | zk::Error::SessionExpired => Error::backend(NAME, true, e),
        zk::Error::BadArguments(_) | zk::Error::InvalidAcl => {
            Error::invalid_input(format!("zookeeper refused {}: {e}", op.name))
        }
        e => Error::backend(NAME, false, e),
    }
}

/// A handshake's error, with the server it was with.
#[derive(Debug)]
struct AtServer {
    server: String,
    error: std::io::Error,
}

impl fmt::Display for AtServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.server, self.error)
    }
}

impl std::error::Error for AtServer {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
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
    fn a_refused_login_or_acl_is_unauthenticated() {
        for e in [zk::Error::AuthFailed, zk::Error::NoAuth] {
            let e = map_error(e, Call::write("create the resource znode"));
            assert!(
                matches!(
                    e,
                    Error::Unauthenticated {
                        backend: "zookeeper",
                        ..
                    }
                ),
                "{e:?}"
            );
            assert!(!e.is_retryable());
        }
    }

    #[test]
    fn a_refused_handshake_is_tls_and_a_tls_port_says_so() {
        let refused = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        let failure = Failure::Handshake {
            server: "h:1".into(),
            error: refused,
        };
        let e = map_error(failure, Call::read("open a session"));
        assert!(matches!(e, Error::Tls { .. }), "{e:?}");
        assert!(
            !e.is_retryable() && e.chain().contains("h:1"),
            "{}",
            e.chain()
        );
        let e = map_error(
            Failure::TlsOnly {
                server: "h:2281".into(),
            },
            Call::read("open a session"),
        );
        assert!(
            !e.is_retryable() && e.chain().contains("sslrootcert"),
            "{e:?}"
        );
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
