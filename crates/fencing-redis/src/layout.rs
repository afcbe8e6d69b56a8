//! [`Layout`]: whose lock recipe the issuer's keys follow.

use redis::Script;

use crate::scripts;

/// Where a resource's lock lives in Redis, and so which other clients
/// share it.
///
/// Whatever the layout, a grant takes the lock and increments the counter
/// in one script, a live holder acquiring again keeps its token, and a
/// record another client wrote is a foreign holder, never overwritten.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    /// Ours: `{prefix}{resource}:lock` holds `token:holder`, and the counter
    /// is `{prefix}{resource}:fence` (default prefix `fencing:`).
    /// redis-py's `Lock` or node-redlock on that key exclude our holders
    /// and we theirs; they have no token.
    #[default]
    Fencing,
    /// The lock at the lock name itself (URL option `layout=set-nx`),
    /// where redis-py's `Lock(NAME)`, node-redlock and a hand-written
    /// `SET NAME value NX PX` keep theirs: a string `token:holder` at
    /// `{prefix}{resource}` (default prefix empty), the counter at
    /// `{prefix}{resource}:fence`. Those clients exclude our holders and we
    /// theirs; they have no token.
    SetNx,
    /// Redisson's `RLock` and `RFencedLock` (URL option `layout=redisson`):
    /// the lock is a hash at `{prefix}{resource}` (default prefix empty, so
    /// resource `R` is `redisson.getFencedLock("R")`), one field per
    /// holder; the counter is `RFencedLock`'s own,
    /// `redisson_lock_token:{…}`. Our holder is the field
    /// `fencing:{holder}`, its token the field's value; a release deletes
    /// the hash and publishes Redisson's unlock message, so its waiters
    /// wake. Grants of ours and of `RFencedLock` increment one counter:
    /// their tokens compare.
    Redisson,
}

impl Layout {
    /// The URL words: `layout=fencing|redisson`.
    pub(crate) const WORDS: &'static [&'static str] = &["fencing", "set-nx", "redisson"];

    pub(crate) fn parse(word: &str) -> Option<Self> {
        match word {
            "fencing" => Some(Self::Fencing),
            "set-nx" => Some(Self::SetNx),
            "redisson" => Some(Self::Redisson),
            _ => None,
        }
    }

    /// The key prefix when none is given.
    pub(crate) fn default_prefix(self) -> &'static str {
        match self {
            Self::Fencing => "fencing:",
            Self::SetNx | Self::Redisson => "",
        }
    }

    /// Refuses a resource whose keys would be another resource's, before
    /// anything is sent: a lock written over another's counter, or two
    /// resources counting in one counter, is a record neither owns. Ours
    /// (`R:lock`, `R:fence`) cannot meet: the suffixes differ. With
    /// `layout=set-nx`, `R:fence` is the counter of `R`. With
    /// `layout=redisson`, a lock name starting `redisson_lock_token:` is
    /// some lock's counter, and a lock name `{N}` (one pair of braces
    /// around the whole name) has the counter of lock name `N`.
    pub(crate) fn check(self, prefix: &str, resource: &str) -> fencing_core::Result<()> {
        let refuse = |why: String| {
            Err(fencing_core::Error::invalid_input(format!(
                "resource {resource:?}: {why}; name it otherwise"
            )))
        };
        let name = self.lock_key(prefix, resource);
        match self {
            Self::Fencing => Ok(()),
            Self::SetNx if name.ends_with(":fence") => refuse(format!(
                "with layout=set-nx the key {name:?} is the fence counter of the resource \
                 without \":fence\""
            )),
            Self::Redisson
                if name
                    .strip_prefix(COUNTER)
                    .is_some_and(|rest| rest.starts_with(':')) =>
            {
                refuse(format!(
                    "with layout=redisson the key {name:?} is the token counter of another lock"
                ))
            }
            Self::Redisson
                if name.len() >= 2
                    && name.starts_with('{')
                    && name.ends_with('}')
                    && !name[1..].contains('{') =>
            {
                refuse(format!(
                    "with layout=redisson the lock {name:?} counts in {:?}, the token counter \
                     of the lock {:?}",
                    self.fence_key(prefix, resource),
                    &name[1..name.len() - 1]
                ))
            }
            Self::SetNx | Self::Redisson => Ok(()),
        }
    }

    /// The lock's key.
    pub(crate) fn lock_key(self, prefix: &str, resource: &str) -> String {
        match self {
            Self::Fencing => format!("{prefix}{resource}:lock"),
            Self::SetNx | Self::Redisson => format!("{prefix}{resource}"),
        }
    }

    /// The counter's key.
    pub(crate) fn fence_key(self, prefix: &str, resource: &str) -> String {
        match self {
            Self::Fencing | Self::SetNx => format!("{prefix}{resource}:fence"),
            Self::Redisson => redisson_name(COUNTER, &self.lock_key(prefix, resource)),
        }
    }

    /// Where the grant script remembers that the server process `run_id`
    /// passed its slower checks (see `scripts::GUARD`): under the prefix,
    /// for every layout, so an ACL that allows the issuer's keys allows
    /// it. A lock or counter of another layout or prefix that lands on
    /// the name costs only speed: the script trusts nothing there but a
    /// string holding this very `run_id`, and writes over nothing else.
    pub(crate) fn verdict_key(prefix: &str, run_id: &str) -> String {
        format!("{prefix}guard-verdict:{run_id}")
    }

    /// The channel other clients' waiters listen on for this lock's
    /// release (ours listen on the issuer's own, see `wake`).
    pub(crate) fn foreign_channel(self, prefix: &str, resource: &str) -> Option<String> {
        match self {
            Self::Fencing | Self::SetNx => None,
            Self::Redisson => Some(redisson_name(
                "redisson_lock__channel",
                &self.lock_key(prefix, resource),
            )),
        }
    }

    pub(crate) fn scripts(self) -> Scripts {
        let record = match self {
            Self::Fencing | Self::SetNx => scripts::Record::String,
            Self::Redisson => scripts::Record::RedissonHash,
        };
        Scripts {
            acquire: Script::new(&scripts::acquire(record)),
            renew: Script::new(&scripts::renew(record)),
            release: Script::new(&scripts::release(record)),
            raise_floor: Script::new(&scripts::raise_floor()),
            holder: Script::new(&scripts::holder(record)),
            remove_idle: Script::new(&scripts::remove_idle(record)),
        }
    }
}

/// The prefix of `RFencedLock`'s token counter's name.
const COUNTER: &str = "redisson_lock_token";

/// Redisson's name for an object that belongs to `name`
/// (`RedissonObject.prefixName`): `{name}` in braces, so both land in one
/// cluster slot, unless the name has a hash tag of its own.
fn redisson_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// One layout's scripts.
#[derive(Clone)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) renew: Script,
    pub(crate) release: Script,
    pub(crate) raise_floor: Script,
    pub(crate) holder: Script,
    pub(crate) remove_idle: Script,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redisson_keys_are_redissons_own() {
        let r = Layout::Redisson;
        assert_eq!(r.lock_key("", "orders"), "orders");
        assert_eq!(r.fence_key("", "orders"), "redisson_lock_token:{orders}");
        assert_eq!(
            r.foreign_channel("app:", "orders").as_deref(),
            Some("redisson_lock__channel:{app:orders}")
        );
        // A name with a hash tag keeps it.
        assert_eq!(
            r.fence_key("", "{eu}orders"),
            "redisson_lock_token:{eu}orders"
        );
        let f = Layout::Fencing;
        assert_eq!(
            (f.lock_key("fencing:", "R"), f.fence_key("fencing:", "R")),
            ("fencing:R:lock".to_owned(), "fencing:R:fence".to_owned())
        );
        assert_eq!(f.foreign_channel("fencing:", "R"), None);
        let s = Layout::SetNx;
        assert_eq!(
            (s.lock_key("", "R"), s.fence_key("", "R")),
            ("R".to_owned(), "R:fence".to_owned())
        );
    }

    #[test]
    fn only_names_whose_keys_are_anothers_are_refused() {
        let refused = |l: Layout, p: &str, r: &str| l.check(p, r).is_err();
        // A refused name's keys are another name's; an allowed one's are not.
        for (l, p, r, other) in [
            (Layout::SetNx, "", "R:fence", "R"),
            (Layout::Redisson, "", "redisson_lock_token:{R}", "R"),
            (Layout::Redisson, "", "{R}", "R"),
            (Layout::Redisson, "redisson_lock_token:", "{R}", "R"),
        ] {
            assert!(refused(l, p, r), "{l:?} {p}{r}");
            let (mine, theirs) = (
                [l.lock_key(p, r), l.fence_key(p, r)],
                [l.lock_key("", other), l.fence_key("", other)],
            );
            assert!(
                mine.iter().any(|k| theirs.contains(k)),
                "{mine:?} {theirs:?}"
            );
        }
        for (l, p, r) in [
            (Layout::Fencing, "fencing:", "R:fence"),
            (Layout::Fencing, "", "redisson_lock_token:{R}"),
            (Layout::Redisson, "", "{eu}orders"),
            (Layout::Redisson, "", "{a}{b}"),
            (Layout::Redisson, "app:", "{R}"),
            (Layout::Redisson, "", "redisson_lock_tokens"),
        ] {
            assert!(!refused(l, p, r), "{l:?} {p}{r}");
        }
    }
}
