//! What commands print: text for people, JSON for scripts.

use fencing_tokens::{FencingToken, Holding, Lease};
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
