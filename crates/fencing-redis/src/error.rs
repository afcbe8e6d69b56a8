//! The one place Redis failures become [`fencing_core::Error`]s.

use std::error::Error as StdError;
use std::fmt;

use fencing_core::adapter::Call;
use fencing_core::tls::TlsMode;
use fencing_core::{Error, FencingToken, Result};
use redis::ErrorKind;

use crate::NAME;

/// Maps a Redis error of `call`: a refused login is [`Error::Unauthenticated`], a
/// failed TLS handshake [`Error::Tls`] (neither retryable); an I/O failure
/// once a write ([`Call::write`]) was sent is an unknown outcome; refusals
/// and timeouts before sending are retryable.
pub(crate) fn map_error(e: redis::RedisError, call: Call<'_>) -> Error {
    if refused_login(&e) {
        Error::unauthenticated(NAME, e)
    } else if fencing_core::adapter::tls_failure(&e) && call.write {
        // An alert after the command went out (a TLS proxy restarting).
        Error::outcome_unknown(NAME, call.name, e)
    } else if fencing_core::adapter::tls_failure(&e) {
        Error::tls(NAME, e)
    } else if e.kind() == ErrorKind::InvalidClientConfig {
        // Refused by redis-rs before anything was sent (its messages hold
        // no URL: it never sees one).
        Error::invalid_input(format!("{}: {e}", call.name))
    } else if e.is_connection_refusal() {
        Error::backend(NAME, true, e)
    } else if call.write && (e.is_io_error() || e.is_timeout() || e.is_connection_dropped()) {
        Error::outcome_unknown(NAME, call.name, e)
    } else {
        let retryable = e.is_io_error() || e.is_timeout() || e.is_connection_dropped();
        Error::backend(NAME, retryable, e)
    }
}

/// [`map_error`] for the first connection, in `mode`, saying what a
/// failure nearly always means there: a plaintext connection the server
/// closes before answering went to a TLS port (not retryable: it will not
/// change); a TLS handshake that times out went to a plaintext port (Redis
/// waits for the end of a command line that never comes), or the network
/// is slow (retryable).
pub(crate) fn connect_error(mode: TlsMode, address: &str, e: redis::RedisError) -> Error {
    let hint = |retryable, message: String| {
        Error::backend(
            NAME,
            retryable,
            Hint {
                message,
                source: e.clone(),
            },
        )
    };
    if e.is_connection_refusal() {
        map_error(e, Call::read("connect"))
    } else if mode == TlsMode::Disable && e.is_connection_dropped() {
        hint(
            false,
            format!(
                "{address} closed a plaintext connection before answering: is it a TLS port? \
                 Use rediss:// (or sslmode=verify-full)"
            ),
        )
    } else if mode != TlsMode::Disable && e.is_timeout() {
        hint(
            true,
            format!(
                "no TLS handshake from {address} in time: is it a plaintext port (then use redis://)? \
                 Or the network is slow"
            ),
        )
    } else {
        map_error(e, Call::read("connect"))
    }
}

/// `AUTH` refused (`WRONGPASS`, a disabled user, `NOPERM` on `AUTH`:
/// redis-rs reports them all as `AuthenticationFailed`), or a command sent
/// without a login the server requires (`NOAUTH`).
fn refused_login(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
}

/// A message of ours above the redis-rs error it explains.
#[derive(Debug)]
struct Hint {
    message: String,
    source: redis::RedisError,
}

impl fmt::Display for Hint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for Hint {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.source)
    }
}

pub(crate) fn parse_token(raw: &str) -> Result<FencingToken> {
    raw.parse().map_err(|_| {
        Error::invalid_input(format!("Redis fence counter holds {raw:?}, not a token"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(
        kind: std::io::ErrorKind,
        inner: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> redis::RedisError {
        std::io::Error::new(kind, inner).into()
    }

    #[test]
    fn logins_and_handshakes_refused_are_typed_and_not_retryable() {
        let handshake = io(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        // redis-rs keeps the io::Error behind an Arc: the core looks inside.
        assert!(fencing_core::adapter::tls_failure(&handshake));
        let e = map_error(handshake, Call::read("connect"));
        assert!(
            matches!(
                e,
                Error::Tls {
                    backend: "redis",
                    ..
                }
            ),
            "{e:?}"
        );
        // The same failure on a grant may follow the script: it may have run.
        let alert = io(
            std::io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(rustls::AlertDescription::BadRecordMac),
        );
        let e = map_error(alert, Call::write("acquire"));
        assert!(matches!(e, Error::OutcomeUnknown { .. }), "{e:?}");
        let refused: redis::RedisError = (
            ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        )
            .into();
        let e = map_error(refused, Call::write("acquire"));
        assert!(
            matches!(e, Error::Unauthenticated { .. }) && !e.is_retryable(),
            "{e:?}"
        );
        let config: redis::RedisError = (ErrorKind::InvalidClientConfig, "Missing hostname").into();
        assert!(matches!(
            map_error(config, Call::read("connect")),
            Error::InvalidInput { .. }
        ));
        // An I/O error without rustls in it stays what it was.
        let reset = io(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(matches!(
            map_error(reset, Call::write("acquire")),
            Error::OutcomeUnknown { .. }
        ));
    }

    #[test]
    fn a_plaintext_connection_closed_at_once_names_the_tls_port() {
        let reset = io(std::io::ErrorKind::ConnectionReset, "reset");
        let e = connect_error(TlsMode::Disable, "h:6390", reset.clone());
        assert!(
            !e.is_retryable() && e.chain().contains("TLS port"),
            "{}",
            e.chain()
        );
        // Over TLS, a reset is no hint of a TLS port.
        let e = connect_error(TlsMode::VerifyFull, "h:6390", reset);
        assert!(
            e.is_retryable() && !e.chain().contains("TLS port"),
            "{}",
            e.chain()
        );
        let refused = io(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = connect_error(TlsMode::Disable, "h:1", refused);
        assert!(
            e.is_retryable() && !e.chain().contains("TLS port"),
            "{}",
            e.chain()
        );
    }
}
