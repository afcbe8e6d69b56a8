//! The TLS options of a backend URL ([`crate::tls`]), taken from its query.

use std::path::PathBuf;

use super::Query;
use crate::Result;
use crate::tls::{TlsMode, TlsOptions};

impl Query {
    /// Takes `sslmode`, `sslrootcert`, `sslcert` and `sslkey`
    /// ([`TlsOptions::URL_OPTIONS`]) and checks that they fit together.
    ///
    /// ```
    /// use fencing_core::adapter::url::BackendUrl;
    /// use fencing_core::tls::{TlsMode, TlsOptions};
    ///
    /// let mut url = BackendUrl::parse("etcd://10.0.0.1:2379?sslrootcert=/etc/ca.pem")?;
    /// let tls = url.query().take_tls()?;
    /// assert_eq!(tls.mode(TlsMode::Disable), TlsMode::VerifyFull);
    /// url.finish(TlsOptions::URL_OPTIONS)?;
    /// # Ok::<(), fencing_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) for an unknown
    /// mode, an empty path, a certificate without its key (or the
    /// reverse), or files given with `sslmode=disable`.
    pub fn take_tls(&mut self) -> Result<TlsOptions> {
        let mode = self
            .take_nonempty("sslmode")?
            .map(|m| m.parse::<TlsMode>())
            .transpose()?;
        let ca_file = self.take_nonempty("sslrootcert")?.map(PathBuf::from);
        let cert_file = self.take_nonempty("sslcert")?.map(PathBuf::from);
        let key_file = self.take_nonempty("sslkey")?.map(PathBuf::from);
        TlsOptions::from_url_options(mode, ca_file, cert_file, key_file)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::error::invalid_input_message;

    fn parse(query: &str) -> Result<TlsOptions> {
        Query::parse(query)?.take_tls()
    }

    #[test]
    fn modes_default_from_the_files_and_the_scheme() {
        assert_eq!(parse("").unwrap().mode(TlsMode::Disable), TlsMode::Disable);
        assert_eq!(
            parse("").unwrap().mode(TlsMode::VerifyFull),
            TlsMode::VerifyFull
        );
        assert_eq!(
            parse("sslrootcert=/ca.pem").unwrap().mode(TlsMode::Disable),
            TlsMode::VerifyFull
        );
        assert_eq!(
            parse("sslmode=require").unwrap().mode(TlsMode::VerifyFull),
            TlsMode::Require
        );
        let mtls = parse("sslcert=/c.pem&sslkey=/k.pem&sslmode=verify-ca").unwrap();
        assert_eq!(mtls.mode(TlsMode::Disable), TlsMode::VerifyCa);
        assert_eq!(
            mtls.client_cert_files(),
            Some((Path::new("/c.pem"), Path::new("/k.pem")))
        );
    }

    #[test]
    fn bad_combinations_are_refused_by_name() {
        let invalid = |q| invalid_input_message(q, parse(q));
        assert!(invalid("sslmode=verify").contains("expected disable, prefer, require"));
        assert!(invalid("sslmode=allow").contains("starts in plaintext"));
        assert!(invalid("sslcert=/c.pem").contains("without sslkey"));
        assert!(invalid("sslkey=/k.pem").contains("without sslcert"));
        assert!(invalid("sslmode=disable&sslrootcert=/ca.pem").contains("certificates need TLS"));
        assert!(invalid("sslrootcert=").contains("needs a value"));
        let offered = [TlsMode::Disable, TlsMode::VerifyFull];
        let message = invalid_input_message(
            "verify-ca on etcd",
            parse("sslmode=verify-ca")
                .unwrap()
                .mode_for("etcd", TlsMode::Disable, &offered),
        );
        assert!(
            message.contains("etcd") && message.contains("disable, verify-full"),
            "{message}"
        );
    }
}
