//! A candidate of the election tests, shared by the `election-candidate`
//! process and the in-process stand-in the memory issuer needs (its state
//! lives in one process).

use std::sync::Arc;
use std::time::Duration;

use fencing_tokens::election::Election;
use fencing_tokens::{Error, FencedStore, FencingToken, TokenIssuer};

/// A store the candidate fences on takeover and writes, by name, and the key.
pub type Target = (String, Arc<dyn FencedStore>, String);

/// Opens the named stores (`None` if the run skips one).
pub async fn open_targets(names_and_keys: &[(String, String)]) -> Option<Vec<Target>> {
    let mut targets = Vec::new();
    for (name, key) in names_and_keys {
        targets.push((name.clone(), crate::store(name).await?, key.clone()));
    }
    Some(targets)
}

/// `candidate`'s election on `resource`, fencing every target on takeover.
pub fn election(
    issuer: Arc<dyn TokenIssuer>,
    resource: &str,
    candidate: &str,
    ttl: Duration,
    targets: &[Target],
) -> Election {
    targets.iter().fold(
        Election::new(issuer, resource, candidate, ttl),
        |election, (_, store, key)| election.fence_on_takeover(store.clone(), key),
    )
}

/// Writes every target with `token`, without asking whether the term still
/// holds (a write already on its way), and says what each store answered:
/// `accepted NAME`, `refused NAME PRESENTED CURRENT` or `error NAME …`.
pub async fn in_flight_writes(targets: &[Target], token: FencingToken, who: &str) -> Vec<String> {
    let mut verdicts = Vec::new();
    for (name, store, key) in targets {
        let value = format!("in flight from {who} with {token}");
        verdicts.push(match store.put(key, value.into(), token).await {
            Ok(()) => format!("accepted {name}"),
            Err(Error::StaleToken {
                presented, current, ..
            }) => format!("refused {name} {presented} {current}"),
            Err(e) => format!("error {name} {e}"),
        });
    }
    verdicts
}
