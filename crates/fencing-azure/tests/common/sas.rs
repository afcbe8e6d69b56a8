//! An account SAS for the Azurite emulator's well-known development account,
//! signed here with HMAC-SHA256 (the client library has no Shared Key
//! credential). Shared by the tests and the example.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Azurite's development account.
pub(crate) const DEV_ACCOUNT: &str = "devstoreaccount1";
/// Its published key (the same in every Azurite; not a secret).
pub(crate) const DEV_ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The query string of an account SAS for the blob service: read, write,
/// delete, list, add, create on services, containers and objects, over
/// http or https, until 2099.
pub(crate) fn account_sas(account: &str, key_base64: &str) -> String {
    let (version, services, resource_types, permissions, expiry, protocol) = (
        "2022-11-02",
        "b",
        "sco",
        "rwdlac",
        "2099-01-01T00:00:00Z",
        "https,http",
    );
    // The account SAS string-to-sign for versions from 2020-12-06: start,
    // IP range and encryption scope are empty.
    let to_sign = format!(
        "{account}\n{permissions}\n{services}\n{resource_types}\n\n{expiry}\n\n{protocol}\n{version}\n\n"
    );
    let key = STANDARD
        .decode(key_base64)
        .expect("the account key is base64");
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key length");
    mac.update(to_sign.as_bytes());
    let signature = STANDARD.encode(mac.finalize().into_bytes());
    format!(
        "sv={version}&ss={services}&srt={resource_types}&sp={permissions}&se={}&spr={}&sig={}",
        encode(expiry),
        encode(protocol),
        encode(&signature)
    )
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

/// The URL of `container` under `endpoint` (`http://host:port/account`),
/// with a SAS for `account`.
pub(crate) fn container_url(
    endpoint: &str,
    container: &str,
    account: &str,
    key_base64: &str,
) -> String {
    format!(
        "{}/{container}?{}",
        endpoint.trim_end_matches('/'),
        account_sas(account, key_base64)
    )
}
