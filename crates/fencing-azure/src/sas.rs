//! Signing an account SAS with an account key (HMAC-SHA256), since the
//! `azure_storage_blob` 1.x client has no Shared Key credential.

use std::time::{Duration, SystemTime};

use azure_core::http::Url;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use fencing_core::{Error, Result};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The query string of an account SAS for the blob service of `account`,
/// signed with its base64 key: read, write, delete, list, add and create on
/// services, containers and objects, over http or https, valid from now
/// until `lifetime` from now.
///
/// # Errors
/// [`Error::InvalidInput`] if `key_base64` is not base64.
pub fn account_sas(account: &str, key_base64: &str, lifetime: Duration) -> Result<String> {
    let expiry = utc_timestamp(SystemTime::now() + lifetime);
    sign(account, key_base64, &expiry)
}

/// The SAS for an explicit `expiry` (`YYYY-MM-DDThh:mm:ssZ`).
fn sign(account: &str, key_base64: &str, expiry: &str) -> Result<String> {
    let (version, services, resource_types, permissions, protocol) =
        ("2022-11-02", "b", "sco", "rwdlac", "https,http");
    // The account SAS string-to-sign for versions from 2020-12-06: start,
    // IP range and encryption scope are empty.
    let to_sign = format!(
        "{account}\n{permissions}\n{services}\n{resource_types}\n\n{expiry}\n\n{protocol}\n{version}\n\n"
    );
    let key = STANDARD
        .decode(key_base64)
        .map_err(|e| Error::invalid_input(format!("the account key is not base64: {e}")))?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key)
        .map_err(|e| Error::invalid_input(format!("unusable account key: {e}")))?;
    mac.update(to_sign.as_bytes());
    let signature = STANDARD.encode(mac.finalize().into_bytes());
    Ok(format!(
        "sv={version}&ss={services}&srt={resource_types}&sp={permissions}&se={}&spr={}&sig={}",
        encode(expiry),
        encode(protocol),
        encode(&signature)
    ))
}

/// The URL of `container` under `endpoint` (`https://ACCOUNT.blob.core.windows.net`
/// or `http://host:port/account`) with `sas` as its query.
///
/// # Errors
/// [`Error::InvalidInput`] for an endpoint that does not make a URL.
pub(crate) fn container_url(endpoint: &str, container: &str, sas: &str) -> Result<Url> {
    let sas = sas.trim_start_matches('?');
    let url = format!("{}/{container}?{sas}", endpoint.trim_end_matches('/'));
    url.parse().map_err(|e| {
        Error::invalid_input(format!(
            "{:?} is not a usable endpoint: {e}",
            fencing_core::redact(endpoint)
        ))
    })
}

/// Percent-encodes a query value (base64 and timestamps need no more).
fn encode(value: &str) -> String {
    value
        .chars()
        .map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '-' | '.' | '_' | '~' => c.to_string(),
            other => format!("%{:02X}", u32::from(other)),
        })
        .collect()
}

/// `YYYY-MM-DDThh:mm:ssZ` for `time` (UTC), as a SAS's `se=` wants it.
fn utc_timestamp(time: SystemTime) -> String {
    humantime::format_rfc3339_seconds(time).to_string()
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    const KEY: &str = crate::config::EMULATOR_ACCOUNT_KEY;

    #[test]
    fn the_sas_is_signed_and_encoded() {
        let sas = sign("devstoreaccount1", KEY, "2099-01-01T00:00:00Z").unwrap();
        assert!(
            sas.starts_with("sv=2022-11-02&ss=b&srt=sco&sp=rwdlac&se=2099-01-01T00%3A00%3A00Z&spr=https%2Chttp&sig="),
            "{sas}"
        );
        // 32 bytes of HMAC: 44 base64 characters, `+ / =` percent-encoded.
        let sig = sas.rsplit("sig=").next().unwrap();
        assert!(!sig.contains(['+', '/', '=']), "{sig}");
        assert!(matches!(
            account_sas("a", "not base64!", Duration::from_secs(60)),
            Err(Error::InvalidInput { .. })
        ));
        let url = container_url("http://127.0.0.1:10000/devstoreaccount1/", "c", &sas).unwrap();
        assert_eq!(url.path(), "/devstoreaccount1/c");
    }

    #[test]
    fn expiry_is_utc_and_short_lived() {
        assert_eq!(utc_timestamp(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_661); // 2000-02-29 01:01:01
        assert_eq!(utc_timestamp(t), "2000-02-29T01:01:01Z");
        let sas = account_sas("a", KEY, Duration::from_secs(3600)).unwrap();
        assert!(!sas.contains("se=2099"), "{sas}");
    }
}
