//! Who connects: a user name and password ([`Credentials`]) taken from a
//! backend URL's `user:password@` or set by hand, and the [`Secret`] that
//! holds a password or key so that no `Debug` or `Display` shows it.
//! (How the connection is encrypted is [`crate::tls`]; cloud SDKs bring
//! their own credential types.)

use std::fmt;

use crate::percent::percent_decode;
use crate::{Error, Result};

/// A password, key or token: its `Debug` and `Display` show `***`, so a
/// config, a span or an error that holds one never prints it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret<T = String>(T);

impl<T> Secret<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> Self {
        Self(value)
    }

    /// The value itself, for the client library that needs it.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl<T> fmt::Display for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

/// A user name and its password, from a URL's `user:password@` or set by
/// hand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// The user name (empty when only a password is given, as in
    /// `redis://:PASSWORD@host`).
    pub user: String,
    /// The password, if any.
    pub password: Option<Secret>,
}

impl Credentials {
    /// `user` with `password`.
    pub fn new(user: impl Into<String>, password: impl Into<Secret>) -> Self {
        Self {
            user: user.into(),
            password: Some(password.into()),
        }
    }

    /// Splits `user:password@hosts` into the credentials (percent-decoded)
    /// and the hosts. No `@`: no credentials.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for bad percent-encoding (the message never
    /// shows the password).
    pub fn split_authority(authority: &str) -> Result<(Option<Self>, &str)> {
        let Some((userinfo, hosts)) = authority.rsplit_once('@') else {
            return Ok((None, authority));
        };
        let (user, password) = match userinfo.split_once(':') {
            Some((user, password)) => (user, Some(password)),
            None => (userinfo, None),
        };
        let decode = |s: &str, what: &str| {
            percent_decode(s).map_err(|_| {
                Error::invalid_input(format!("bad percent-encoding in the URL's {what}"))
            })
        };
        Ok((
            Some(Self {
                user: decode(user, "user name")?,
                password: password
                    .map(|p| decode(p, "password").map(Secret::new))
                    .transpose()?,
            }),
            hosts,
        ))
    }

    /// The password, or `""`.
    pub fn password(&self) -> &str {
        self.password.as_ref().map_or("", |p| p.expose().as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::url::BackendUrl;

    #[test]
    fn credentials_come_from_the_authority_and_never_print() {
        let url = BackendUrl::parse("redis://default:p%40ss@h:1,g:2/0").unwrap();
        let (creds, hosts) = Credentials::split_authority(url.authority()).unwrap();
        let creds = creds.unwrap();
        assert_eq!(
            (creds.user.as_str(), creds.password(), hosts),
            ("default", "p@ss", "h:1,g:2")
        );
        assert!(!format!("{creds:?}").contains("p@ss"));
        let (none, hosts) = Credentials::split_authority("h:1").unwrap();
        assert_eq!((none, hosts), (None, "h:1"));
        let (only_user, _) = Credentials::split_authority("u@h").unwrap();
        assert_eq!(only_user.unwrap().password, None);
        assert_eq!(format!("{}", Secret::new("x")), "***");
    }
}
