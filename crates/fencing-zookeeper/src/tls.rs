//! TLS to the servers' `secureClientPort`: the options every session
//! takes (zookeeper-client's own TLS), and a handshake of our own, with the
//! same CA and client certificate, for what those sessions cannot say.
//! zookeeper-client reports a refused certificate as a lost connection
//! (and, all servers tried, as `NoHosts`), so when a session cannot be
//! opened our handshake tells a TLS failure from a server that is down;
//! the four-letter words of `verify` go over it too.
//!
//! Both use rustls with the process's crypto provider: aws-lc-rs, the one
//! in the tree.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use fencing_core::tls::{Identity, TlsMode, TlsOptions};
use fencing_core::{Error, Result};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{
    CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName, UnixTime,
};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use zookeeper_client as zk;

use crate::error::NAME;

/// The modes zookeeper-client can do. Its verifier always checks the chain
/// (no `require`), it has no `prefer`, and leaving the host name unchecked
/// (`verify-ca`) takes an `unsafe` call this workspace forbids.
pub(crate) const OFFERED: &[TlsMode] = &[TlsMode::Disable, TlsMode::VerifyFull];

/// The mode `options` ask for, refused unless zookeeper-client can do it.
///
/// # Errors
/// [`Error::InvalidInput`] for a mode it does not offer, or TLS without a
/// CA file (zookeeper-client trusts no system roots).
pub(crate) fn mode(options: &TlsOptions) -> Result<TlsMode> {
    let mode = options.mode_for(NAME, TlsMode::Disable, OFFERED)?;
    if mode.encrypted() && options.ca_file().is_none() {
        return Err(Error::invalid_input(format!(
            "sslmode={mode} needs sslrootcert=PATH, the CA of the servers' certificates: \
             zookeeper-client trusts no system roots"
        )));
    }
    Ok(mode)
}

/// TLS for the sessions and for our own handshakes, its files read once.
#[derive(Clone)]
pub(crate) struct Tls {
    session: zk::TlsOptions,
    probe: Arc<ClientConfig>,
}

impl Tls {
    /// Reads the files `options` name; `None` for plaintext.
    ///
    /// # Errors
    /// As [`mode`]; [`Error::InvalidInput`] naming a file that cannot be
    /// read or holds no usable PEM (never what a key file holds).
    pub(crate) fn load(options: &TlsOptions) -> Result<Option<Self>> {
        if !mode(options)?.encrypted() {
            return Ok(None);
        }
        let ca = options.read_ca()?.unwrap_or_default();
        let identity = options.read_identity()?;
        let bad = Bad(options);
        let ca_text = std::str::from_utf8(&ca).map_err(|e| bad.ca(&e))?;
        let mut session = zk::TlsOptions::new()
            .with_pem_ca(ca_text)
            .map_err(|e| bad.ca(&e))?;
        if let Some(identity) = &identity {
            let cert = std::str::from_utf8(&identity.cert).map_err(|e| bad.identity(&e))?;
            let key = std::str::from_utf8(identity.key.expose()).map_err(|_| bad.key())?;
            session = session
                .with_pem_identity(cert, key)
                .map_err(|_| bad.key())?;
        }
        Ok(Some(Self {
            session,
            probe: Arc::new(probe_config(&ca, identity.as_ref(), &bad)?),
        }))
    }

    /// The options a session takes.
    pub(crate) fn session_options(&self) -> zk::TlsOptions {
        self.session.clone()
    }

    /// Sends `word` over TLS to `server` and reads the answer until the
    /// server closes: a four-letter word, or (on a session that failed) a
    /// check of the handshake, including a client certificate the server
    /// refuses after it (TLS 1.3 says so only at the first read).
    ///
    /// # Errors
    /// The I/O error, which holds the rustls error of a failed handshake.
    pub(crate) async fn exchange(
        &self,
        server: &str,
        word: &'static str,
        timeout: Duration,
    ) -> io::Result<String> {
        blocking(self.probe.clone(), server, word, timeout).await
    }
}

/// What our handshakes use: the CA and client certificate the sessions
/// use, the host name checked (as zookeeper-client checks it), and the
/// CA file's revocation lists too.
fn probe_config(ca: &[u8], identity: Option<&Identity>, bad: &Bad<'_>) -> Result<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca) {
        roots
            .add(cert.map_err(|e| bad.ca(&e))?)
            .map_err(|e| bad.ca(&e))?;
    }
    let crls = CertificateRevocationListDer::pem_slice_iter(ca)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad.ca(&e))?;
    let builder = ClientConfig::builder();
    let verifier = WebPkiServerVerifier::builder_with_provider(
        roots.into(),
        builder.crypto_provider().clone(),
    )
    .with_crls(crls)
    .build()
    .map_err(|e| bad.ca(&e))?;
    let builder = builder.with_webpki_verifier(verifier);
    let Some(identity) = identity else {
        return Ok(builder.with_no_client_auth());
    };
    let chain = CertificateDer::pem_slice_iter(&identity.cert)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad.identity(&e))?;
    let key = PrivateKeyDer::from_pem_slice(identity.key.expose()).map_err(|_| bad.key())?;
    // rustls says whether the key fits the certificate, not what it holds.
    builder
        .with_client_auth_cert(chain, key)
        .map_err(|e| bad.identity(&e))
}

/// The errors naming the TLS files.
struct Bad<'a>(&'a TlsOptions);

impl Bad<'_> {
    fn ca(&self, e: &dyn std::fmt::Display) -> Error {
        let file = self.0.ca_file().map(|p| p.display().to_string());
        Error::invalid_input(format!(
            "the CA file (sslrootcert) {}: {e}",
            file.unwrap_or_default()
        ))
    }

    fn identity(&self, e: &dyn std::fmt::Display) -> Error {
        let files = self
            .0
            .client_cert_files()
            .map(|(c, k)| format!("{} and {}", c.display(), k.display()));
        Error::invalid_input(format!(
            "the client certificate and key (sslcert, sslkey) {}: {e}",
            files.unwrap_or_default()
        ))
    }

    /// A PEM parser's message may quote a byte it could not decode: none
    /// of the key's is shown.
    fn key(&self) -> Error {
        self.identity(&"the key does not parse as a PEM private key")
    }
}

/// Whether `server` speaks TLS: a handshake that stops at the server's
/// certificate (so it never trusts one). For a plaintext session that
/// could not be opened: a `secureClientPort` drops it without a word.
pub(crate) async fn speaks_tls(server: &str, timeout: Duration) -> bool {
    let builder = ClientConfig::builder();
    let schemes = builder
        .crypto_provider()
        .signature_verification_algorithms
        .supported_schemes();
    let config = builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(StopAtCertificate(schemes)))
        .with_no_client_auth();
    match blocking(Arc::new(config), server, "", timeout).await {
        Ok(_) => true,
        Err(e) => e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .is_some_and(|e| matches!(e, rustls::Error::General(m) if m == STOPPED)),
    }
}

const STOPPED: &str = "stopped at the server's certificate (a probe)";

/// Whether our handshake failed in TLS: a rustls error (a certificate
/// refused either way, a TLS alert), or the server hanging up in the middle
/// of it (as a plaintext port does, reading a ClientHello as a huge packet).
/// A refused or timed-out connection is not.
pub(crate) fn refused_handshake(error: &io::Error) -> bool {
    fencing_core::adapter::tls_failure(error)
        || error
            .get_ref()
            .is_some_and(|inner| inner.is::<HandshakeCut>())
}

/// The server closed the connection before the TLS handshake was done.
#[derive(Debug)]
struct HandshakeCut;

impl std::fmt::Display for HandshakeCut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "the server closed the connection during the TLS handshake: a plaintext port (clientPort, not \
             secureClientPort), or it refused us",
        )
    }
}

impl std::error::Error for HandshakeCut {}

/// Refuses every certificate: reaching one proves the server speaks TLS.
#[derive(Debug)]
struct StopAtCertificate(Vec<SignatureScheme>);

impl ServerCertVerifier for StopAtCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Err(rustls::Error::General(STOPPED.to_owned()))
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General(STOPPED.to_owned()))
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General(STOPPED.to_owned()))
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.clone()
    }
}

/// [`exchange`](Tls::exchange) on a thread of its own (rustls's stream is
/// blocking), bounded by `timeout`.
async fn blocking(
    config: Arc<ClientConfig>,
    server: &str,
    word: &'static str,
    timeout: Duration,
) -> io::Result<String> {
    let server = server.to_owned();
    let exchange = tokio::task::spawn_blocking(move || exchange(config, &server, word, timeout));
    match tokio::time::timeout(timeout * 2, exchange).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => Err(io::Error::other(e)),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer within {timeout:?}"),
        )),
    }
}

fn exchange(
    config: Arc<ClientConfig>,
    server: &str,
    word: &str,
    timeout: Duration,
) -> io::Result<String> {
    let (host, port) = host_port(server)?;
    let addr = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{host}: no address")))?;
    let mut tcp = TcpStream::connect_timeout(&addr, timeout)?;
    tcp.set_read_timeout(Some(timeout))?;
    tcp.set_write_timeout(Some(timeout))?;
    let name = ServerName::try_from(host.to_owned())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut tls = rustls::ClientConnection::new(config, name).map_err(io::Error::other)?;
    while tls.is_handshaking() {
        tls.complete_io(&mut tcp).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted => io::Error::new(e.kind(), HandshakeCut),
            _ => e,
        })?;
    }
    let mut answer = String::new();
    if word.is_empty() {
        return Ok(answer);
    }
    let mut stream = rustls::Stream::new(&mut tls, &mut tcp);
    stream.write_all(word.as_bytes())?;
    stream.flush()?;
    match stream.read_to_string(&mut answer) {
        // A server that closes without close_notify has still answered.
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && !answer.is_empty() => Ok(answer),
        Err(e) => Err(e),
        Ok(_) => Ok(answer),
    }
}

/// `host:port`, `[v6]:port` or `host` (port 2181, zookeeper-client's
/// default).
fn host_port(server: &str) -> io::Result<(&str, u16)> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{server:?}: expected HOST:PORT"),
        )
    };
    let (host, port) = match server.strip_prefix('[') {
        Some(rest) => {
            let (host, port) = rest.split_once(']').ok_or_else(bad)?;
            (host, port.strip_prefix(':'))
        }
        None => match server.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (server, None),
        },
    };
    let port = port.map_or(Ok(2181), |p| p.parse().map_err(|_| bad()))?;
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_are_host_and_port() {
        assert_eq!(host_port("127.0.0.1:2281").unwrap(), ("127.0.0.1", 2281));
        assert_eq!(host_port("[::1]:2281").unwrap(), ("::1", 2281));
        assert_eq!(host_port("zk1").unwrap(), ("zk1", 2181));
        assert!(host_port("zk1:x").is_err());
        assert!(host_port(":1").is_err());
    }

    #[test]
    fn modes_are_those_the_client_can_do() {
        let parse = |q: &str| {
            let mut query = fencing_core::adapter::url::Query::parse(q).unwrap();
            mode(&query.take_tls().unwrap())
        };
        assert_eq!(parse("").unwrap(), TlsMode::Disable);
        assert_eq!(parse("sslrootcert=/ca.pem").unwrap(), TlsMode::VerifyFull);
        for (query, says) in [
            (
                "sslmode=require&sslrootcert=/ca.pem",
                "disable, verify-full",
            ),
            (
                "sslmode=verify-ca&sslrootcert=/ca.pem",
                "disable, verify-full",
            ),
            ("sslmode=prefer", "disable, verify-full"),
            ("sslmode=verify-full", "needs sslrootcert"),
        ] {
            let message = fencing_testkit::refusal::invalid_input_message(query, parse(query));
            assert!(message.contains(says), "{query}: {message}");
        }
    }
}
