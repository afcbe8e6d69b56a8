//! Backends named by URL: the one place a URL becomes an issuer or a store.
//!
//! Each backend crate describes itself once, in a
//! [`Descriptor`] (its schemes, what it opens,
//! its URL options with their types, defaults and docs, and how to open
//! it); the registry is the list of the descriptors this build has, one
//! line per backend in the `backends!` list below. Everything else that
//! names backends is generated from it: [`open_issuer`] / [`open_store`],
//! [`grammar`] (what `fence --help` prints), [`markdown_table`] (the
//! README's backend table, which a test keeps current) and the
//! integration matrix. Adding a backend is its crate, one feature in
//! `Cargo.toml` and one line here.
//!
//! Every backend opened here is wrapped in
//! [`Instrumented`](fencing_core::instrument::Instrumented): its calls
//! record the metrics of `docs/metrics.md` and open `tracing` spans
//! carrying the resource or key and the token. With no `metrics` recorder
//! and no `tracing` subscriber installed that costs a few atomic loads and
//! a small allocation per call, nothing next to one network round trip; in
//! return, installing an exporter is all an application does to see stale
//! refusals, grants and lost leases of every backend. Do not wrap what
//! these return again.
//!
//! Emulator credentials (moto's test keys, fake-gcs-server's anonymous
//! access, Azurite's development account) are used only with
//! `emulator=true` in the URL, never as a fallback for missing real ones.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use fencing_tokens::registry::{self, Role};
//! let sqlite = registry::backend_for("sqlite:///tmp/app.db").expect("the sqlite feature");
//! assert!(sqlite.opens(Role::Store) && sqlite.opens(Role::Issuer));
//! assert!(registry::grammar(Role::Store).contains("fencing_table_prefix=TEXT"));
//! # }
//! ```

mod render;

use std::sync::Arc;

pub use fencing_core::adapter::descriptor::{Descriptor, OptionKind, Role, UrlOption};
use fencing_core::redact;
use fencing_core::{Error, FencedStore, TokenIssuer};

/// The registry: one line per backend, `"feature" => descriptor` (several
/// features, `|`-separated, for a crate of several).
macro_rules! backends {
    ($($($feature:literal)|+ => $descriptor:path),* $(,)?) => {
        /// Every backend of this build, in the order help texts list them.
        pub const BACKENDS: &[&Descriptor] = &[
            $(#[cfg(any($(feature = $feature),+))] &$descriptor,)*
        ];

        /// Every backend feature of the `fencing-tokens` crate, and whether this
        /// build has it.
        pub const FEATURES: &[(&str, bool)] = &[$($(($feature, cfg!(feature = $feature)),)+)*];
    };
}

backends! {
    "sqlite" | "postgres" | "mysql" => fencing_sql::BACKEND,
    "redis" => fencing_redis::BACKEND,
    "etcd" => fencing_etcd::BACKEND,
    "zookeeper" => fencing_zookeeper::BACKEND,
    "s3" => fencing_s3::BACKEND,
    "gcs" => fencing_gcs::BACKEND,
    "azure" => fencing_azure::BACKEND,
    "dynamodb" => fencing_dynamodb::BACKEND,
}

fn scheme(url: &str) -> &str {
    url.split_once(':').map_or("", |(s, _)| s)
}

/// The backend of this build that takes `url`'s scheme.
pub fn backend_for(url: &str) -> Option<&'static Descriptor> {
    let scheme = scheme(url).to_ascii_lowercase();
    BACKENDS.iter().copied().find(|d| d.takes(&scheme))
}

/// The backends of this build that open `role`.
pub fn backends(role: Role) -> impl Iterator<Item = &'static Descriptor> {
    BACKENDS.iter().copied().filter(move |d| d.opens(role))
}

/// The URL grammar of every backend that opens `role`: a shape and its
/// options per backend (for help texts).
pub fn grammar(role: Role) -> String {
    let mut out = String::new();
    for backend in backends(role) {
        out.push_str(&render::grammar(backend, 96));
        out.push('\n');
    }
    out.push_str(
        "Durations: 500ms, 2s, 1m, 1h. Percent-encode `&`, `=` and `@` in values and passwords; \
         secrets never show in an error.",
    );
    out
}

/// The backend table of `docs/backends.md` (crate links relative to
/// `docs/`): one row per backend of this build
/// (`render::markdown_row`).
pub fn markdown_table() -> String {
    let mut out = String::from(render::MARKDOWN_HEADER);
    for backend in BACKENDS {
        out.push('\n');
        out.push_str(&render::markdown_row(backend));
    }
    out
}

/// The facade README's feature table: for each backend of this build, the
/// features that bring it in, what it opens and the shape of its URL
/// ([`markdown_table`], the one in `docs/backends.md`, adds the crates and every
/// option).
pub fn feature_table() -> String {
    let mut out = String::from("| feature | backend | opens | URL |\n| --- | --- | --- | --- |");
    for backend in BACKENDS {
        let features: Vec<String> = backend.features.iter().map(|f| format!("`{f}`")).collect();
        out.push_str(&format!(
            "\n| {} | {} | {} | `{}` |",
            features.join(", "),
            backend.title,
            backend.roles(),
            backend.shape.replace('|', "\\|"),
        ));
    }
    out
}

/// The error for a URL this build cannot open as `role`.
fn unsupported(url: &str, role: Role) -> Error {
    let scheme = scheme(url);
    if let Some(backend) = backend_for(url) {
        return Error::invalid_input(format!(
            "{scheme}:// is a {} URL, which opens a {}, not a {}",
            backend.title,
            backend.roles(),
            role.as_str()
        ));
    }
    let missing: Vec<&str> = FEATURES
        .iter()
        .filter(|(_, enabled)| !enabled)
        .map(|(feature, _)| *feature)
        .collect();
    let hint = if missing.is_empty() {
        String::new()
    } else {
        format!(
            "\n(this build lacks the `fencing-tokens` features {}: one may add the backend you mean)",
            missing.join(", ")
        )
    };
    Error::invalid_input(format!(
        "{:?} is not a {} URL; expected one of:\n{}{hint}",
        redact(url),
        role.as_str(),
        grammar(role)
    ))
}

/// Opens the issuer a URL names.
///
/// # Errors
/// [`Error::InvalidInput`] for a URL no backend of this build opens as an
/// issuer, or one its backend refuses; otherwise what the backend's
/// `connect_issuer` returns.
pub async fn open_issuer(url: &str) -> Result<Arc<dyn TokenIssuer>, Error> {
    match backend_for(url).and_then(|d| d.open_issuer) {
        Some(open) => open(url.to_owned()).await,
        None => Err(unsupported(url, Role::Issuer)),
    }
}

/// Opens the store a URL names.
///
/// # Errors
/// [`Error::InvalidInput`] for a URL no backend of this build opens as a
/// store, or one its backend refuses (an object store without credentials
/// names `emulator=true`); otherwise what the backend's `connect_store`
/// returns.
pub async fn open_store(url: &str) -> Result<Arc<dyn FencedStore>, Error> {
    match backend_for(url).and_then(|d| d.open_store) {
        Some(open) => open(url.to_owned()).await,
        None => Err(unsupported(url, Role::Store)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unknown_schemes_name_the_grammar_and_hide_secrets() {
        let e = open_store("ftp://u:hunter2@h/x").await.unwrap_err();
        let message = e.to_string();
        assert!(matches!(e, Error::InvalidInput { .. }));
        assert!(!message.contains("hunter2"), "{message}");
        for backend in backends(Role::Store) {
            assert!(message.contains(backend.shape), "{message}");
        }
    }

    #[test]
    fn every_secret_option_is_one_the_redaction_hides() {
        for backend in BACKENDS {
            for option in backend.options() {
                assert!(
                    !option.secret || fencing_core::redact::is_secret_option(option.name),
                    "{}'s option {} is secret, but the redaction would show it",
                    backend.name,
                    option.name
                );
            }
        }
    }

    #[test]
    fn every_declared_option_is_read_by_its_backend() {
        for backend in BACKENDS {
            let base = |scheme: &str| match backend.name {
                "sql" => format!("{scheme}://u:pw@h/db"),
                _ => format!("{scheme}://h:1"),
            };
            fencing_testkit::refusal::every_option_is_read(backend, base, backend.check);
        }
    }

    #[test]
    fn schemes_belong_to_one_backend() {
        let mut seen = std::collections::HashMap::new();
        for backend in BACKENDS {
            for scheme in backend.schemes {
                if let Some(other) = seen.insert(*scheme, backend.name) {
                    panic!("{scheme}:// is both {other}'s and {}'s", backend.name);
                }
            }
        }
    }
}
