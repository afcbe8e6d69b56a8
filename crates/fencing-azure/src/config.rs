//! [`AzureConfig`]: an Azure Blob store from a URL, the environment or
//! setters.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use azure_core::credentials::TokenCredential;
use azure_core::http::Url;
use azure_storage_blob::BlobContainerClientOptions;
use fencing_core::adapter::blob::config::{
    ADOPT_UNFENCED, EMULATOR, ENDPOINT, LEASE_EXPIRY, LEASE_PREFIX, ObjectStoreConfig,
    ObjectStoreKind,
};
use fencing_core::adapter::descriptor::{self, Descriptor, OptionKind, UrlOption};
use fencing_core::adapter::url::env;
use fencing_core::{Error, Result};

use crate::sas::{account_sas, container_url};
use crate::{AzureBackend, AzureIssuer, AzureStore};

/// The Azure Blob backend, as the registry, `fence --help` and the README
/// see it.
pub const BACKEND: Descriptor = Descriptor {
    name: "azure",
    title: "Azure Blob",
    crate_name: "fencing-azure",
    features: &["azure"],
    schemes: &["az"],
    shape: "az://CONTAINER",
    options: &[
        ENDPOINT,
        EMULATOR,
        ADOPT_UNFENCED,
        LEASE_PREFIX,
        LEASE_EXPIRY,
        UrlOption::new(
            "account",
            OptionKind::Text,
            "instead of endpoint=: https://NAME.blob.core.windows.net",
        ),
        UrlOption::new(
            "sas",
            OptionKind::Text,
            "a SAS token, percent-encoded (sv%3D…%26sig%3D…)",
        )
        .secret(),
        UrlOption::new(
            "sas_lifetime",
            OptionKind::Duration,
            "how long a SAS signed from an account key lasts",
        )
        .default("1h"),
    ],
    // The endpoint's scheme says whether TLS is used.
    tls_modes: &[],
    check: |url| AzureConfig::from_url(url).map(drop),
    open_issuer: Some(|url| {
        Box::pin(
            async move { descriptor::issuer(AzureConfig::from_url(&url)?.connect_issuer().await?) },
        )
    }),
    open_store: Some(|url| {
        Box::pin(
            async move { descriptor::store(AzureConfig::from_url(&url)?.connect_store().await?) },
        )
    }),
};

/// The `az://` URL's variables and messages.
const KIND: ObjectStoreKind = ObjectStoreKind {
    backend: &BACKEND,
    noun: "container",
    env_prefix: "FENCING_AZURE",
    emulator_endpoint: "Azurite's, e.g. http://127.0.0.1:10000/devstoreaccount1",
};

/// Azurite's development account.
pub(crate) const EMULATOR_ACCOUNT: &str = "devstoreaccount1";

/// Its published key (the same in every Azurite; not a secret).
pub(crate) const EMULATOR_ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// How long a SAS signed from an account key is valid by default.
pub const DEFAULT_SAS_LIFETIME: Duration = Duration::from_secs(3600);

/// How the container is reached.
#[derive(Clone, Default)]
enum Credential {
    /// Look in the environment when connecting.
    #[default]
    FromEnv,
    /// A SAS token (query string).
    Sas(String),
    /// An account key: a SAS is signed from it.
    AccountKey {
        account: Option<String>,
        key: String,
    },
    /// An Entra ID token credential.
    Token(Arc<dyn TokenCredential>),
}

/// How to reach one Azure Blob container: parsed from
/// `az://CONTAINER?…`, read from the environment, or set with the `with_*`
/// setters; [`connect_store`](Self::connect_store) opens the store on it
/// and [`connect_issuer`](Self::connect_issuer) the bucket issuer.
///
/// Credentials, in this order: what a setter or the URL gave (a SAS, an
/// account key, a connection string, an Entra ID token credential); else
/// the Azure CLI's variables: `AZURE_STORAGE_CONNECTION_STRING`,
/// `AZURE_STORAGE_SAS_TOKEN`, or `AZURE_STORAGE_KEY` (with
/// `AZURE_STORAGE_ACCOUNT` or the account in the endpoint). An account key
/// never travels: a short-lived account SAS (one hour by default,
/// `sas_lifetime=`) is signed from it, since the `azure_storage_blob` 1.x
/// client has no Shared Key credential; a long-running process reconnects
/// before it expires or uses a SAS or token credential it manages. None
/// found is an error when connecting. Azurite's development account is used
/// only with `emulator=true` (or a connection string with
/// `UseDevelopmentStorage=true`), never as a fallback.
///
/// | URL option | meaning |
/// | --- | --- |
/// | `endpoint=URL` | the account's blob endpoint (`https://ACCOUNT.blob.core.windows.net`, `http://127.0.0.1:10000/devstoreaccount1`) |
/// | `account=NAME` | instead of `endpoint=`: `https://NAME.blob.core.windows.net` |
/// | `sas=TOKEN` | a SAS, percent-encoded (`sv%3D…%26sig%3D…`) |
/// | `sas_lifetime=DURATION` | how long a SAS signed from an account key lasts (`1h`) |
/// | `emulator=true` | Azurite's development account; needs `endpoint=` |
/// | `adopt_unfenced=true` | take over blobs written without fencing at mark 0 |
/// | `lease_expiry=server-clocks-agree` | the bucket lease also judges a held record dead by the `Date` of a read against its `Last-Modified`: assumes every server node's clock agrees with the one that stamped it (default `waiter-clock`: no clocks compared) |
///
/// ```
/// let config = fencing_azure::AzureConfig::from_url(
///     "az://my-test-container?endpoint=http://127.0.0.1:10000/devstoreaccount1&emulator=true",
/// )?;
/// assert_eq!(config.container(), "my-test-container");
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct AzureConfig {
    common: ObjectStoreConfig,
    credential: Credential,
    sas_lifetime: Option<Duration>,
    options: Option<BlobContainerClientOptions>,
}

impl fmt::Debug for AzureConfig {
    /// Hides the SAS and the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let credential = match &self.credential {
            Credential::FromEnv => "from the environment",
            Credential::Sas(_) => "SAS ***",
            Credential::AccountKey { .. } => "account key ***",
            Credential::Token(_) => "token credential",
        };
        let mut d = f.debug_struct("AzureConfig");
        self.common.debug_fields("container", &mut d);
        d.field("credential", &credential).finish_non_exhaustive()
    }
}

impl AzureConfig {
    fencing_core::object_store_config_methods! {
        common, container, KIND;
        /// A config for `container`; credentials from the environment.
        new;
        /// From the environment: `FENCING_AZURE_CONTAINER` (required),
        /// `FENCING_AZURE_ENDPOINT` (else `AZURE_STORAGE_ACCOUNT`'s endpoint or
        /// the connection string's), `FENCING_AZURE_EMULATOR=true`,
        /// `FENCING_AZURE_ADOPT_UNFENCED=true`; credentials as the type's docs
        /// say.
        ///
        /// # Errors
        /// [`Error::InvalidInput`] without `FENCING_AZURE_CONTAINER`, or for a
        /// variable that is not a strict boolean.
        from_env;
    }

    /// Parses `az://CONTAINER?endpoint=URL|account=NAME[&sas=TOKEN&sas_lifetime=D&emulator=B&adopt_unfenced=B]`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for another scheme, no container, a path, an
    /// unknown option (naming the known ones), a bad boolean or duration,
    /// both `endpoint=` and `account=`, or `emulator=true` without
    /// `endpoint=`.
    pub fn from_url(url: &str) -> Result<Self> {
        let (common, mut parsed) = ObjectStoreConfig::from_url(&KIND, url)?;
        let query = parsed.query();
        let mut config = Self {
            common,
            ..Self::default()
        };
        if let Some(account) = query.take_nonempty("account")? {
            if config.common.endpoint.is_some() {
                return Err(Error::invalid_input("give endpoint= or account=, not both"));
            }
            config.common.endpoint = Some(format!("https://{account}.blob.core.windows.net"));
        }
        if let Some(sas) = query.take_nonempty("sas")? {
            config.credential = Credential::Sas(sas);
        }
        config.sas_lifetime = query.take_duration("sas_lifetime")?;
        config.common.finish(&KIND, parsed)?;
        Ok(config)
    }

    /// A SAS token (the query string, with or without `?`).
    #[must_use]
    pub fn with_sas(mut self, sas: impl Into<String>) -> Self {
        self.credential = Credential::Sas(sas.into());
        self
    }

    /// An account key (base64); the account is the endpoint's unless
    /// given. A short-lived SAS is signed from it when connecting.
    #[must_use]
    pub fn with_account_key(mut self, account: Option<String>, key: impl Into<String>) -> Self {
        self.credential = Credential::AccountKey {
            account,
            key: key.into(),
        };
        self
    }

    /// A connection string (`AccountName=…;AccountKey=…`,
    /// `BlobEndpoint=…;SharedAccessSignature=…`, or
    /// `UseDevelopmentStorage=true` for Azurite).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a string with no usable credential.
    pub fn with_connection_string(mut self, connection_string: &str) -> Result<Self> {
        self.apply_connection_string(connection_string)?;
        Ok(self)
    }

    /// An Entra ID token credential (needs an https endpoint).
    #[must_use]
    pub fn with_token_credential(mut self, credential: Arc<dyn TokenCredential>) -> Self {
        self.credential = Credential::Token(credential);
        self
    }

    /// How long a SAS signed from an account key lasts.
    #[must_use]
    pub fn with_sas_lifetime(mut self, lifetime: Duration) -> Self {
        self.sas_lifetime = Some(lifetime);
        self
    }

    /// Client options for reads (writes get the same, without retries).
    #[must_use]
    pub fn with_options(mut self, options: BlobContainerClientOptions) -> Self {
        self.options = Some(options);
        self
    }

    fn apply_connection_string(&mut self, connection_string: &str) -> Result<()> {
        let mut fields = std::collections::HashMap::new();
        for part in connection_string
            .split(';')
            .filter(|p| !p.trim().is_empty())
        {
            let (k, v) = part.split_once('=').ok_or_else(|| {
                Error::invalid_input("a connection string is Key=Value;Key=Value;…")
            })?;
            fields.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
        if fields.get("usedevelopmentstorage").map(String::as_str) == Some("true") {
            self.common.emulator = true;
            self.common
                .endpoint
                .get_or_insert_with(|| format!("http://127.0.0.1:10000/{EMULATOR_ACCOUNT}"));
            return Ok(());
        }
        let account = fields.get("accountname").cloned();
        if self.common.endpoint.is_none() {
            self.common.endpoint = match (fields.get("blobendpoint"), &account) {
                (Some(endpoint), _) => Some(endpoint.clone()),
                (None, Some(account)) => {
                    let protocol = fields
                        .get("defaultendpointsprotocol")
                        .map_or("https", String::as_str);
                    let suffix = fields
                        .get("endpointsuffix")
                        .map_or("core.windows.net", String::as_str);
                    Some(format!("{protocol}://{account}.blob.{suffix}"))
                }
                (None, None) => None,
            };
        }
        self.credential = match (
            fields.get("sharedaccesssignature"),
            fields.get("accountkey"),
        ) {
            (Some(sas), _) => Credential::Sas(sas.clone()),
            (None, Some(key)) => Credential::AccountKey {
                account,
                key: key.clone(),
            },
            (None, None) => {
                return Err(Error::invalid_input(
                    "the connection string has neither AccountKey nor SharedAccessSignature",
                ));
            }
        };
        Ok(())
    }

    /// The credential from the environment, if the config has none.
    fn resolve_from_env(&mut self) -> Result<()> {
        if !matches!(self.credential, Credential::FromEnv) || self.common.emulator {
            return Ok(());
        }
        if let Some(cs) = env("AZURE_STORAGE_CONNECTION_STRING") {
            return self.apply_connection_string(&cs);
        }
        if self.common.endpoint.is_none()
            && let Some(account) = env("AZURE_STORAGE_ACCOUNT")
        {
            self.common.endpoint = Some(format!("https://{account}.blob.core.windows.net"));
        }
        if let Some(sas) = env("AZURE_STORAGE_SAS_TOKEN") {
            self.credential = Credential::Sas(sas);
        } else if let Some(key) = env("AZURE_STORAGE_KEY") {
            self.credential = Credential::AccountKey {
                account: env("AZURE_STORAGE_ACCOUNT"),
                key,
            };
        }
        Ok(())
    }

    /// The backend (sync: nothing is sent until the first operation).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] without an endpoint, without credentials
    /// (naming `sas=`, the variables and `emulator=true`), for a key that
    /// is not base64, or a URL the client refuses.
    pub fn backend(&self) -> Result<AzureBackend> {
        let (url, token) = self.container_url()?;
        AzureBackend::new(url, token, self.options.clone())
    }

    /// The container's URL (with a SAS in its query, unless a token
    /// credential is used) and the token credential.
    pub(crate) fn container_url(&self) -> Result<(Url, Option<Arc<dyn TokenCredential>>)> {
        let mut config = self.clone();
        config.resolve_from_env()?;
        config.common.validate(&KIND)?;
        let Some(endpoint) = config.common.endpoint.clone() else {
            return Err(Error::invalid_input(format!(
                "az://{}: no endpoint: add endpoint=https://ACCOUNT.blob.core.windows.net (or account=NAME)",
                config.common.name
            )));
        };
        let lifetime = config.sas_lifetime.unwrap_or(DEFAULT_SAS_LIFETIME);
        let (sas, token) = match &config.credential {
            _ if config.common.emulator => (
                account_sas(EMULATOR_ACCOUNT, EMULATOR_ACCOUNT_KEY, lifetime)?,
                None,
            ),
            Credential::Sas(sas) => (sas.clone(), None),
            Credential::AccountKey { account, key } => {
                let account = match account {
                    Some(account) => account.clone(),
                    None => account_of(&endpoint).ok_or_else(|| {
                        Error::invalid_input(format!(
                            "cannot tell the account from {:?}: set AZURE_STORAGE_ACCOUNT",
                            fencing_core::redact(&endpoint)
                        ))
                    })?,
                };
                (account_sas(&account, key, lifetime)?, None)
            }
            Credential::Token(credential) => (String::new(), Some(credential.clone())),
            Credential::FromEnv => {
                return Err(Error::invalid_input(format!(
                    "no Azure credentials for az://{}: add sas=… to the URL or set \
                     AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_SAS_TOKEN or AZURE_STORAGE_KEY; \
                     for Azurite add emulator=true to the URL",
                    config.common.name
                )));
            }
        };
        Ok((container_url(&endpoint, &config.common.name, &sas)?, token))
    }

    /// Opens the store: [`backend`](Self::backend) in the fenced-write loop.
    ///
    /// # Errors
    /// As [`backend`](Self::backend).
    pub async fn connect_store(&self) -> Result<AzureStore> {
        Ok(self.common.store(self.backend()?))
    }

    /// Opens the bucket issuer: [`backend`](Self::backend), its lease
    /// records under `lease_prefix` in the container.
    ///
    /// # Errors
    /// As [`backend`](Self::backend).
    pub async fn connect_issuer(&self) -> Result<AzureIssuer> {
        Ok(self.common.issuer(self.backend()?))
    }
}

/// The account an endpoint names: `ACCOUNT.blob.…` or the first path
/// segment (`http://127.0.0.1:10000/devstoreaccount1`).
fn account_of(endpoint: &str) -> Option<String> {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if let Some((account, _)) = host.split_once(".blob.") {
        return Some(account.to_owned());
    }
    path.split('/').find(|s| !s.is_empty()).map(str::to_owned)
}

#[cfg(test)]
mod tests;
