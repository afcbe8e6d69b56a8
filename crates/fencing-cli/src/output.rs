//! What commands print: text for people, JSON for scripts.

use fencing::{FencingToken, Holding, Lease};
use serde::Serialize;

/// A lease as printed by `acquire`, `renew` and `holder`.
#[derive(Debug, Serialize)]
pub(crate) struct LeaseView<'a> {
    resource: &'a str,
    token: FencingToken,
    holder: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_ms: Option<u128>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_in_ms: Option<u128>,
}

impl<'a> LeaseView<'a> {
    pub(crate) fn of_lease(lease: &'a Lease) -> Self {
        Self {
            resource: lease.resource(),
            token: lease.token(),
            holder: lease.holder().as_str(),
            ttl_ms: Some(lease.ttl().as_millis()),
            expires_in_ms: Some(lease.remaining().as_millis()),
        }
    }

    pub(crate) fn of_holding(resource: &'a str, holding: &'a Holding) -> Self {
        Self {
            resource,
            token: holding.token,
            holder: holding.holder.as_str(),
            ttl_ms: None,
            expires_in_ms: None,
        }
    }

    pub(crate) fn print(&self, json: bool) {
        if json {
            out!("{}", serde_json::to_string(self).expect("serializable"));
        } else {
            out!("resource {:?}", self.resource);
            out!("token    {}", self.token);
            out!("holder   {}", self.holder);
            if let (Some(ttl), Some(left)) = (self.ttl_ms, self.expires_in_ms) {
                out!("ttl      {ttl}ms ({left}ms left)");
            }
        }
    }
}

/// The URL with its password and secret option values (`sas=`,
/// `password=`, `sig=`) hidden, for printing; other options stay readable.
pub(crate) fn redact(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some((scheme, rest)) = url.split_once("://") {
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        if let Some((userinfo, host)) = authority.rsplit_once('@')
            && let Some((user, _password)) = userinfo.split_once(':')
        {
            out = format!("{scheme}://{user}:***@{host}{}", &rest[authority_end..]);
        }
    }
    for secret in ["sas=", "password=", "sig="] {
        let mut from = 0;
        while let Some(found) = out[from..].find(secret) {
            let start = from + found;
            let value_start = start + secret.len();
            // Only a whole option name: after `?` or `&`.
            if start > 0 && matches!(out.as_bytes()[start - 1], b'?' | b'&') {
                let end = out[value_start..]
                    .find('&')
                    .map_or(out.len(), |i| value_start + i);
                out.replace_range(value_start..end, "***");
            }
            from = value_start.min(out.len());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_and_sas_tokens_are_hidden() {
        assert_eq!(
            redact("postgres://fencing:secret@127.0.0.1:5432/fencing"),
            "postgres://fencing:***@127.0.0.1:5432/fencing"
        );
        assert_eq!(
            redact("az://c?endpoint=https://a.blob.core.windows.net&sas=sv%3D1%26sig%3Dx"),
            "az://c?endpoint=https://a.blob.core.windows.net&sas=***"
        );
        assert_eq!(
            redact("postgres://h/db?user=u&password=secret&sslmode=disable"),
            "postgres://h/db?user=u&password=***&sslmode=disable"
        );
        assert_eq!(redact("redis://127.0.0.1:6380"), "redis://127.0.0.1:6380");
        assert_eq!(redact("sqlite:///tmp/a.db"), "sqlite:///tmp/a.db");
    }
}
