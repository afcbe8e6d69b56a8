//! [`DynamoConfig`]: a DynamoDB store from a URL, the environment or setters.

use std::fmt;
use std::path::PathBuf;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::Credentials;
use fencing_aws::AwsOptions;
use fencing_core::adapter::descriptor::{self, Descriptor, OptionKind, UrlOption};
use fencing_core::adapter::url::{env, env_bool};
use fencing_core::{Error, Result};

use crate::{DynamoIssuer, DynamoStore};

/// The DynamoDB backend, as the registry, `fence --help` and the README see it.
pub const BACKEND: Descriptor = Descriptor {
    name: "dynamodb",
    title: "DynamoDB",
    crate_name: "fencing-dynamodb",
    features: &["dynamodb"],
    schemes: &["dynamodb"],
    shape: "dynamodb://TABLE",
    options: &[
        UrlOption::new(
            "endpoint",
            OptionKind::Text,
            "a DynamoDB-compatible endpoint (else AWS_ENDPOINT_URL_DYNAMODB / AWS_ENDPOINT_URL, or AWS)",
        ),
        UrlOption::new(
            "emulator",
            OptionKind::Bool,
            "a local emulator's test keys (test/test); needs endpoint=",
        )
        .default("false"),
        UrlOption::new(
            "region",
            OptionKind::Text,
            "the region (else AWS_REGION, the profile, us-east-1)",
        ),
        UrlOption::new(
            "create_table",
            OptionKind::Bool,
            "create the table (hash key pk of type S, on-demand) if it is missing",
        )
        .default("false"),
        UrlOption::new(
            "issuer_prefix",
            OptionKind::Text,
            "the prefix of the issuer's lease items' pk, apart from the store's keys",
        )
        .default("fencing-lease:"),
        UrlOption::new(
            "sslrootcert",
            OptionKind::Path,
            "trust the CA certificates in this PEM file instead of the system roots (an https:// endpoint with a private CA)",
        ),
    ],
    // sslrootcert= is its own option above: the endpoint's scheme says
    // whether TLS is used, and the SDK always checks the certificate.
    tls_modes: &[],
    check: |url| DynamoConfig::from_url(url).map(drop),
    open_issuer: Some(|url| {
        Box::pin(async move {
            descriptor::issuer(DynamoConfig::from_url(&url)?.connect_issuer().await?)
        })
    }),
    open_store: Some(|url| {
        Box::pin(
            async move { descriptor::store(DynamoConfig::from_url(&url)?.connect_store().await?) },
        )
    }),
};

/// How to reach one DynamoDB table: parsed from `dynamodb://TABLE?…`, read
/// from the environment, or set with the `with_*` setters;
/// [`connect_store`](Self::connect_store) opens the store on it and
/// [`connect_issuer`](Self::connect_issuer) the issuer on the same table.
///
/// Credentials and region follow AWS's default chain (`aws-config`): the
/// `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`
/// variables, `AWS_PROFILE` and the shared files, web identity, the ECS and
/// EC2 instance roles. No credentials found is an error when connecting, never
/// a fallback to an emulator's keys: those are used only with
/// `emulator=true`.
///
/// | URL option | meaning |
/// | --- | --- |
/// | `endpoint=URL` | a DynamoDB-compatible endpoint (else `AWS_ENDPOINT_URL_DYNAMODB`/`AWS_ENDPOINT_URL`, or AWS) |
/// | `emulator=true` | a local emulator's test keys (`test`/`test`); needs `endpoint=` |
/// | `region=R` | the region (else `AWS_REGION`, the profile, `us-east-1`) |
/// | `create_table=true` | create the table (hash key `pk`, S, on-demand) if missing, and wait until it is active |
/// | `issuer_prefix=P` | the prefix of the issuer's lease items' `pk` (default `fencing-lease:`) |
/// | `sslrootcert=PATH` | trust the CA certificates in PATH (PEM) instead of the system roots: an `https://` endpoint with a private CA |
///
/// ```
/// let config = fencing_dynamodb::DynamoConfig::from_url(
///     "dynamodb://fencing?endpoint=http://127.0.0.1:5010&emulator=true&create_table=true",
/// )?;
/// assert_eq!(config.table(), "fencing");
/// assert!(fencing_dynamodb::DynamoConfig::from_url("dynamodb://t?endpont=x").is_err());
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct DynamoConfig {
    table: String,
    endpoint: Option<String>,
    emulator: bool,
    region: Option<String>,
    create_table: bool,
    issuer_prefix: Option<String>,
    ca_file: Option<PathBuf>,
    credentials: Option<Credentials>,
}

impl fmt::Debug for DynamoConfig {
    /// Hides the credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoConfig")
            .field("table", &self.table)
            .field(
                "endpoint",
                &self.endpoint.as_deref().map(fencing_core::redact),
            )
            .field("emulator", &self.emulator)
            .field("region", &self.region)
            .field("create_table", &self.create_table)
            .field("issuer_prefix", &self.issuer_prefix)
            .field("ca_file", &self.ca_file)
            .field("credentials", &self.credentials.as_ref().map(|_| "***"))
            .finish()
    }
}

impl DynamoConfig {
    /// A config for `table` with AWS's default chain and nothing else set.
    pub fn new(table: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            ..Self::default()
        }
    }

    /// Parses `dynamodb://TABLE[?endpoint=URL&emulator=B&region=R&create_table=B&issuer_prefix=P&sslrootcert=PATH]`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for another scheme, no table or a bad table
    /// name, a path, an unknown option (naming the known ones), a value that
    /// is not a strict boolean, `emulator=true` without `endpoint=`, or
    /// `sslrootcert=` with an `http://` endpoint.
    pub fn from_url(url: &str) -> Result<Self> {
        let mut parsed = BACKEND.parse(url)?;
        parsed.expect_no_path(BACKEND.shape)?;
        let table = parsed.authority().to_owned();
        let query = parsed.query();
        let config = Self {
            table,
            endpoint: query.take_nonempty("endpoint")?,
            emulator: query.take_bool("emulator")?.unwrap_or(false),
            region: query.take_nonempty("region")?,
            create_table: query.take_bool("create_table")?.unwrap_or(false),
            issuer_prefix: query.take_nonempty("issuer_prefix")?,
            ca_file: query.take_nonempty("sslrootcert")?.map(PathBuf::from),
            credentials: None,
        };
        BACKEND.finish(parsed)?;
        config.validate()?;
        Ok(config)
    }

    /// From the environment: `FENCING_DYNAMODB_TABLE` (required),
    /// `FENCING_DYNAMODB_ENDPOINT`, `FENCING_DYNAMODB_REGION`,
    /// `FENCING_DYNAMODB_EMULATOR=true`,
    /// `FENCING_DYNAMODB_CREATE_TABLE=true`,
    /// `FENCING_DYNAMODB_ISSUER_PREFIX` and `FENCING_DYNAMODB_SSLROOTCERT`;
    /// region, credentials and
    /// endpoint otherwise come from AWS's own variables and files when
    /// connecting.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] without `FENCING_DYNAMODB_TABLE`, or for a
    /// variable that is not a strict boolean.
    pub fn from_env() -> Result<Self> {
        let table = env("FENCING_DYNAMODB_TABLE")
            .ok_or_else(|| Error::invalid_input("FENCING_DYNAMODB_TABLE is not set"))?;
        let config = Self {
            table,
            endpoint: env("FENCING_DYNAMODB_ENDPOINT"),
            emulator: env_bool("FENCING_DYNAMODB_EMULATOR")?,
            region: env("FENCING_DYNAMODB_REGION"),
            create_table: env_bool("FENCING_DYNAMODB_CREATE_TABLE")?,
            issuer_prefix: env("FENCING_DYNAMODB_ISSUER_PREFIX"),
            ca_file: env("FENCING_DYNAMODB_SSLROOTCERT").map(PathBuf::from),
            credentials: None,
        };
        config.validate()?;
        Ok(config)
    }

    /// The endpoint (URL option `endpoint=`).
    #[must_use]
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The emulator's test keys (URL option `emulator=`); needs an endpoint.
    #[must_use]
    pub fn with_emulator(mut self, emulator: bool) -> Self {
        self.emulator = emulator;
        self
    }

    /// The region.
    #[must_use]
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Creates the table if it is missing, when connecting (the store or
    /// the issuer).
    #[must_use]
    pub fn with_create_table(mut self, create: bool) -> Self {
        self.create_table = create;
        self
    }

    /// The prefix of the issuer's items' `pk` (URL option `issuer_prefix=`,
    /// default [`DynamoIssuer::DEFAULT_PREFIX`]).
    #[must_use]
    pub fn with_issuer_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.issuer_prefix = Some(prefix.into());
        self
    }

    /// Trusts the CA certificates in `path` (PEM) instead of the system
    /// roots (URL option `sslrootcert=`), for an `https://` endpoint.
    #[must_use]
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Static credentials instead of AWS's chain.
    #[must_use]
    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// The table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The endpoint, if set.
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// Whether the emulator's test keys are used.
    pub fn emulator(&self) -> bool {
        self.emulator
    }

    /// DynamoDB's table names: 3 to 255 of `a-z A-Z 0-9 _ - .`.
    fn validate(&self) -> Result<()> {
        let t = &self.table;
        if t.is_empty() {
            return Err(Error::invalid_input(format!(
                "no table: expected {}",
                BACKEND.shape
            )));
        }
        let ok_chars = t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !(3..=255).contains(&t.len()) || !ok_chars {
            return Err(Error::invalid_input(format!(
                "table name {t:?}: DynamoDB takes 3 to 255 letters, digits, '_', '-' or '.'"
            )));
        }
        if self.emulator && self.endpoint.is_none() {
            return Err(Error::invalid_input(
                "emulator=true needs endpoint= (the emulator's address)",
            ));
        }
        fencing_aws::require_https(self.ca_file.as_deref(), self.endpoint.as_deref())
    }

    /// A client: the emulator's test keys with `emulator=true`, else
    /// [`with_credentials`](Self::with_credentials), else AWS's default
    /// chain, which must find credentials; and the endpoint it talks to
    /// (`None`: AWS itself).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when no credentials are found, naming where
    /// they are looked for and `emulator=true`.
    pub async fn client(&self) -> Result<(Client, Option<String>)> {
        self.validate()?;
        let options = AwsOptions {
            target: format!("dynamodb://{}", self.table),
            region: self.region.clone(),
            endpoint: self.endpoint.clone(),
            credentials: self.credentials.clone(),
            ca_file: self.ca_file.clone(),
            emulator: self.emulator,
        };
        let (sdk, endpoint) = fencing_aws::sdk_config(&options).await?;
        let config = aws_sdk_dynamodb::config::Builder::from(&sdk).build();
        Ok((Client::from_conf(config), endpoint))
    }

    /// Opens the store: [`client`](Self::client), then, with
    /// `create_table=true`, the table if it is missing.
    ///
    /// # Errors
    /// As [`client`](Self::client); with `create_table=true`, as creating
    /// the table ([`Error::UnsafeConfiguration`] for an existing table of
    /// another key schema).
    pub async fn connect_store(&self) -> Result<DynamoStore> {
        let (client, endpoint) = self.client().await?;
        if self.create_table {
            crate::table::create(&client, &self.table).await?;
        }
        Ok(DynamoStore::new(client, &self.table).with_endpoint(endpoint.as_deref()))
    }

    /// Opens the issuer on the same table: as
    /// [`connect_store`](Self::connect_store), its items' `pk` starting
    /// with the issuer prefix.
    ///
    /// # Errors
    /// As [`connect_store`](Self::connect_store).
    pub async fn connect_issuer(&self) -> Result<DynamoIssuer> {
        let (client, endpoint) = self.client().await?;
        if self.create_table {
            crate::table::create(&client, &self.table).await?;
        }
        let prefix = self
            .issuer_prefix
            .clone()
            .unwrap_or_else(|| DynamoIssuer::DEFAULT_PREFIX.to_owned());
        Ok(DynamoIssuer::new(client, &self.table)
            .with_prefix(prefix)
            .with_endpoint(endpoint.as_deref()))
    }
}

#[cfg(test)]
mod tests {
    use fencing_testkit::refusal::assert_refused;

    use super::*;

    #[test]
    fn good_urls() {
        let c = DynamoConfig::from_url("dynamodb://fencing").unwrap();
        assert_eq!(
            (c.table(), c.endpoint(), c.emulator()),
            ("fencing", None, false)
        );
        assert!(!c.create_table);
        let c = DynamoConfig::from_url(
            "dynamodb://my.table-1?region=eu-west-1&endpoint=http://127.0.0.1:5010&emulator=true&create_table=1",
        )
        .unwrap();
        assert_eq!(c.region.as_deref(), Some("eu-west-1"));
        assert_eq!(c.endpoint(), Some("http://127.0.0.1:5010"));
        assert!(c.emulator && c.create_table);
        let c = DynamoConfig::from_url(
            "dynamodb://tab?endpoint=https://127.0.0.1:9443&emulator=true&sslrootcert=/etc/ca.pem",
        )
        .unwrap();
        assert_eq!(
            c.ca_file.as_deref(),
            Some(std::path::Path::new("/etc/ca.pem"))
        );
        // To AWS itself (no endpoint), over HTTPS.
        assert!(DynamoConfig::from_url("dynamodb://tab?sslrootcert=/etc/ca.pem").is_ok());
        let c = DynamoConfig::from_url("dynamodb://tab?issuer_prefix=locks/").unwrap();
        assert_eq!(c.issuer_prefix.as_deref(), Some("locks/"));
        assert_eq!(
            DynamoConfig::from_url("dynamodb://tab")
                .unwrap()
                .issuer_prefix,
            None
        );
    }

    #[test]
    fn bad_urls_are_invalid_input_naming_the_problem() {
        assert_refused(
            DynamoConfig::from_url,
            &[
                ("s3://b", &["not a DynamoDB URL (dynamodb://TABLE)"]),
                ("dynamodb://", &["no table: expected dynamodb://TABLE"]),
                ("dynamodb://t1/k", &["\"/k\""]),
                ("dynamodb://ab", &["3 to 255"]),
                ("dynamodb://a%20b", &["3 to 255"]),
                (
                    "dynamodb://tab?endpont=x",
                    &[
                        "unknown option \"endpont\" in a dynamodb:// URL",
                        "known options: endpoint, emulator, region, create_table, issuer_prefix, sslrootcert",
                    ],
                ),
                (
                    "dynamodb://tab?create_table=ture",
                    &["create_table=\"ture\""],
                ),
                ("dynamodb://tab?emulator=true", &["needs endpoint="]),
                ("dynamodb://tab?region=", &["region=\"\": needs a value"]),
                (
                    "dynamodb://tab?endpoint=http://127.0.0.1:5010&sslrootcert=/ca.pem",
                    &["sslrootcert= is for an https:// endpoint"],
                ),
            ],
        );
    }

    #[test]
    fn every_option_of_the_descriptor_is_read() {
        for option in BACKEND.options() {
            let value = match option.kind {
                OptionKind::Bool => "false",
                OptionKind::Duration => "1s",
                OptionKind::Count => "1",
                OptionKind::Choice(words) => words[0],
                _ => "http://127.0.0.1:5010",
            };
            let url = format!("dynamodb://table?{}={value}", option.name);
            if let Err(e) = DynamoConfig::from_url(&url) {
                assert!(
                    !e.to_string().contains("but was not read"),
                    "{}: {e}",
                    option.name
                );
            }
        }
    }

    #[test]
    fn debug_hides_credentials() {
        let c = DynamoConfig::new("tab")
            .with_credentials(Credentials::new("AKID", "SECRET", None, None, "t"));
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("SECRET") && !shown.contains("AKID"),
            "{shown}"
        );
    }
}
