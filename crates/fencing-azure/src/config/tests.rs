use fencing_testkit::refusal::assert_refused;

use super::*;

/// The portal's "Blob service SAS URL", pasted as the endpoint
/// (percent-encoded, as the URL grammar asks): refused, and the
/// signature shows neither in the refusal nor in a `Debug` print.
#[test]
fn a_sas_url_as_the_endpoint_is_refused_without_showing_the_signature() {
    let url =
        "az://c?endpoint=https%3A%2F%2Facct.blob.core.windows.net%2F%3Fsv%3D1%26sig%3DSIGNATURE";
    let message = fencing_testkit::refusal::invalid_input_message(url, AzureConfig::from_url(url));
    assert!(
        message.contains("has a query") && !message.contains("SIGNATURE"),
        "{message}"
    );
    let config =
        AzureConfig::new("c").with_endpoint("https://user:SIGNATURE@acct.blob.core.windows.net");
    assert!(!format!("{config:?}").contains("SIGNATURE"), "{config:?}");
}

#[test]
fn good_urls() {
    let c = AzureConfig::from_url(
        "az://c?endpoint=http://127.0.0.1:10000/devstoreaccount1&emulator=true",
    )
    .unwrap();
    assert_eq!(c.container(), "c");
    assert!(c.common.emulator);
    let c = AzureConfig::from_url(
        "az://c?account=acct&sas=sv%3D1%26sig%3Dx&adopt_unfenced=true&sas_lifetime=10m",
    )
    .unwrap();
    assert_eq!(c.endpoint(), Some("https://acct.blob.core.windows.net"));
    assert!(matches!(&c.credential, Credential::Sas(s) if s == "sv=1&sig=x"));
    assert_eq!(c.sas_lifetime, Some(Duration::from_secs(600)));
    assert!(c.common.adopt_unfenced);
    assert!(!format!("{c:?}").contains("sig"), "{c:?}");
}

#[test]
fn bad_urls_are_invalid_input_naming_the_problem() {
    assert_refused(
        AzureConfig::from_url,
        &[
            ("s3://c", &["not an Azure Blob URL (az://CONTAINER)"]),
            (
                "az://?endpoint=x",
                &["no container: expected az://CONTAINER"],
            ),
            ("az://c/blob", &["\"/blob\""]),
            (
                "az://c?key=x",
                &[
                    "unknown option \"key\" in a az:// URL",
                    "known options: endpoint, emulator, adopt_unfenced, lease_prefix, lease_expiry, account, sas, sas_lifetime",
                ],
            ),
            ("az://c?sas=", &["sas=\"***\": needs a value"]),
            ("az://c?emulator=true", &["needs endpoint="]),
            ("az://c?endpoint=x&account=y", &["not both"]),
            ("az://c?sas_lifetime=10", &["sas_lifetime=\"10\""]),
            ("az://c?adopt_unfenced=maybe", &["adopt_unfenced"]),
        ],
    );
}

#[test]
fn connection_strings() {
    let c = AzureConfig::new("c")
        .with_connection_string("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net")
        .unwrap();
    assert_eq!(c.endpoint(), Some("https://acct.blob.core.windows.net"));
    assert!(
        matches!(&c.credential, Credential::AccountKey { account: Some(a), .. } if a == "acct")
    );
    let c = AzureConfig::new("c")
        .with_connection_string("UseDevelopmentStorage=true")
        .unwrap();
    assert!(c.common.emulator);
    assert!(
        AzureConfig::new("c")
            .with_connection_string("AccountName=a")
            .is_err()
    );
    assert_eq!(
        account_of("http://127.0.0.1:10000/devstoreaccount1").as_deref(),
        Some("devstoreaccount1")
    );
    assert_eq!(
        account_of("https://acct.blob.core.windows.net").as_deref(),
        Some("acct")
    );
}
