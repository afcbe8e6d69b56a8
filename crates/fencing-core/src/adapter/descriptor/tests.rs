//! The descriptor's checks.

use super::*;

const D: Descriptor = Descriptor {
    name: "x",
    title: "X",
    crate_name: "fencing-x",
    features: &["x"],
    schemes: &["x", "xs"],
    shape: "x://HOST",
    options: &[
        UrlOption::new("on", OptionKind::Bool, "a switch"),
        UrlOption::new("n", OptionKind::Count, "a number").only(&["xs"]),
        UrlOption::new("pw", OptionKind::Choice(&["a", "b"]), "a secret").secret(),
    ],
    tls_modes: &[TlsMode::Disable, TlsMode::VerifyFull],
    check: |_| Ok(()),
    open_issuer: None,
    open_store: None,
};

fn refusal(url: &str) -> String {
    match D.parse(url) {
        Err(Error::InvalidInput { message }) => message,
        other => panic!("{url}: expected InvalidInput, got {other:?}"),
    }
}

#[test]
fn options_are_checked_once_by_kind() {
    assert!(D.parse("x://h?on=yes&sslmode=verify-full&pw=a").is_ok());
    assert!(D.parse("xs://h?n=3").is_ok());
    assert!(refusal("x://h?on=si").contains("on=\"si\": expected true or false"));
    assert!(refusal("x://h?n=3").contains("unknown option \"n\" in a x:// URL"));
    assert!(refusal("xs://h?n=-1").contains("whole number"));
    assert!(refusal("x://h?sslmode=require").contains("disable, verify-full"));
    let secret = refusal("x://h?pw=hunter2");
    assert!(
        secret.contains("pw=\"***\"") && !secret.contains("hunter2"),
        "{secret}"
    );
    let typo = refusal("x://h?of=1");
    assert!(
        typo.contains("on, pw, sslmode, sslrootcert, sslcert, sslkey"),
        "{typo}"
    );
    assert!(refusal("y://h").contains("not an X URL (x://HOST)"));
    let titles = [
        "S3",
        "GCS",
        "Redis",
        "etcd",
        "Azure Blob",
        "SQL",
        "ZooKeeper",
    ];
    let read: Vec<String> = titles.iter().map(|t| with_article(t)).collect();
    assert_eq!(
        read,
        [
            "an S3",
            "a GCS",
            "a Redis",
            "an etcd",
            "an Azure Blob",
            "an SQL",
            "a ZooKeeper"
        ]
    );
}

#[test]
fn tls_options_are_the_ones_tls_options_take() {
    let names: Vec<&str> = tls_options(&[]).iter().map(|o| o.name).collect();
    assert_eq!(names, TlsOptions::URL_OPTIONS);
}

#[test]
fn an_option_left_untaken_is_a_bug_not_ignored() {
    let url = D.parse("x://h?on=1").unwrap();
    let e = D.finish(url).unwrap_err().to_string();
    assert!(e.contains("\"on\" is declared by fencing-x"), "{e}");
}
