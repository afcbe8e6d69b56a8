//! The TLS options every backend takes, on each driver's own modes.

use fencing_core::Result;
use fencing_core::tls::{TlsMode, TlsOptions};

/// The TLS options on PostgreSQL's own (libpq's) modes.
#[cfg(feature = "postgres")]
pub(super) fn postgres_tls(
    options: sqlx::postgres::PgConnectOptions,
    tls: &TlsOptions,
) -> Result<sqlx::postgres::PgConnectOptions> {
    use sqlx::postgres::PgSslMode;
    if tls.is_default() {
        return Ok(options); // the URL had none: the driver's default, prefer
    }
    let mode = match tls.mode_for("postgres", TlsMode::Prefer, crate::config::TLS_MODES)? {
        TlsMode::Disable => PgSslMode::Disable,
        TlsMode::Prefer => PgSslMode::Prefer,
        TlsMode::Require => PgSslMode::Require,
        TlsMode::VerifyCa => PgSslMode::VerifyCa,
        TlsMode::VerifyFull => PgSslMode::VerifyFull,
    };
    let mut options = options.ssl_mode(mode);
    if let Some(ca) = tls.read_ca()? {
        options = options.ssl_root_cert_from_pem(ca);
    }
    if let Some(identity) = tls.read_identity()? {
        options = options
            .ssl_client_cert_from_pem(identity.cert)
            .ssl_client_key_from_pem(identity.key.expose());
    }
    Ok(options)
}

#[cfg(feature = "postgres")]
pub(super) fn pg_mode(mode: sqlx::postgres::PgSslMode) -> TlsMode {
    use sqlx::postgres::PgSslMode;
    match mode {
        PgSslMode::Disable => TlsMode::Disable,
        PgSslMode::Allow | PgSslMode::Prefer => TlsMode::Prefer,
        PgSslMode::Require => TlsMode::Require,
        PgSslMode::VerifyCa => TlsMode::VerifyCa,
        PgSslMode::VerifyFull => TlsMode::VerifyFull,
    }
}

/// The TLS options on MySQL's modes (`verify-full` is its `VERIFY_IDENTITY`).
#[cfg(feature = "mysql")]
pub(super) fn mysql_tls(
    options: sqlx::mysql::MySqlConnectOptions,
    tls: &TlsOptions,
) -> Result<sqlx::mysql::MySqlConnectOptions> {
    use sqlx::mysql::MySqlSslMode;
    if tls.is_default() {
        return Ok(options);
    }
    let mode = match tls.mode_for("mysql", TlsMode::Prefer, crate::config::TLS_MODES)? {
        TlsMode::Disable => MySqlSslMode::Disabled,
        TlsMode::Prefer => MySqlSslMode::Preferred,
        TlsMode::Require => MySqlSslMode::Required,
        TlsMode::VerifyCa => MySqlSslMode::VerifyCa,
        TlsMode::VerifyFull => MySqlSslMode::VerifyIdentity,
    };
    let mut options = options.ssl_mode(mode);
    if let Some(ca) = tls.read_ca()? {
        options = options.ssl_ca_from_pem(ca);
    }
    if let Some(identity) = tls.read_identity()? {
        options = options
            .ssl_client_cert_from_pem(identity.cert)
            .ssl_client_key_from_pem(identity.key.expose());
    }
    Ok(options)
}

/// `mysql://u:p@HOST:port/db` → `HOST`, for the transport check.
#[cfg(feature = "mysql")]
pub(super) fn mysql_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, h)| h)
        .to_owned()
}
