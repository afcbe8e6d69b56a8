//! Finding the real servers the suites run against.
//!
//! Endpoints come from `FENCING_*` environment variables whose defaults are
//! the ports of the servers' specs (`fencing_servers`, which
//! `integration/services.sh` starts and `docker-compose.yml` is generated
//! from). A test whose server does not answer **fails**, naming the server
//! and how to start it. The only way to skip is to ask: `FENCING_SKIP=etcd,s3`.

pub use fencing_servers::servers::*;
pub use fencing_servers::{Server, TLS_PASSWORD};

/// `url` with `option` (`name=value`) appended to its query.
pub fn with_option(url: &str, option: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{option}")
}

/// A file of the throwaway PKI (`ca.pem`, `other-ca.pem`, `client.pem`,
/// `client-key.pem`): `FENCING_TLS_DIR`, else `integration/.state/tls`.
pub fn tls_file(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(fencing_servers::TLS_DIR.endpoint()).join(name)
}

/// `url` with the TLS options that trust the throwaway CA and present its
/// client certificate: `sslrootcert=…&sslcert=…&sslkey=…`.
pub fn with_test_tls(url: &str) -> String {
    let file = |n: &str| tls_file(n).display().to_string();
    with_option(
        url,
        &format!(
            "sslrootcert={}&sslcert={}&sslkey={}",
            file("ca.pem"),
            file("client.pem"),
            file("client-key.pem")
        ),
    )
}

/// Asserts that no text of `error` (its `Display`, every `source()`, its
/// `Debug`, and [`fencing_core::Error::chain`]) shows `secret`.
///
/// # Panics
/// When one does, quoting it.
pub fn assert_no_secret(what: &str, error: &fencing_core::Error, secret: &str) {
    let mut texts = vec![error.to_string(), format!("{error:?}"), error.chain()];
    let mut cause = std::error::Error::source(error);
    while let Some(e) = cause {
        texts.push(e.to_string());
        texts.push(format!("{e:?}"));
        cause = e.source();
    }
    for text in texts {
        assert!(
            !text.contains(secret),
            "{what}: the secret shows in {text:?}"
        );
    }
}
