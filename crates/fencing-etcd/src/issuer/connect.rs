//! Dialling etcd: [`EtcdIssuer::open`], and what a connection etcd closed
//! at once means (under TLS 1.3 a refused client certificate, or a
//! plaintext client at a TLS-only server).

use std::fmt;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions};
use fencing_core::adapter::Call;
use fencing_core::auth::Credentials;
use fencing_core::tls::TlsMode;
use fencing_core::{Error, Result};

use super::{Dial, EtcdIssuer, check_prefix};
use crate::error::{Failure, NAME, auth_not_enabled, map_error};
use crate::keys::Keys;

impl EtcdIssuer {
    /// Connects with `options` (TLS, no user) and `credentials`, checks
    /// that the cluster answers a read of `prefix` (default
    /// [`DEFAULT_PREFIX`]), which a user whose role is limited to its
    /// prefix may make. `mode` is the transport.
    ///
    /// With a user and password, etcd-client authenticates at connect and
    /// sends the token with every call; the token is renewed when etcd
    /// answers that it is invalid (a simple token expires after
    /// `--auth-token-ttl` idle, 5 minutes by default). A server with
    /// authentication off refuses the login: the issuer then connects
    /// without the user, as etcdctl does, and `verify` warns of it.
    ///
    /// A server that closes the connection at once, twice, is refusing
    /// the transport: under TLS 1.3 a server refuses a client certificate
    /// (or the lack of one) only after the client's side of the handshake
    /// is done, so no TLS error reaches the client, only a closed
    /// connection; and a TLS server closes a plaintext connection. Either
    /// is reported as such ([`Error::Tls`], or a backend error that is not
    /// retryable), not as an unreachable server.
    pub(crate) async fn open<E: AsRef<str>>(
        endpoints: &[E],
        options: ConnectOptions,
        mode: TlsMode,
        credentials: Option<&Credentials>,
        keys: Keys,
    ) -> Result<Self> {
        if endpoints.is_empty() {
            return Err(Error::invalid_input("no etcd endpoint given"));
        }
        check_prefix(keys.prefix())?;
        let options = options
            .with_connect_timeout(Duration::from_secs(2))
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true)
            .with_require_leader(true)
            .with_auto_token_refresh(true);
        let mut closed_before = false;
        loop {
            match Self::try_open(endpoints, &options, mode, credentials, &keys).await {
                Ok(issuer) => return Ok(issuer),
                Err(e) if closed_at_once(&e) && !closed_before => {
                    closed_before = true;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) if closed_at_once(&e) => return Err(closed_twice(mode, e)),
                Err(e) => return Err(map_error(e, Call::read("connect"))),
            }
        }
    }

    /// One try of [`open`](Self::open).
    async fn try_open<E: AsRef<str>>(
        endpoints: &[E],
        options: &ConnectOptions,
        mode: TlsMode,
        credentials: Option<&Credentials>,
        keys: &Keys,
    ) -> std::result::Result<Self, Failure> {
        let with_user = match credentials {
            Some(c) => options.clone().with_user(c.user.clone(), c.password()),
            None => options.clone(),
        };
        let connect = |options| async move { Client::connect(endpoints, Some(options)).await };
        let (client, dial, auth_off) = match connect(with_user.clone()).await {
            Ok(client) => (client, with_user, false),
            Err(e) if credentials.is_some() && auth_not_enabled(&e) => {
                tracing::warn!(
                    "etcd has authentication off: connecting without the user given; anyone who reaches \
                     etcd can write the issuer's keys (etcdctl auth enable)"
                );
                (connect(options.clone()).await?, options.clone(), true)
            }
            Err(e) => return Err(e.into()),
        };
        let issuer = Self::new(client).rebuild(|inner| {
            inner.endpoints = endpoints.iter().map(|e| e.as_ref().to_owned()).collect();
            inner.keys = keys.clone();
            inner.dial = Dial {
                options: dial,
                mode: Some(mode),
                callers_client: false,
                auth_off,
            };
        });
        let count = GetOptions::new().with_prefix().with_count_only();
        issuer.rpc().get(keys.prefix().to_owned(), count).await?;
        Ok(issuer)
    }
}

/// Whether the server closed the connection at its first use (the TLS
/// handshake, if any, was done): "connection closed", a broken pipe or a
/// reset, not a refused connection.
fn closed_at_once(failure: &Failure) -> bool {
    let Failure::Etcd(etcd_client::Error::GRpcStatus(status)) = failure else {
        return false;
    };
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = cause {
        let text = e.to_string();
        if ["connection closed", "broken pipe", "connection reset"]
            .iter()
            .any(|s| text.contains(s))
        {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            )
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// What a connection closed at once, twice, means for the transport.
fn closed_twice(mode: TlsMode, failure: Failure) -> Error {
    let Failure::Etcd(source) = failure else {
        return map_error(failure, Call::read("connect"));
    };
    match mode {
        TlsMode::VerifyFull => Error::tls(
            NAME,
            Closed {
                reason: "etcd closed the connection right after the TLS handshake, twice: under TLS 1.3 \
                         that is how a server refuses the client certificate (it requires one and none was \
                         given: sslcert, sslkey; or it does not trust the one given)",
                source,
            },
        ),
        _ => Error::backend(
            NAME,
            false,
            Closed {
                reason: "etcd closed the plaintext connection at once, twice, as a server that serves only \
                         TLS does: give its CA (sslrootcert=…) or sslmode=verify-full (https:// endpoints)",
                source,
            },
        ),
    }
}

/// A connection the server closed at once, and what that likely means.
#[derive(Debug)]
struct Closed {
    reason: &'static str,
    source: etcd_client::Error,
}

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason)
    }
}

impl std::error::Error for Closed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}
