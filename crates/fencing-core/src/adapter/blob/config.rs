//! What every object store's configuration shares: the bucket (or
//! container), `endpoint=`, `emulator=true`, `adopt_unfenced=true` and
//! `lease_prefix=` (where the bucket issuer keeps its records), and, for
//! a store whose reads tell a `Date`, [`LEASE_EXPIRY`], read
//! from a URL or from `FENCING_<STORE>_…` variables, and the setters for
//! them ([`object_store_config_methods!`](crate::object_store_config_methods)).
//!
//! A store's [`Descriptor`] lists the [`SHARED_OPTIONS`] first in its
//! options, then its own; its `Config`
//! holds an [`ObjectStoreConfig`] and takes its own options (a region, a
//! SAS) from the URL [`ObjectStoreConfig::from_url`] returns:
//!
//! ```
//! use fencing_core::adapter::blob::config::{
//!     ADOPT_UNFENCED, EMULATOR, ENDPOINT, LEASE_PREFIX, ObjectStoreConfig, ObjectStoreKind,
//! };
//! use fencing_core::adapter::descriptor::{Descriptor, OptionKind, UrlOption};
//!
//! const MEM: Descriptor = Descriptor {
//!     name: "mem",
//!     title: "memory",
//!     crate_name: "fencing-mem",
//!     features: &["mem"],
//!     schemes: &["mem"],
//!     shape: "mem://BUCKET",
//!     options: &[
//!         ENDPOINT,
//!         EMULATOR,
//!         ADOPT_UNFENCED,
//!         LEASE_PREFIX,
//!         UrlOption::new("region", OptionKind::Text, "the region"),
//!     ],
//!     tls_modes: &[],
//!     check: |_| Ok(()),
//!     open_issuer: None,
//!     open_store: None,
//! };
//! const KIND: ObjectStoreKind = ObjectStoreKind {
//!     backend: &MEM,
//!     noun: "bucket",
//!     env_prefix: "FENCING_MEM",
//!     emulator_endpoint: "the emulator's address",
//! };
//! let (config, mut url) = ObjectStoreConfig::from_url(&KIND, "mem://b?adopt_unfenced=true&region=r")?;
//! assert_eq!(config.name, "b");
//! assert!(config.adopt_unfenced);
//! assert_eq!(url.query().take_nonempty("region")?.as_deref(), Some("r"));
//! config.finish(&KIND, url)?;
//! // An option the descriptor does not declare is refused, naming those it does.
//! let typo = ObjectStoreConfig::from_url(&KIND, "mem://b?x=1").unwrap_err().to_string();
//! assert!(typo.contains("known options: endpoint, emulator, adopt_unfenced, lease_prefix, region"), "{typo}");
//! # Ok::<(), fencing_core::Error>(())
//! ```

use std::fmt;

use super::{BlobBackend, BlobIssuer, BlobStore, LeaseExpiry};
use crate::adapter::descriptor::{Descriptor, OptionKind, UrlOption};
use crate::adapter::url::{BackendUrl, env, env_any, env_bool};
use crate::{Error, Result};

/// `endpoint=URL`, first of every object store's options.
pub const ENDPOINT: UrlOption = UrlOption::new(
    "endpoint",
    OptionKind::Text,
    "another endpoint than the service's own (an emulator's, an S3-compatible server's, an Azure account's)",
);

/// `emulator=true`: a local emulator's well-known credentials.
pub const EMULATOR: UrlOption = UrlOption::new(
    "emulator",
    OptionKind::Bool,
    "a local emulator's well-known test credentials (needs endpoint=); never for a real store",
)
.default("false");

/// `adopt_unfenced=true`: take over objects written without fencing.
pub const ADOPT_UNFENCED: UrlOption = UrlOption::new(
    "adopt_unfenced",
    OptionKind::Bool,
    "take over objects written without fencing, at mark 0",
)
.default("false");

/// `lease_prefix=P`: where the bucket issuer keeps its lease records.
pub const LEASE_PREFIX: UrlOption = UrlOption::new(
    "lease_prefix",
    OptionKind::Text,
    "the key prefix of the issuer's lease records, one object per resource",
)
.default(BlobIssuer::<crate::memory::MemoryBlobBackend>::DEFAULT_PREFIX);

/// `lease_expiry=waiter-clock|server-clocks-agree`: how the bucket
/// issuer's waiters judge a held record dead ([`LeaseExpiry`]). Only a
/// store whose reads tell a `Date` (S3, Azure) declares it, after the
/// shared options; the others judge on the waiter's clock alone.
pub const LEASE_EXPIRY: UrlOption = UrlOption::new(
    "lease_expiry",
    OptionKind::Choice(&LeaseExpiry::WORDS),
    "how a waiter judges a held lease record dead: waiter-clock (the same record version unchanged for a TTL of its own monotonic clock; no clocks compared) or server-clocks-agree (also the Date of a read against the record's Last-Modified, which assumes every server node's clock agrees with the one that stamped the record: a front end or proxy whose clock runs ahead lets a waiter take over a live lease)",
)
.default(LeaseExpiry::WORDS[0]);

/// The options every object store's descriptor lists first.
pub const SHARED_OPTIONS: [UrlOption; 4] = [ENDPOINT, EMULATOR, ADOPT_UNFENCED, LEASE_PREFIX];

/// What tells one object store's URLs, variables and messages from
/// another's.
#[derive(Clone, Copy, Debug)]
pub struct ObjectStoreKind {
    /// The store's descriptor: its scheme, shape (for "expected …") and
    /// options, [`SHARED_OPTIONS`] first.
    pub backend: &'static Descriptor,
    /// What the authority names (`bucket`, `container`).
    pub noun: &'static str,
    /// The variables' prefix (`FENCING_S3`): `_BUCKET` (the noun, upper
    /// case), `_ENDPOINT`, `_EMULATOR` and `_ADOPT_UNFENCED` follow it.
    pub env_prefix: &'static str,
    /// What `emulator=true`'s endpoint is, for its error message.
    pub emulator_endpoint: &'static str,
}

/// The options every object store takes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectStoreConfig {
    /// The bucket or container.
    pub name: String,
    /// Another endpoint than the service's own.
    pub endpoint: Option<String>,
    /// Use a local emulator's well-known credentials (needs an endpoint).
    pub emulator: bool,
    /// Take over objects written without fencing, at mark 0.
    pub adopt_unfenced: bool,
    /// The issuer's record prefix, if not [`BlobIssuer::DEFAULT_PREFIX`].
    pub lease_prefix: Option<String>,
    /// How the issuer's waiters judge a held record dead ([`LEASE_EXPIRY`],
    /// for a store that declares it).
    pub lease_expiry: LeaseExpiry,
}

impl ObjectStoreConfig {
    /// A config for the bucket or container `name`, nothing else set.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// Parses `SCHEME://NAME[?endpoint=URL&emulator=B&adopt_unfenced=B&…]`
    /// with the kind's descriptor ([`Descriptor::parse`]: every option
    /// known and of its kind), taking the shared options and returning the
    /// URL with the adapter's own left (then [`finish`](Self::finish)).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] as [`Descriptor::parse`] (another scheme, an
    /// unknown option naming the known ones, a bad value), or for a path.
    pub fn from_url(kind: &ObjectStoreKind, url: &str) -> Result<(Self, BackendUrl)> {
        debug_assert!(
            kind.backend.options.starts_with(&SHARED_OPTIONS),
            "{} must list the shared object store options first",
            kind.backend.crate_name
        );
        let mut url = kind.backend.parse(url)?;
        url.expect_no_path(kind.backend.shape)?;
        let mut config = Self::new(url.authority());
        let query = url.query();
        config.endpoint = query.take_nonempty(ENDPOINT.name)?;
        config.emulator = query.take_bool(EMULATOR.name)?.unwrap_or(false);
        config.adopt_unfenced = query.take_bool(ADOPT_UNFENCED.name)?.unwrap_or(false);
        config.lease_prefix = query.take_nonempty(LEASE_PREFIX.name)?;
        config.lease_expiry = query.take_parsed(LEASE_EXPIRY.name)?.unwrap_or_default();
        Ok((config, url))
    }

    /// From `<PREFIX>_<NOUN>` (required), `<PREFIX>_ENDPOINT`,
    /// `<PREFIX>_EMULATOR`, `<PREFIX>_ADOPT_UNFENCED`,
    /// `<PREFIX>_LEASE_PREFIX` and, where the store declares
    /// [`LEASE_EXPIRY`], `<PREFIX>_LEASE_EXPIRY`, validated.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] without the bucket's variable, for a
    /// variable that is not a strict boolean, or as
    /// [`validate`](Self::validate).
    pub fn from_env(kind: &ObjectStoreKind) -> Result<Self> {
        let prefix = kind.env_prefix;
        let name_var = format!("{prefix}_{}", kind.noun.to_ascii_uppercase());
        let config = Self {
            name: env_any(&[&name_var])?,
            endpoint: env(&format!("{prefix}_ENDPOINT")),
            emulator: env_bool(&format!("{prefix}_EMULATOR"))?,
            adopt_unfenced: env_bool(&format!("{prefix}_ADOPT_UNFENCED"))?,
            lease_prefix: env(&format!("{prefix}_LEASE_PREFIX")),
            lease_expiry: Self::lease_expiry_from_env(kind)?,
        };
        config.validate(kind)?;
        Ok(config)
    }

    /// `<PREFIX>_LEASE_EXPIRY`, read only where the store declares
    /// [`LEASE_EXPIRY`].
    fn lease_expiry_from_env(kind: &ObjectStoreKind) -> Result<LeaseExpiry> {
        if !kind.backend.options.contains(&LEASE_EXPIRY) {
            return Ok(LeaseExpiry::default());
        }
        let name = format!("{}_LEASE_EXPIRY", kind.env_prefix);
        env(&name).map_or(Ok(LeaseExpiry::default()), |word| {
            word.parse()
                .map_err(|e| Error::invalid_input(format!("{name}={word:?}: {e}")))
        })
    }

    /// The fenced store on `backend` (built for this bucket), adopting
    /// objects written without fencing if `adopt_unfenced` says so.
    pub fn store<B: BlobBackend>(&self, backend: B) -> BlobStore<B> {
        let store = BlobStore::new(backend).adopt_unfenced(self.adopt_unfenced);
        match &self.lease_prefix {
            Some(prefix) => store.with_lease_prefix(prefix.clone()),
            None => store,
        }
    }

    /// The bucket issuer on `backend` (built for this bucket), its records
    /// under `lease_prefix`, its expiry judged as `lease_expiry` says.
    pub fn issuer<B: BlobBackend>(&self, backend: B) -> BlobIssuer<B> {
        let issuer = BlobIssuer::new(backend).with_expiry(self.lease_expiry);
        match &self.lease_prefix {
            Some(prefix) => issuer.with_prefix(prefix.clone()),
            None => issuer,
        }
    }

    /// Refuses an empty bucket and `emulator=true` without an endpoint.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the problem.
    pub fn validate(&self, kind: &ObjectStoreKind) -> Result<()> {
        if self.name.is_empty() {
            return Err(Error::invalid_input(format!(
                "no {}: expected {}",
                kind.noun, kind.backend.shape
            )));
        }
        if let Some(endpoint) = &self.endpoint
            && endpoint.contains('?')
        {
            // An Azure "Blob service SAS URL" pasted as the endpoint: the
            // credential goes in its own option, where it is never shown.
            return Err(Error::invalid_input(format!(
                "endpoint {:?} has a query: give the endpoint alone, and a SAS as sas=…",
                crate::redact(endpoint)
            )));
        }
        if self.emulator && self.endpoint.is_none() {
            return Err(Error::invalid_input(format!(
                "emulator=true needs endpoint=URL ({})",
                kind.emulator_endpoint
            )));
        }
        Ok(())
    }

    /// After the adapter took its own options from `url`:
    /// [`Descriptor::finish`] (an option declared but left untaken is the
    /// adapter's bug), then [`validate`](Self::validate).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the problem.
    pub fn finish(&self, kind: &ObjectStoreKind, url: BackendUrl) -> Result<()> {
        kind.backend.finish(url)?;
        self.validate(kind)
    }

    /// Adds the shared fields to an adapter's `Debug`, the bucket under
    /// `noun`.
    pub fn debug_fields(&self, noun: &str, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field(noun, &self.name)
            .field("endpoint", &self.endpoint.as_deref().map(crate::redact))
            .field("emulator", &self.emulator)
            .field("adopt_unfenced", &self.adopt_unfenced)
            .field("lease_prefix", &self.lease_prefix)
            .field("lease_expiry", &self.lease_expiry);
    }
}

/// The setters and getters every object store's config has, as inherent
/// methods of an adapter's config holding an [`ObjectStoreConfig`] in the
/// field `$common`: `with_endpoint`, `with_emulator`, `with_adopt_unfenced`,
/// `endpoint()` and the getter `$name()` for the bucket or container.
///
/// Given the adapter's [`ObjectStoreKind`] and the docs of each, also
/// `new($name)` and `from_env()`, which differ only in their docs (what
/// else the adapter reads from the environment); the config must be
/// `Default`.
#[macro_export]
macro_rules! object_store_config_methods {
    (
        $common:ident, $name:ident, $kind:expr;
        $(#[$new_doc:meta])* new;
        $(#[$env_doc:meta])* from_env;
    ) => {
        $(#[$new_doc])*
        pub fn new($name: impl Into<String>) -> Self {
            Self {
                $common: $crate::adapter::blob::config::ObjectStoreConfig::new($name),
                ..Self::default()
            }
        }

        $(#[$env_doc])*
        pub fn from_env() -> $crate::Result<Self> {
            Ok(Self {
                $common: $crate::adapter::blob::config::ObjectStoreConfig::from_env(&$kind)?,
                ..Self::default()
            })
        }

        $crate::object_store_config_methods!($common, $name);
    };
    ($common:ident, $name:ident) => {
        /// Another endpoint than the service's own (an emulator's, an
        /// S3-compatible server's, a sovereign cloud's).
        #[must_use]
        pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
            self.$common.endpoint = Some(endpoint.into());
            self
        }

        /// Use a local emulator's well-known credentials instead of real
        /// ones (needs an endpoint). Never for a real bucket or account.
        #[must_use]
        pub fn with_emulator(mut self, emulator: bool) -> Self {
            self.$common.emulator = emulator;
            self
        }

        /// Take over objects written without fencing, at mark 0.
        #[must_use]
        pub fn with_adopt_unfenced(mut self, adopt: bool) -> Self {
            self.$common.adopt_unfenced = adopt;
            self
        }

        /// Where the issuer keeps its lease records (default `fencing-lease/`).
        #[must_use]
        pub fn with_lease_prefix(mut self, prefix: impl Into<String>) -> Self {
            self.$common.lease_prefix = Some(prefix.into());
            self
        }

        /// How the issuer's waiters judge a held record dead (default
        /// [`LeaseExpiry::WaiterClock`](fencing_core::adapter::blob::LeaseExpiry::WaiterClock):
        /// no clocks compared); see
        /// [`LeaseExpiry::ServerClocksAgree`](fencing_core::adapter::blob::LeaseExpiry::ServerClocksAgree)
        /// for what the other assumes. Where reads tell no `Date`, the
        /// waiter's clock is the only rule whatever this says.
        #[must_use]
        pub fn with_lease_expiry(mut self, expiry: $crate::adapter::blob::LeaseExpiry) -> Self {
            self.$common.lease_expiry = expiry;
            self
        }

        #[doc = concat!("The ", stringify!($name), ".")]
        pub fn $name(&self) -> &str {
            &self.$common.name
        }

        /// The endpoint, if one is set (or known yet).
        pub fn endpoint(&self) -> Option<&str> {
            self.$common.endpoint.as_deref()
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEM: Descriptor = Descriptor {
        name: "mem",
        title: "memory",
        crate_name: "fencing-mem",
        features: &["mem"],
        schemes: &["mem"],
        shape: "mem://BUCKET",
        options: &[
            ENDPOINT,
            EMULATOR,
            ADOPT_UNFENCED,
            LEASE_PREFIX,
            UrlOption::new("region", OptionKind::Text, "a region"),
        ],
        tls_modes: &[],
        check: |_| Ok(()),
        open_issuer: None,
        open_store: None,
    };

    const KIND: ObjectStoreKind = ObjectStoreKind {
        backend: &MEM,
        noun: "bucket",
        env_prefix: "FENCING_TEST_MEM",
        emulator_endpoint: "the emulator's address",
    };

    use crate::error::invalid_input_message;

    fn invalid<T: fmt::Debug>(r: Result<T>) -> String {
        invalid_input_message("mem://", r)
    }

    #[test]
    fn shared_options_and_messages() {
        let (c, rest) = ObjectStoreConfig::from_url(
            &KIND,
            "mem://b/?endpoint=e&emulator=1&region=r&lease_prefix=l/",
        )
        .unwrap();
        assert_eq!(c.endpoint.as_deref(), Some("e"));
        assert_eq!(c.lease_prefix.as_deref(), Some("l/"));
        assert_eq!(
            c.issuer(crate::memory::MemoryBlobBackend::new()).prefix(),
            "l/"
        );
        assert!(
            format!("{:?}", c.store(crate::memory::MemoryBlobBackend::new()))
                .contains(r#"lease_prefix: "l/""#),
            "the store does not know where the lease records are"
        );
        assert!(c.emulator && !c.adopt_unfenced);
        // region= declared but not taken: a bug, named.
        assert!(invalid(c.finish(&KIND, rest)).contains("\"region\" is declared by fencing-mem"));
        let parse = |url| ObjectStoreConfig::from_url(&KIND, url).map(|(c, _)| c);
        assert!(invalid(parse("s3://b")).contains("not a memory URL (mem://BUCKET)"));
        assert!(
            invalid(parse("mem://b?regoin=r"))
                .contains("unknown option \"regoin\" in a mem:// URL; known options: endpoint, emulator, adopt_unfenced, lease_prefix, region")
        );
        assert_eq!(
            invalid(parse("mem://b/k")),
            "unexpected path \"/k\" in a mem:// URL: expected mem://BUCKET"
        );
        let no_bucket = parse("mem://").unwrap();
        assert_eq!(
            invalid(no_bucket.validate(&KIND)),
            "no bucket: expected mem://BUCKET"
        );
        let no_endpoint = parse("mem://b?emulator=true").unwrap();
        assert!(invalid(no_endpoint.validate(&KIND)).contains("needs endpoint="));
    }

    /// `lease_expiry=` where a store declares it; refused where it does not.
    #[test]
    fn lease_expiry_is_taken_where_declared() {
        const DATED: Descriptor = Descriptor {
            options: &[
                ENDPOINT,
                EMULATOR,
                ADOPT_UNFENCED,
                LEASE_PREFIX,
                LEASE_EXPIRY,
            ],
            ..MEM
        };
        let dated = ObjectStoreKind {
            backend: &DATED,
            ..KIND
        };
        let parse = |kind, url| ObjectStoreConfig::from_url(kind, url).map(|(c, _)| c);
        let memory = || crate::memory::MemoryBlobBackend::new();
        let agreeing = parse(&dated, "mem://b?lease_expiry=server-clocks-agree").unwrap();
        assert_eq!(
            agreeing.issuer(memory()).expiry(),
            LeaseExpiry::ServerClocksAgree
        );
        let default = parse(&dated, "mem://b").unwrap();
        assert_eq!(default.issuer(memory()).expiry(), LeaseExpiry::WaiterClock);
        assert!(
            invalid(parse(&dated, "mem://b?lease_expiry=server")).contains(
                "lease_expiry=\"server\": expected one of waiter-clock, server-clocks-agree"
            )
        );
        assert!(
            invalid(parse(&KIND, "mem://b?lease_expiry=waiter-clock"))
                .contains("unknown option \"lease_expiry\"")
        );
    }

    #[test]
    fn env_needs_the_bucket_and_strict_booleans() {
        // Variables no other test reads.
        assert_eq!(
            invalid(ObjectStoreConfig::from_env(&KIND)),
            "FENCING_TEST_MEM_BUCKET is not set"
        );
        assert!(!env_bool("FENCING_TEST_MEM_UNSET").unwrap());
    }
}
