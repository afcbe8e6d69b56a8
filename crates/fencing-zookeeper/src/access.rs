//! Who our sessions are and how they reach the servers: TLS, digest
//! credentials, and the ACL that every znode we create carries.
//!
//! With credentials, each session logs in with ZooKeeper's `digest` scheme
//! (`addauth digest user:password`) and every znode we create is
//! restricted to that identity (the `auth` scheme: whoever created it,
//! with the same credentials); without, they are open to `world:anyone`,
//! as before. Either way the prefix znode grants every permission but
//! DELETE, so nobody can delete a resource znode.
//!
//! Digest authentication never fails: the server derives an identity from
//! whatever user and password it is given. A wrong password is another
//! identity, which our znodes refuse with `NoAuth`.

use std::time::Duration;

use fencing_core::auth::Credentials;
use fencing_core::tls::{TlsMode, TlsOptions};
use fencing_core::{Error, Result};
use zookeeper_client as zk;

use crate::client::ZkResult;
use crate::error::Failure;
use crate::tls::{self, Tls};

/// How long one of our own connections (a four-letter word, a handshake)
/// may take.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The TLS and the credentials of every session.
pub(crate) struct Access {
    mode: TlsMode,
    tls: Option<Tls>,
    digest: Option<Credentials>,
}

impl Access {
    /// Reads the TLS files and checks the credentials.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a mode zookeeper-client cannot do, a file
    /// that cannot be read, or credentials digest cannot take.
    pub(crate) fn load(tls: &TlsOptions, credentials: Option<&Credentials>) -> Result<Self> {
        if let Some(credentials) = credentials {
            check_digest(credentials)?;
        }
        Ok(Self {
            mode: tls::mode(tls)?,
            tls: Tls::load(tls)?,
            digest: credentials.cloned(),
        })
    }

    /// The TLS mode of every session.
    pub(crate) fn mode(&self) -> TlsMode {
        self.mode
    }

    /// The digest user, if sessions log in.
    pub(crate) fn user(&self) -> Option<&str> {
        self.digest.as_ref().map(|c| c.user.as_str())
    }

    /// Opens a session on `connector`, over TLS if asked, and logs it in.
    ///
    /// Digest sends the password as it is, so it goes only to a server that
    /// has answered as ZooKeeper over the transport asked for: the login
    /// follows the session's establishment (`Connector::with_auth` would
    /// send it in the same flight as the connect request, and a plaintext
    /// connection to a TLS port would hand it to a server that logs what
    /// it could not decode). zookeeper-client sends it again on every
    /// reconnection.
    pub(crate) async fn connect(
        &self,
        connector: zk::Connector,
        connect_string: &str,
    ) -> ZkResult<zk::Client> {
        let client = match &self.tls {
            // Every server of the connect string over TLS (`tcp+tls://`).
            Some(tls) => {
                connector
                    .with_tls(tls.session_options())
                    .secure_connect(connect_string)
                    .await?
            }
            None => connector.connect(connect_string).await?,
        };
        if let Some(credentials) = &self.digest {
            let auth = format!("{}:{}", credentials.user, credentials.password());
            client.auth("digest", auth.as_bytes()).await?;
        }
        Ok(client)
    }

    /// The ACL of the resource znodes and lock nodes we create: every
    /// permission, for our identity or for anyone.
    pub(crate) fn acls(&self) -> zk::Acls<'static> {
        if self.digest.is_some() {
            zk::Acls::creator_all()
        } else {
            zk::Acls::anyone_all()
        }
    }

    /// The prefix znode's ACL: every permission but DELETE (ZooKeeper
    /// checks a delete against the parent's ACL, so nobody can delete a
    /// resource znode), for our identity or for anyone.
    pub(crate) fn prefix_acl(&self) -> [zk::Acl; 1] {
        let who = if self.digest.is_some() {
            zk::AuthId::authed()
        } else {
            zk::AuthId::anyone()
        };
        [zk::Acl::new(prefix_permissions(), who)]
    }

    /// Why no session could be opened, when a handshake of our own can
    /// tell: a server refused our TLS (or we its certificate), or a server
    /// speaks TLS where plaintext was asked for. `None` when every server
    /// is simply down, or takes our handshake.
    pub(crate) async fn diagnose(&self, connect_string: &str) -> Option<Failure> {
        let probes: Vec<_> = servers(connect_string)
            .map(|server| {
                let (server, tls) = (server.to_owned(), self.tls.clone());
                tokio::spawn(async move {
                    match tls {
                        Some(tls) => match tls.exchange(&server, "srvr", PROBE_TIMEOUT).await {
                            Err(error) if tls::refused_handshake(&error) => {
                                Some(Failure::Handshake { server, error })
                            }
                            _ => None,
                        },
                        None => tls::speaks_tls(&server, PROBE_TIMEOUT)
                            .await
                            .then_some(Failure::TlsOnly { server }),
                    }
                })
            })
            .collect();
        let mut found = None;
        for probe in probes {
            if let Ok(Some(failure)) = probe.await {
                found.get_or_insert(failure);
            }
        }
        found
    }

    /// Sends a four-letter word (`srvr`, `mntr`) to `server`, over TLS when
    /// sessions use it, and reads the answer until the server closes.
    pub(crate) async fn four_letter_word(
        &self,
        server: &str,
        word: &'static str,
    ) -> std::result::Result<String, String> {
        if let Some(tls) = &self.tls {
            return tls
                .exchange(server, word, PROBE_TIMEOUT)
                .await
                .map_err(|e| e.to_string());
        }
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let ask = async {
            let mut stream = tokio::net::TcpStream::connect(server).await?;
            stream.write_all(word.as_bytes()).await?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await?;
            Ok::<_, std::io::Error>(answer)
        };
        match tokio::time::timeout(PROBE_TIMEOUT, ask).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
        }
    }
}

/// The permissions the prefix znode grants: all but DELETE.
pub(crate) fn prefix_permissions() -> zk::Permission {
    zk::Permission::READ | zk::Permission::WRITE | zk::Permission::CREATE | zk::Permission::ADMIN
}

/// The permissions that change a znode or what is under it.
pub(crate) const WRITE_PERMISSIONS: [zk::Permission; 4] = [
    zk::Permission::WRITE,
    zk::Permission::CREATE,
    zk::Permission::DELETE,
    zk::Permission::ADMIN,
];

/// The servers of a connect string, `host:port,host:port[/chroot]`, as
/// `host:port` (without zookeeper-client's `tcp://` or `tcp+tls://`).
pub(crate) fn servers(connect_string: &str) -> impl Iterator<Item = &str> {
    connect_string
        .split(',')
        .map(|server| {
            let server = server.trim();
            let server = server.find("://").map_or(server, |i| &server[i + 3..]);
            server.find('/').map_or(server, |i| &server[..i])
        })
        .filter(|s| !s.is_empty())
}

/// Digest takes `user:password`: a user name without `:`, and a password.
///
/// # Errors
/// [`Error::InvalidInput`] naming what is missing (never the password).
pub(crate) fn check_digest(credentials: &Credentials) -> Result<()> {
    if credentials.user.is_empty() || credentials.user.contains(':') {
        return Err(Error::invalid_input(
            "ZooKeeper digest credentials need a user name without ':' (zk://USER:PASSWORD@HOST:PORT)",
        ));
    }
    if credentials.password.is_none() {
        // The name is not quoted: a token pasted as the user is a secret.
        return Err(Error::invalid_input(
            "ZooKeeper digest credentials have no password (zk://USER:PASSWORD@HOST:PORT)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_strings_name_their_servers() {
        let all: Vec<&str> = servers("a:1, b:2,c:3/chroot/x").collect();
        assert_eq!(all, ["a:1", "b:2", "c:3"]);
        let all: Vec<&str> = servers("tcp+tls://a:1,tcp://b:2/chroot").collect();
        assert_eq!(all, ["a:1", "b:2"]);
    }

    #[test]
    fn our_znodes_are_ours_once_we_log_in() {
        let open = Access::load(&TlsOptions::new(), None).unwrap();
        assert_eq!(&*open.acls(), &*zk::Acls::anyone_all());
        assert_eq!(open.prefix_acl()[0].auth_id(), &zk::AuthId::anyone());
        let ours =
            Access::load(&TlsOptions::new(), Some(&Credentials::new("fencing", "pw"))).unwrap();
        assert_eq!(&*ours.acls(), &*zk::Acls::creator_all());
        let prefix = &ours.prefix_acl()[0];
        assert_eq!(prefix.auth_id(), &zk::AuthId::authed());
        assert!(!prefix.permission().has(zk::Permission::DELETE));
        assert_eq!(ours.user(), Some("fencing"));
    }

    #[test]
    fn digest_needs_a_user_and_a_password() {
        let bad = |c: Credentials| {
            fencing_testkit::refusal::invalid_input_message("digest", check_digest(&c))
        };
        assert!(bad(Credentials::new("", "hunter2")).contains("user name"));
        assert!(bad(Credentials::new("a:b", "hunter2")).contains("without ':'"));
        let message = bad(Credentials {
            user: "u".into(),
            password: None,
        });
        assert!(message.contains("no password"), "{message}");
        assert!(check_digest(&Credentials::new("u", "")).is_ok());
    }
}
