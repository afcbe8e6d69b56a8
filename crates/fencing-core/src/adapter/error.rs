//! The error plumbing of every adapter's one error-mapping function: what
//! failed ([`Call`]), where the request died ([`tls_failure`],
//! [`never_sent`]), and an SDK error made safe to keep ([`Redacted`]).
//! Applications meet only what these produce: [`Error`].

#[cfg(doc)]
use crate::Error;
use crate::{FencingToken, error_chain};

/// The call a backend error came from, for an adapter's one error-mapping
/// function: its name for messages, whether a lost answer leaves its
/// outcome unknown (then a timeout or a dropped connection is
/// [`Error::OutcomeUnknown`], not a retryable failure), and the lease it was
/// about (the backend saying the lease, the session or the node is gone
/// means [`Error::LeaseLost`]).
///
/// Three constructors, one per kind of call: [`Call::read`] changes
/// nothing; [`Call::idempotent`] changes state, but doing it twice or not
/// knowing whether it was done is harmless; [`Call::write`] changes state
/// and its lost answer matters.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// For messages, e.g. `"create lock key"`.
    pub name: &'a str,
    /// Whether a lost answer leaves an outcome the caller must read back:
    /// true for [`Call::write`]; false for [`Call::read`] and
    /// [`Call::idempotent`], whose lost answer is merely retryable.
    pub write: bool,
    /// The lease the call was about: `(resource, token)`.
    pub lease: Option<(&'a str, FencingToken)>,
}

impl<'a> Call<'a> {
    /// A call that changes nothing on the server.
    pub const fn read(name: &'a str) -> Self {
        Self {
            name,
            write: false,
            lease: None,
        }
    }

    /// A call that changes state, but whose repetition or lost answer is
    /// harmless: it creates what must exist anyway (`CREATE TABLE IF NOT
    /// EXISTS`, a znode whose "exists" answer counts as done), removes what
    /// must be gone, or leaves something that cleans itself up (an etcd
    /// lease nobody attached a key to expires). Mapped as a read: a lost
    /// answer is a retryable failure, never [`Error::OutcomeUnknown`]. Say
    /// at the call site why it is harmless.
    pub const fn idempotent(name: &'a str) -> Self {
        Self::read(name)
    }

    /// A call that changes state, and whose lost answer leaves an outcome
    /// the caller must read back before deciding ([`Error::OutcomeUnknown`]).
    pub const fn write(name: &'a str) -> Self {
        Self {
            name,
            write: true,
            lease: None,
        }
    }

    /// The same call, about the lease on `resource` with `token`.
    #[must_use]
    pub const fn on_lease(mut self, resource: &'a str, token: FencingToken) -> Self {
        self.lease = Some((resource, token));
        self
    }
}

/// An SDK error's whole chain, as redacted text ([`crate::redact::redact_text`]),
/// standing in for the error itself as a `source()`: some SDKs print the
/// request URL in their messages, SAS signature and all, and a `source()`
/// chain cannot be redacted link by link. Classify the original first.
#[derive(Debug)]
pub struct Redacted(String);

impl Redacted {
    /// The chain of `err`: [`error_chain`].
    pub fn new(err: &(dyn std::error::Error + 'static)) -> Self {
        Self(error_chain(err))
    }
}

impl std::fmt::Display for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Redacted {}

/// Whether a TLS handshake failure (a rustls error: an untrusted
/// certificate, a refused or missing client certificate) is anywhere in
/// `err`'s chain, including inside an `io::Error` or an `Arc<dyn Error>`
/// (redis-rs keeps one), whose `source()` skips the error they wrap.
pub fn tls_failure(err: &(dyn std::error::Error + 'static)) -> bool {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let mut cause = Some(err);
    while let Some(e) = cause {
        if e.is::<rustls::Error>() {
            return true;
        }
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            && tls_failure(inner)
        {
            return true;
        }
        if let Some(inner) = e.downcast_ref::<Shared>()
            && tls_failure(&**inner)
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// Whether a failure happened before any byte of the request was sent: a
/// connection refused, anywhere in the `source()` chain. Only then is a
/// failed write known not to have been applied: a timeout or a reset may
/// come after the request went out, and so may "host (or network)
/// unreachable", which Linux also reports on an established connection
/// whose retransmissions met an ICMP error. (An adapter whose SDK says the
/// failure was in the connect phase, like GCS's `is_connect`, may count
/// those too.)
pub fn never_sent(err: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind;
    let mut cause = Some(err);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == ErrorKind::ConnectionRefused
        {
            return true;
        }
        cause = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BoxError, Error};

    #[test]
    fn an_idempotent_call_is_mapped_as_a_read() {
        // Its lost answer is retryable: `write` is what adapters check.
        let (read, idempotent) = (Call::read("get"), Call::idempotent("create table"));
        assert!(!read.write && !idempotent.write && Call::write("put").write);
        assert_eq!(idempotent.name, "create table");
    }

    #[test]
    fn never_sent_looks_down_the_whole_chain() {
        use std::io::{Error as Io, ErrorKind};
        #[derive(Debug, thiserror::Error)]
        #[error("wrapped")]
        struct Wrapped(#[source] BoxError);

        let refused = || Io::from(ErrorKind::ConnectionRefused);
        assert!(never_sent(&refused()));
        // Under two wrappers, one of them an io::Error of another kind.
        let deep = Wrapped(Box::new(Io::other(Wrapped(Box::new(refused())))));
        assert!(never_sent(&deep), "refused, deep");
        for kind in [
            ErrorKind::ConnectionReset,
            // Also reported after the request went out (an ICMP error on
            // a retransmission), so not proof that nothing was sent.
            ErrorKind::HostUnreachable,
            ErrorKind::NetworkUnreachable,
            ErrorKind::TimedOut,
            ErrorKind::BrokenPipe,
            ErrorKind::UnexpectedEof,
        ] {
            assert!(!never_sent(&Wrapped(Box::new(Io::from(kind)))), "{kind:?}");
        }
        assert!(!never_sent(&Error::invalid_input("x")));
    }
}
